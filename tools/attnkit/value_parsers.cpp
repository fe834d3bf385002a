// The value parsers of the attnkit tool.
#include "value_parsers.hpp"

#include <charconv>
#include <cstdio>
#include <optional>
#include <system_error>

namespace attnkit::cli {

namespace {

constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";  // U+2212, as typeset formulas write −0.2
constexpr char kListSeparator = ',';
constexpr char kRowSeparator = ';';

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// Trimmed copy with the Unicode minus replaced by '-'.
std::string normalized(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  text = text.substr(first, text.find_last_not_of(" \t") - first + 1);
  std::string result(text);
  for (auto pos = result.find(kUnicodeMinus); pos != std::string::npos; pos = result.find(kUnicodeMinus, pos)) {
    result.replace(pos, kUnicodeMinus.size(), "-");
  }
  return result;
}

// Parses all of `text` as a T with std::from_chars; nullopt if anything is left over.
template <class T>
std::optional<T> parse_whole(std::string_view text) {
  const std::string clean = normalized(text);
  T value{};
  const char* end = clean.data() + clean.size();
  const auto [ptr, ec] = std::from_chars(clean.data(), end, value);
  if (clean.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (std::size_t pos = text.find(separator); pos != std::string_view::npos; pos = text.find(separator, start)) {
    parts.push_back(text.substr(start, pos - start));
    start = pos + 1;
  }
  parts.push_back(text.substr(start));
  return parts;
}

// What a list holds, for messages: "numbers" / "a number".
struct Noun {
  std::string_view plural, singular;
};
constexpr Noun kNumbers{"numbers", "a number"};
constexpr Noun kIntegers{"integers", "an integer"};

template <class T>
std::vector<T> parse_list(std::string_view text, std::string_view flag, Noun noun) {
  if (normalized(text).empty()) {
    throw UsageError(std::string(flag) + ": expected a comma-separated list of " + std::string(noun.plural) +
                     ", got an empty value");
  }
  std::vector<T> values;
  const auto parts = split(text, kListSeparator);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto value = parse_whole<T>(parts[i]);
    if (!value) {
      throw UsageError(std::string(flag) + ": item " + std::to_string(i + 1) + " of " + quoted(text) + " (" +
                       quoted(normalized(parts[i])) + ") is not " + std::string(noun.singular));
    }
    values.push_back(*value);
  }
  return values;
}

}  // namespace

double parse_number(std::string_view text, std::string_view flag) {
  const auto value = parse_whole<double>(text);
  if (!value) throw UsageError(std::string(flag) + ": " + quoted(text) + " is not a number");
  return *value;
}

std::int64_t parse_integer(std::string_view text, std::string_view flag) {
  const auto value = parse_whole<std::int64_t>(text);
  if (!value) throw UsageError(std::string(flag) + ": " + quoted(text) + " is not an integer");
  return *value;
}

std::uint64_t parse_unsigned(std::string_view text, std::string_view flag) {
  const auto value = parse_whole<std::uint64_t>(text);
  if (!value) throw UsageError(std::string(flag) + ": " + quoted(text) + " is not a non-negative integer");
  return *value;
}

std::vector<double> parse_number_list(std::string_view text, std::string_view flag) {
  return parse_list<double>(text, flag, kNumbers);
}

std::vector<std::int64_t> parse_integer_list(std::string_view text, std::string_view flag) {
  return parse_list<std::int64_t>(text, flag, kIntegers);
}

std::vector<std::vector<double>> parse_matrix(std::string_view text, std::string_view flag) {
  std::vector<std::vector<double>> rows;
  const auto parts = split(text, kRowSeparator);
  for (std::size_t r = 0; r < parts.size(); ++r) {
    const std::string row_flag = std::string(flag) + " row " + std::to_string(r + 1);
    rows.push_back(parse_number_list(parts[r], row_flag));
    if (rows.back().size() != rows.front().size()) {
      throw UsageError(std::string(flag) + ": row " + std::to_string(r + 1) + " has " +
                       std::to_string(rows.back().size()) + " numbers but row 1 has " +
                       std::to_string(rows.front().size()) + " (rows are separated by ';', numbers by ',')");
    }
  }
  return rows;
}

std::string short_number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

}  // namespace attnkit::cli
