// A small command-line parser for the attnkit tool: `--name value`, `--name=value`, boolean flags,
// `-h` for `--help`, and positional words. Numbers, comma lists and "a,b;c,d" matrices are parsed
// here too, so every command reports a bad value the same way: naming the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::cli {

// Bad usage (unknown flag, missing value, malformed number): the tool exits with code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One flag a command accepts. Names are given without the leading "--".
struct FlagSpec {
  std::string_view name;
  bool takes_value = true;
};

class Args {
 public:
  // Parses `words` (everything after the command name) against `flags`. Throws UsageError on an
  // unknown flag, a value-taking flag without a value, a boolean flag given a value, or a flag
  // given twice. A value may start with '-' (`--window -1,4`): a value-taking flag always consumes
  // the next word. "--" ends the flags; every later word is positional.
  static Args parse(std::span<const std::string> words, std::span<const FlagSpec> flags);

  bool has(std::string_view name) const;                          // given at all
  std::optional<std::string> value(std::string_view name) const;  // value of a value-taking flag
  std::string required(std::string_view name) const;              // throws UsageError if absent
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;  // boolean flags map to ""
  std::vector<std::string> positionals_;
};

// Value parsers. `flag` (e.g. "--scale") names the source in the UsageError message. Surrounding
// spaces are ignored and the Unicode minus sign "−" is read as '-', so values copied from
// typeset text work.
double parse_number(std::string_view text, std::string_view flag);
std::int64_t parse_integer(std::string_view text, std::string_view flag);
std::uint64_t parse_unsigned(std::string_view text, std::string_view flag);
std::vector<double> parse_number_list(std::string_view text, std::string_view flag);     // "1,2,3"
std::vector<std::int64_t> parse_integer_list(std::string_view text, std::string_view flag);
// Rows separated by ';', numbers by ','; every row must have the same length.
std::vector<std::vector<double>> parse_matrix(std::string_view text, std::string_view flag);

}  // namespace attnkit::cli
