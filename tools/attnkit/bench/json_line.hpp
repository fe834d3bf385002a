// One JSON object on one line, built field by field: the bench's --json output (JSON Lines).
// Separate names per value type, because an overload set would send a string literal to bool.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::bench {

class JsonLine {
 public:
  JsonLine& text(std::string_view key, std::string_view value);
  JsonLine& number(std::string_view key, double value);  // non-finite values are written as null
  JsonLine& integer(std::string_view key, std::int64_t value);
  JsonLine& boolean(std::string_view key, bool value);
  JsonLine& null(std::string_view key);
  JsonLine& numbers(std::string_view key, const std::vector<double>& values);
  JsonLine& integers(std::string_view key, const std::vector<int>& values);
  JsonLine& texts(std::string_view key, const std::vector<std::string>& values);

  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view name);
  std::string body_;
};

std::string json_quoted(std::string_view text);  // "..." with JSON escapes

}  // namespace attnkit::bench
