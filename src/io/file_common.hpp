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
#include <filesystem>
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

inline std::string errno_text() { return std::generic_category().message(errno); }

// What a path that is not a regular file is, for messages.
inline const char* file_kind(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::directory: return "a directory";
    case std::filesystem::file_type::fifo: return "a FIFO (named pipe)";
    case std::filesystem::file_type::socket: return "a socket";
    case std::filesystem::file_type::block: return "a block device";
    case std::filesystem::file_type::character: return "a character device";
    default: return "not a regular file";
  }
}

// Inputs are regular files (or links to one), checked before opening: opening a FIFO would wait for a
// writer, possibly forever, and a directory or a device fails late or never ends.
inline void require_regular_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec) fail(ErrorCode::io_error, path, "cannot open for reading: " + ec.message());
  if (!std::filesystem::is_regular_file(status)) {
    fail(ErrorCode::io_error, path, std::string("cannot read: it is ") + file_kind(status.type()) +
                                        ", not a regular file");
  }
}

// A regular file opened for reading that knows how many bytes remain, so that every length read from
// the file is checked before it is used.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path), file_(open(path)) {
    std::error_code ec;
    size_ = std::filesystem::file_size(path, ec);  // also rejects a path replaced since the check
    if (ec) fail(ErrorCode::io_error, path, "cannot read: " + ec.message());
  }

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
  static FilePtr open(const std::string& path) {
    require_regular_file(path);
    FilePtr file(std::fopen(path.c_str(), "rb"));
    if (!file) fail(ErrorCode::io_error, path, "cannot open for reading: " + errno_text());
    return file;
  }

  const std::string& path_;
  FilePtr file_;
  std::uint64_t size_ = 0;
  std::uint64_t offset_ = 0;
};

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
