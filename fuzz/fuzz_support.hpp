// What the fuzz targets share: reading structured choices from the fuzzer's bytes, reporting a
// finding, and a scratch file for round trips. Independent of libFuzzer, so that the same targets
// also build with GCC as replay programs (fuzz/replay_main.cpp).
#pragma once

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace attnkit::fuzz {

// A property the library broke. Aborting is what both libFuzzer and the replay programs report as
// a crash, with the input that caused it.
[[noreturn]] inline void finding(std::string_view what, std::string_view detail = {}) {
  std::fprintf(stderr, "\nattnkit fuzz finding: %.*s%s%.*s\n", static_cast<int>(what.size()), what.data(),
               detail.empty() ? "" : ": ", static_cast<int>(detail.size()), detail.data());
  std::abort();
}

inline void check(bool property, std::string_view what, std::string_view detail = {}) {
  if (!property) finding(what, detail);
}

// The input as a stream of choices. Past the end every read gives 0, so a short input still
// decodes to a complete (default) case and the fuzzer grows inputs only where length pays.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  std::uint8_t byte() { return pos_ < bytes_.size() ? bytes_[pos_++] : 0; }

  // `n` bytes, little-endian (n <= 8).
  std::uint64_t bits(int n) {
    std::uint64_t value = 0;
    for (int i = 0; i < n; ++i) value |= std::uint64_t{byte()} << (8 * i);
    return value;
  }

  bool flag() { return (byte() & 1) != 0; }

  // One entry of a table, chosen by the next byte.
  template <class T, std::size_t N>
  const T& pick(const std::array<T, N>& table) {
    return table[byte() % N];
  }

  std::span<const std::uint8_t> rest() {
    const auto tail = bytes_.subspan(pos_);
    pos_ = bytes_.size();
    return tail;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

// A file of this process's own in the temporary directory, for write-then-read round trips;
// removed when the target is done with it.
class ScratchFile {
 public:
  explicit ScratchFile(std::string_view suffix)
      : path_((std::filesystem::temp_directory_path() /
               ("attnkit-fuzz-" + std::to_string(::getpid()) + std::string(suffix)))
                  .string()) {}
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace attnkit::fuzz
