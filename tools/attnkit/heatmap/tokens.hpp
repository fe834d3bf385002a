// attnkit heatmap — token labels for the axes: one label per line of a text file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::cli {

// The lines of `path` (a final newline does not add an empty label; "\r\n" endings are accepted).
// Raises Error(io_error) naming `flag` and the path when the file cannot be read.
std::vector<std::string> read_tokens(const std::string& path, std::string_view flag);

// Raises Error(invalid_shape) unless there are `expected` labels: "--tokens t.txt has 5 labels but
// the keys number m = 7". `hint` is appended to the message when not empty.
void check_token_count(const std::vector<std::string>& tokens, std::int64_t expected, std::string_view flag,
                       const std::string& path, std::string_view axis, std::string_view hint = {});

}  // namespace attnkit::cli
