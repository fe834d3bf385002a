#include "io/output_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <unistd.h>

namespace attnkit::io {
namespace {

constexpr std::size_t kWriteChunkBytes = std::size_t{1} << 20;  // gather buffer for strided writes

// One element in its file representation: bf16 widened to f32 when the file holds f32, bools as 0/1,
// anything else as it is.
void store_file_element(const std::byte* src, DType dtype, DType file_dtype, std::byte* dst) {
  if (dtype == DType::bf16 && file_dtype == DType::f32) {
    bfloat16 x;
    std::memcpy(&x.bits, src, sizeof x.bits);
    const float f = to_float(x);
    std::memcpy(dst, &f, sizeof f);
  } else if (dtype == DType::boolean) {
    *dst = std::byte{static_cast<unsigned char>(*src != std::byte{0} ? 1 : 0)};
  } else {
    std::memcpy(dst, src, dtype_size(dtype));
  }
}

}  // namespace

OutputFile::OutputFile(const std::string& path) : path_(path), target_(check_output(path, path)) {
  if (target_.in_place) {
    file_.reset(std::fopen(target_.path.c_str(), "wb"));  // a device or FIFO: written in place
    if (!file_) fail(ErrorCode::io_error, path, "cannot open for writing: " + errno_text());
    return;
  }
  const int fd = create_temp_beside(target_, temp_);
  file_.reset(::fdopen(fd, "wb"));
  if (!file_) {
    const std::string error = errno_text();
    ::close(fd);
    std::remove(temp_.c_str());
    fail(ErrorCode::io_error, path, "cannot open for writing: " + error);
  }
}

OutputFile::~OutputFile() {
  if (committed_ || temp_.empty()) return;
  file_.reset();
  std::remove(temp_.c_str());
}

void OutputFile::write(const void* data, std::size_t n) {
  if (n != 0 && std::fwrite(data, 1, n, file_.get()) != n) fail(ErrorCode::io_error, path_, "write failed: " + errno_text());
}

void OutputFile::commit() {
  if (std::fflush(file_.get()) != 0) fail(ErrorCode::io_error, path_, "write failed: " + errno_text());
  if (!temp_.empty()) keep_attributes(::fileno(file_.get()), target_);
  if (std::fclose(file_.release()) != 0) fail(ErrorCode::io_error, path_, "write failed on close: " + errno_text());
  if (!temp_.empty() && rename_file(temp_, target_.path) != 0) {
    fail(ErrorCode::io_error, path_, "cannot replace with the written file: " + errno_text());
  }
  committed_ = true;
}

void write_elements(OutputFile& out, const StridedElements& src, DType file_dtype) {
  std::int64_t count = 1;
  for (std::int64_t size : src.sizes) count *= size;
  if (count == 0) return;
  const std::size_t in_size = dtype_size(src.dtype), out_size = dtype_size(file_dtype);
  if (is_c_contiguous(src.sizes, src.strides) && file_dtype == src.dtype && src.dtype != DType::boolean) {
    out.write(src.base, static_cast<std::size_t>(count) * in_size);
    return;
  }
  std::vector<std::byte> chunk(std::min(kWriteChunkBytes / out_size, static_cast<std::size_t>(count)) * out_size);
  std::vector<std::int64_t> idx(src.sizes.size(), 0);
  std::size_t filled = 0;
  for (std::int64_t flat = 0; flat < count; ++flat) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) offset += idx[d] * src.strides[d];
    store_file_element(src.base + offset * static_cast<std::int64_t>(in_size), src.dtype, file_dtype, chunk.data() + filled);
    filled += out_size;
    if (filled == chunk.size()) {
      out.write(chunk.data(), filled);
      filled = 0;
    }
    for (std::size_t d = idx.size(); d-- > 0;) {  // odometer increment, last dimension fastest
      if (++idx[d] < src.sizes[d]) break;
      idx[d] = 0;
    }
  }
  out.write(chunk.data(), filled);
}

}  // namespace attnkit::io
