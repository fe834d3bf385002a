#include "staged_outputs.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <system_error>

#include "attnkit/error.hpp"

namespace attnkit::cli {
namespace {

constexpr int kMaxAttempts = 16;  // fresh random names tried before giving up

std::string errno_text(int error) { return std::generic_category().message(error); }

}  // namespace

StagedOutputs::~StagedOutputs() {
  for (const Staged& s : staged_) std::remove(s.temp.c_str());
}

std::string StagedOutputs::stage(const std::string& target) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(target, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) &&
      !std::filesystem::is_directory(status)) {
    return target;  // a device or FIFO: written in place
  }
  // A link is followed: the file it points to is replaced, the link stays.
  std::string resolved = target;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(target, ec))) {
    const std::filesystem::path canonical = std::filesystem::weakly_canonical(target, ec);
    if (!ec) resolved = canonical.string();
  }
  std::random_device random;
  int error = 0;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    const std::string temp = resolved + ".partial-" + std::to_string((std::uint64_t{random()} << 32) | random());
    // Created empty and exclusively ("x"), so the name is ours; the writer then replaces it.
    if (std::FILE* file = std::fopen(temp.c_str(), "wbx")) {
      std::fclose(file);
      staged_.push_back({temp, resolved});
      return temp;
    }
    error = errno;
    if (error != EEXIST) break;
  }
  throw Error(ErrorCode::io_error, target + ": cannot open for writing: " + errno_text(error));
}

void StagedOutputs::write(const std::string& target, const std::function<void(const std::string& path)>& write_to) {
  const std::string path = stage(target);
  try {
    write_to(path);
  } catch (const Error& e) {
    std::string message = e.what();
    for (std::size_t at = message.find(path); at != std::string::npos; at = message.find(path, at + target.size())) {
      message.replace(at, path.size(), target);
    }
    throw Error(e.code(), message);
  }
}

void StagedOutputs::commit() {
  for (std::size_t i = 0; i < staged_.size(); ++i) {
    if (std::rename(staged_[i].temp.c_str(), staged_[i].target.c_str()) != 0) {
      const int error = errno;
      staged_.erase(staged_.begin(), staged_.begin() + static_cast<std::ptrdiff_t>(i));  // those are in place
      throw Error(ErrorCode::io_error, staged_.front().target + ": cannot replace with the written file: " +
                                           errno_text(error));
    }
  }
  staged_.clear();
}

}  // namespace attnkit::cli
