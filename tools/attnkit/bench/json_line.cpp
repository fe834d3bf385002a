// JSON Lines output.
#include "bench/json_line.hpp"

#include <cmath>
#include <cstdio>

namespace attnkit::bench {

namespace {

constexpr int kSignificantDigits = 6;  // timings are noisy well before the 6th digit

std::string number_text(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*g", kSignificantDigits, value);
  return buffer;
}

}  // namespace

std::string json_quoted(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {  // control characters must be escaped in JSON strings
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

void JsonLine::key(std::string_view name) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_quoted(name) + ": ";
}

JsonLine& JsonLine::text(std::string_view k, std::string_view value) {
  key(k);
  body_ += json_quoted(value);
  return *this;
}

JsonLine& JsonLine::number(std::string_view k, double value) {
  key(k);
  body_ += number_text(value);
  return *this;
}

JsonLine& JsonLine::integer(std::string_view k, std::int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::boolean(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::null(std::string_view k) {
  key(k);
  body_ += "null";
  return *this;
}

JsonLine& JsonLine::numbers(std::string_view k, const std::vector<double>& values) {
  key(k);
  body_ += "[";
  for (std::size_t i = 0; i < values.size(); ++i) body_ += (i ? ", " : "") + number_text(values[i]);
  body_ += "]";
  return *this;
}

JsonLine& JsonLine::integers(std::string_view k, const std::vector<int>& values) {
  key(k);
  body_ += "[";
  for (std::size_t i = 0; i < values.size(); ++i) body_ += (i ? ", " : "") + std::to_string(values[i]);
  body_ += "]";
  return *this;
}

JsonLine& JsonLine::texts(std::string_view k, const std::vector<std::string>& values) {
  key(k);
  body_ += "[";
  for (std::size_t i = 0; i < values.size(); ++i) body_ += (i ? ", " : "") + json_quoted(values[i]);
  body_ += "]";
  return *this;
}

}  // namespace attnkit::bench
