// Reading token label files for `attnkit heatmap`.
#include "heatmap/tokens.hpp"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "attnkit/error.hpp"

namespace attnkit::cli {

std::vector<std::string> read_tokens(const std::string& path, std::string_view flag) {
  // A regular file, checked before opening: a FIFO would block the open (the library's readers check
  // the same).
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  if (ec) throw Error(ErrorCode::io_error, std::string(flag) + ": cannot open " + path + ": " + ec.message());
  if (!regular) throw Error(ErrorCode::io_error, std::string(flag) + ": cannot read " + path + ": not a regular file");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(ErrorCode::io_error, std::string(flag) + ": cannot open " + path);
  std::vector<std::string> tokens;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(std::move(line));
  }
  if (file.bad()) throw Error(ErrorCode::io_error, std::string(flag) + ": error reading " + path);
  return tokens;
}

void check_token_count(const std::vector<std::string>& tokens, std::int64_t expected, std::string_view flag,
                       const std::string& path, std::string_view axis, std::string_view hint) {
  if (static_cast<std::int64_t>(tokens.size()) == expected) return;
  std::string message = std::string(flag) + " " + path + " has " + std::to_string(tokens.size()) +
                        " labels (one per line) but the " + std::string(axis) + " = " + std::to_string(expected);
  if (!hint.empty()) message += "; " + std::string(hint);
  throw Error(ErrorCode::invalid_shape, message);
}

}  // namespace attnkit::cli
