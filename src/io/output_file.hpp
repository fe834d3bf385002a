// What the .npy and .safetensors writers share: a file written all or nothing, and the elements of a
// strided tensor written into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"

#include "io/file_common.hpp"
#include "io/replace_file.hpp"

namespace attnkit::io {

// A file written under a short temporary name beside its target and renamed over it by commit(), so
// that a failed write (a full disk, an error in the middle) leaves the target as it was and no
// partial file behind. The target is checked first (io/replace_file.hpp: not a directory, a
// directory this user may write in, an existing file this user may write, one name only), and a
// replaced file keeps its mode (and, as root, its owner and group). A target that exists and is not
// a regular file (/dev/null, /dev/stdout, a FIFO) is written in place instead: it cannot be replaced
// by a rename, and holds nothing to protect. A symbolic link is followed, so the file it points to
// is replaced, not the link. Every failure is an io_error naming the target.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // removes the temporary file unless committed

  void write(const void* data, std::size_t n);

  // Flushes, closes (a full disk often shows up only here) and renames over the target.
  void commit();

 private:
  const std::string& path_;  // the target as the caller named it, for messages
  OutputTarget target_;
  std::string temp_;         // empty when writing in place
  FilePtr file_;
  bool committed_ = false;
};

// Elements to write: any rank, strides in elements (may be zero or negative).
struct StridedElements {
  const std::byte* base = nullptr;
  DType dtype = DType::f32;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
};

// Writes the elements in logical C order, each as `file_dtype`: the elements' own dtype, or f32 for
// bf16 elements (widened exactly); bools are written as 0/1 whatever byte holds them. Contiguous data
// that needs no conversion is written directly; anything else is gathered through a bounded buffer.
void write_elements(OutputFile& out, const StridedElements& src, DType file_dtype);

}  // namespace attnkit::io
