// One JSON object on one line, built field by field: the bench's and the lab's --json output (JSON
// Lines), written by nlohmann/json (keys in the order given, strings escaped, invalid UTF-8 replaced
// by U+FFFD rather than written through). Separate names per value type, because an overload set
// would send a string literal to bool.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnkit::bench {

class JsonLine {
 public:
  JsonLine& text(std::string_view key, std::string_view value);
  JsonLine& number(std::string_view key, double value);  // 6 significant digits; non-finite values are null
  JsonLine& integer(std::string_view key, std::int64_t value);
  JsonLine& boolean(std::string_view key, bool value);
  JsonLine& null(std::string_view key);
  JsonLine& numbers(std::string_view key, const std::vector<double>& values);
  JsonLine& integers(std::string_view key, const std::vector<int>& values);
  JsonLine& texts(std::string_view key, const std::vector<std::string>& values);

  std::string str() const;  // the object on one line, without a newline

 private:
  nlohmann::ordered_json object_ = nlohmann::ordered_json::object();
};

}  // namespace attnkit::bench
