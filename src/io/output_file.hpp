// The file writer the .npy and .safetensors writers share: all or nothing.
#pragma once

#include <cstddef>
#include <string>

#include "io/file_common.hpp"

namespace attnkit::io {

// A file written under a temporary name beside its target and renamed over it by commit(), so that
// a failed write (a full disk, an error in the middle) leaves the target as it was and no partial
// file behind. A target that exists and is not a regular file (/dev/null, /dev/stdout, a FIFO) is
// written in place instead: it cannot be replaced by a rename, and holds nothing to protect. A
// symbolic link is followed, so the file it points to is replaced, not the link. Every failure is
// an io_error naming the target.
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
  std::string target_;       // where the file ends up: the path, or the file a link points to
  std::string temp_;         // empty when writing in place
  FilePtr file_;
  bool committed_ = false;
};

}  // namespace attnkit::io
