// What the file readers and writers (.npy, .safetensors) share: their error messages, a read-only
// file and a read-only memory buffer that check every length against what remains, and small
// element helpers.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <sys/stat.h>
#include <unistd.h>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::io {

inline constexpr std::size_t kMaxQuotedChars = 40;  // longest piece of file text echoed in a message

[[noreturn]] inline void fail(ErrorCode code, const std::string& source, const std::string& problem) {
  throw Error(code, source + ": " + problem);
}

[[noreturn]] inline void format_fail(const std::string& source, const std::string& problem) {
  fail(ErrorCode::format_error, source, problem);
}

[[noreturn]] inline void truncated(const std::string& source, std::size_t needed, std::uint64_t left,
                                   const std::string& what) {
  format_fail(source, "file is truncated in the " + what + " (" + std::to_string(needed) + " bytes needed, " +
                          std::to_string(left) + " left)");
}

// Text made safe to print: control and non-ASCII bytes as \xNN, long text cut short.
inline std::string printable(std::string_view text, std::size_t limit = kMaxQuotedChars) {
  std::string out;
  for (std::size_t i = 0; i < std::min(text.size(), limit); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

inline std::string in_quotes(std::string_view text, std::size_t limit = kMaxQuotedChars) {
  return "'" + printable(text, limit) + "'";
}

struct FileCloser {
  void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// The system's text for an errno value (the current errno by default).
inline std::string errno_text(int error = errno) { return std::generic_category().message(error); }

// What a file that is not a regular file is, for messages.
inline const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  return "not a regular file";
}

// A regular file opened for reading that knows how many bytes remain, so that every length read from
// the file is checked before it is used.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path), file_(open(path, size_)) {}

  std::uint64_t remaining() const { return size_ - offset_; }

  // Reads exactly `n` bytes of the part named `what`.
  void read(void* dst, std::size_t n, const std::string& what) {
    if (n > remaining()) truncated(path_, n, remaining(), what);
    if (n != 0 && std::fread(dst, 1, n, file_.get()) != n) {
      if (std::ferror(file_.get())) fail(ErrorCode::io_error, path_, "read error in the " + what + ": " + errno_text());
      format_fail(path_, "file is truncated in the " + what + " (it shrank while being read)");
    }
    offset_ += n;
  }

 private:
  // Opened once, then asked what it is: checking the path first and opening it after would let it
  // change in between. O_NONBLOCK makes opening a FIFO return at once instead of waiting for a
  // writer; it is cleared before reading, once the descriptor is known to be a regular file.
  static FilePtr open(const std::string& path, std::uint64_t& size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail(ErrorCode::io_error, path, "cannot open for reading: " + errno_text());
    struct stat status {};
    if (::fstat(fd, &status) != 0) {
      const std::string problem = errno_text();
      ::close(fd);
      fail(ErrorCode::io_error, path, "cannot read: " + problem);
    }
    if (!S_ISREG(status.st_mode)) {
      ::close(fd);
      fail(ErrorCode::io_error, path, std::string("cannot read: it is ") + file_kind(status.st_mode) +
                                          ", not a regular file");
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      const std::string problem = errno_text();
      ::close(fd);
      fail(ErrorCode::io_error, path, "cannot read: " + problem);
    }
    FilePtr file(::fdopen(fd, "rb"));
    if (!file) {
      const std::string problem = errno_text();
      ::close(fd);
      fail(ErrorCode::io_error, path, "cannot open for reading: " + problem);
    }
    size = static_cast<std::uint64_t>(status.st_size);
    return file;
  }

  const std::string& path_;
  std::uint64_t size_ = 0;
  FilePtr file_;
  std::uint64_t offset_ = 0;
};

// A tensor for data read from `source`: running out of memory names the file and the part.
inline Tensor allocate_for(const std::string& source, const std::string& what, DType dtype,
                           const std::vector<std::int64_t>& shape) {
  try {
    return Tensor(dtype, shape);
  } catch (const Error& error) {
    fail(error.code(), source, what + ": " + error.what());
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::out_of_memory, source, what + ": out of memory");
  }
}

// The bytes of a whole file in memory, read like an InputFile: every length is checked against
// what remains.
class MemoryInput {
 public:
  MemoryInput(std::span<const std::byte> bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  std::uint64_t remaining() const { return bytes_.size() - offset_; }

  void read(void* dst, std::size_t n, const std::string& what) {
    if (n > remaining()) truncated(source_, n, remaining(), what);
    if (n != 0) std::memcpy(dst, bytes_.data() + offset_, n);
    offset_ += n;
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& source_;
  std::size_t offset_ = 0;
};

// Files may hold any non-zero byte for true; store 1 so that the bytes are valid C++ bools.
inline void normalize_bools(Tensor& tensor) {
  auto* bytes = static_cast<unsigned char*>(tensor.raw());
  for (std::int64_t i = 0; i < tensor.numel(); ++i) bytes[i] = bytes[i] != 0 ? 1 : 0;
}

// Row-major strides (in elements) for a contiguous tensor of this shape. A tensor without elements
// is never read, and the product of its other sizes need not fit in 64 bits (Tensor accepts shapes
// such as {0, 2^40, 2^40}), so its strides are all 0.
inline std::vector<std::int64_t> c_order_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size(), 0);
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return strides;
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];  // at most the element count, which fits
  }
  return strides;
}

// Whether elements of these sizes and strides (in elements) lie in C order without gaps.
inline bool is_c_contiguous(const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& strides) {
  std::int64_t expected = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

}  // namespace attnkit::io
