// The argument parser and the value parsers of the attnkit tool.
#include "args.hpp"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace attnkit::cli {

namespace {

constexpr std::string_view kFlagPrefix = "--";
constexpr std::string_view kShortHelp = "-h";
constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";  // U+2212, as typeset formulas write −0.2
constexpr char kListSeparator = ',';
constexpr char kRowSeparator = ';';

const FlagSpec* find_flag(std::span<const FlagSpec> flags, std::string_view name) {
  const auto it = std::find_if(flags.begin(), flags.end(), [&](const FlagSpec& f) { return f.name == name; });
  return it == flags.end() ? nullptr : &*it;
}

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

Args Args::parse(std::span<const std::string> words, std::span<const FlagSpec> flags) {
  Args args;
  bool flags_ended = false;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (flags_ended || word.empty() || word[0] != '-' || word == "-") {
      args.positionals_.push_back(word);
      continue;
    }
    if (word == kFlagPrefix) {
      flags_ended = true;
      continue;
    }
    std::string name, value;
    bool has_inline_value = false;
    if (word == kShortHelp) {
      name = "help";
    } else if (word.starts_with(kFlagPrefix)) {
      const std::string_view body = std::string_view(word).substr(kFlagPrefix.size());
      const auto eq = body.find('=');
      name = std::string(body.substr(0, eq));
      if (eq != std::string_view::npos) {
        value = std::string(body.substr(eq + 1));
        has_inline_value = true;
      }
    } else {
      throw UsageError("unknown option " + quoted(word) + " (flags are spelled --name)");
    }
    const FlagSpec* spec = find_flag(flags, name);
    if (spec == nullptr) throw UsageError("unknown flag --" + name);
    if (args.values_.contains(name)) throw UsageError("flag --" + name + " is given more than once");
    if (!spec->takes_value && has_inline_value) throw UsageError("flag --" + name + " takes no value");
    if (spec->takes_value && !has_inline_value) {
      if (i + 1 >= words.size()) throw UsageError("flag --" + name + " needs a value");
      value = words[++i];
    }
    args.values_.emplace(name, value);
  }
  return args;
}

bool Args::has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::optional<std::string> Args::value(std::string_view name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::required(std::string_view name) const {
  auto v = value(name);
  if (!v) throw UsageError("missing required flag --" + std::string(name));
  return *v;
}

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

}  // namespace attnkit::cli
