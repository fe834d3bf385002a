// All of a command's output files, or none: each is written under a temporary name beside its target,
// and the targets are replaced only once every one of them has been written.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace attnkit::cli {

class StagedOutputs {
 public:
  StagedOutputs() = default;
  StagedOutputs(const StagedOutputs&) = delete;
  StagedOutputs& operator=(const StagedOutputs&) = delete;
  ~StagedOutputs();  // removes what was staged and not committed: a failed command changes no target

  // write_to(path) with the path to write `target`'s contents to now (stage): an error names the
  // target, not the temporary file.
  void write(const std::string& target, const std::function<void(const std::string& path)>& write_to);

  // Renames every staged file over its target, in the order staged.
  void commit();

 private:
  // A fresh temporary file beside `target` (beside the file it links to), or the target itself when
  // that exists and is not a regular file (/dev/stdout, a FIFO: nothing to protect, and no rename
  // could replace it). Error(io_error) naming the target if the directory refuses files.
  std::string stage(const std::string& target);

  struct Staged {
    std::string temp, target;
  };
  std::vector<Staged> staged_;
};

}  // namespace attnkit::cli
