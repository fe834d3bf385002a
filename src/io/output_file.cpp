#include "io/output_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <system_error>

namespace attnkit::io {
namespace {

constexpr int kMaxTempFileAttempts = 16;  // fresh random temporary names tried before giving up
constexpr std::size_t kMaxQuotedPath = 200;
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

OutputFile::OutputFile(const std::string& path) : path_(path), target_(path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);  // follows links
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    file_.reset(std::fopen(path.c_str(), "wb"));  // a device or FIFO: written in place
    if (!file_) fail(ErrorCode::io_error, path, "cannot open for writing: " + errno_text());
    return;
  }
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec))) {
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, ec);
    if (!ec) target_ = resolved.string();
  }
  std::random_device random;
  int error = 0;
  for (int attempt = 0; attempt < kMaxTempFileAttempts && !file_; ++attempt) {
    temp_ = target_ + ".tmp-" + std::to_string((std::uint64_t{random()} << 32) | random());
    file_.reset(std::fopen(temp_.c_str(), "wbx"));  // "x": never clobber an existing file
    error = errno;
    if (!file_ && error != EEXIST) break;
  }
  if (!file_) {
    fail(ErrorCode::io_error, path, "cannot open for writing (as " + in_quotes(temp_, kMaxQuotedPath) +
                                        "): " + std::generic_category().message(error));
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
  if (std::fclose(file_.release()) != 0) fail(ErrorCode::io_error, path_, "write failed on close: " + errno_text());
  if (!temp_.empty() && std::rename(temp_.c_str(), target_.c_str()) != 0) {
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
