// Reading token label files for `attnkit heatmap`.
#include "heatmap/tokens.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sstream>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

#include "attnkit/error.hpp"

namespace attnkit::cli {

namespace {

// The whole file, opened once and then asked what it is (never checked by path first, which a
// FIFO swapped in between would slip past): O_NONBLOCK lets a FIFO's open return at once.
std::string read_regular_file(const std::string& path, std::string_view flag) {
  const auto failure = [&](const std::string& what) {
    return Error(ErrorCode::io_error, std::string(flag) + ": " + what);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw failure("cannot open " + path + ": " + std::generic_category().message(errno));
  struct stat status {};
  const bool regular = ::fstat(fd, &status) == 0 && S_ISREG(status.st_mode);
  const int flags = regular ? ::fcntl(fd, F_GETFL) : -1;
  if (!regular || flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    ::close(fd);
    throw failure("cannot read " + path + ": not a regular file");
  }
  std::string text;
  char buffer[1 << 14];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw failure("error reading " + path + ": " + std::generic_category().message(error));
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

std::vector<std::string> read_tokens(const std::string& path, std::string_view flag) {
  std::istringstream file(read_regular_file(path, flag));
  std::vector<std::string> tokens;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(std::move(line));
  }
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
