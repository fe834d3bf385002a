// JSON Lines output.
#include "bench/json_line.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace attnkit::bench {

namespace {

constexpr int kSignificantDigits = 6;  // timings are noisy well before the 6th digit

// The value rounded to 6 significant digits (so the line prints "1.23457", not 17 digits of noise),
// or null when it is not finite (JSON has no NaN or infinity).
nlohmann::ordered_json number_value(double value) {
  if (!std::isfinite(value)) return nullptr;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*g", kSignificantDigits, value);
  return std::strtod(buffer, nullptr);
}

}  // namespace

JsonLine& JsonLine::text(std::string_view key, std::string_view value) {
  object_[std::string(key)] = std::string(value);
  return *this;
}

JsonLine& JsonLine::number(std::string_view key, double value) {
  object_[std::string(key)] = number_value(value);
  return *this;
}

JsonLine& JsonLine::integer(std::string_view key, std::int64_t value) {
  object_[std::string(key)] = value;
  return *this;
}

JsonLine& JsonLine::boolean(std::string_view key, bool value) {
  object_[std::string(key)] = value;
  return *this;
}

JsonLine& JsonLine::null(std::string_view key) {
  object_[std::string(key)] = nullptr;
  return *this;
}

JsonLine& JsonLine::numbers(std::string_view key, const std::vector<double>& values) {
  auto& array = object_[std::string(key)] = nlohmann::ordered_json::array();
  for (double value : values) array.push_back(number_value(value));
  return *this;
}

JsonLine& JsonLine::integers(std::string_view key, const std::vector<int>& values) {
  object_[std::string(key)] = values;
  return *this;
}

JsonLine& JsonLine::texts(std::string_view key, const std::vector<std::string>& values) {
  object_[std::string(key)] = values;
  return *this;
}

// nlohmann/json writes each key and value (escapes, numbers, U+FFFD for invalid UTF-8); the line keeps
// the spacing people read and grep: {"key": value, "list": [1, 2]}.
std::string JsonLine::str() const {
  const auto dump = [](const nlohmann::ordered_json& value) {
    return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  const auto value_text = [&](const nlohmann::ordered_json& value) {
    if (!value.is_array()) return dump(value);
    std::string out = "[";
    for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + dump(value[i]);
    return out + "]";
  };
  std::string out = "{";
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (it != object_.begin()) out += ", ";
    out += dump(nlohmann::ordered_json(it.key())) + ": " + value_text(it.value());
  }
  return out + "}";
}

}  // namespace attnkit::bench
