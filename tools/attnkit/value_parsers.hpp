// The attnkit tool's value parsers: numbers, comma lists and "a,b;c,d" matrices, read the same way
// by every command (command_line.hpp hands them the flags' values) and reported the same way:
// naming the flag and the bad value.
#pragma once

#include <cstdint>
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

// A number for a message, in at most 6 significant digits ("1e+300", not 300 digits).
std::string short_number(double x);

}  // namespace attnkit::cli
