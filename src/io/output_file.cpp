#include "io/output_file.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <system_error>

namespace attnkit::io {
namespace {

constexpr int kMaxTempFileAttempts = 16;  // fresh random temporary names tried before giving up
constexpr std::size_t kMaxQuotedPath = 200;

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

}  // namespace attnkit::io
