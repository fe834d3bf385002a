/// \file
/// Several output files written all or nothing.
///
/// Each output is checked when it is added, before any work is done: an empty name, a name ending in
/// '/', a directory, a missing directory or one this user may not write in, a name longer than the
/// file system allows, an existing file this user may not write (as `cp` refuses it; root may), a file
/// with several hard links, and one file named twice (through any spelling or symbolic link) are
/// refused with an Error(io_error) naming the argument and the path. Each output is then written
/// under a short temporary name beside its target (".attnkit-XXXXXX"), and commit() renames them over
/// their targets; if one rename fails, the targets already replaced are put back, so that either
/// every target has its new contents or every target is as it was. A replaced file keeps its
/// permission bits, and its owner and group when running as root. Symbolic links are followed (the
/// file they name is replaced); an existing device, FIFO or socket (/dev/null, /dev/stdout) is
/// written in place when write() is called. See docs/guarantees.md.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attnkit {

/// A set of output files written all or nothing (see attnkit/staged_outputs.hpp): add() checks each
/// target, write() writes it under a temporary name, commit() replaces every target or none.
class StagedOutputs {
 public:
  /// An empty set of outputs.
  StagedOutputs();
  /// Not copyable: the object owns its temporary files.
  StagedOutputs(const StagedOutputs&) = delete;
  /// Not copyable: the object owns its temporary files.
  StagedOutputs& operator=(const StagedOutputs&) = delete;
  /// Removes what was staged and not committed: a failed command changes no target.
  ~StagedOutputs();

  /// Checks `path` as an output and reserves its temporary file. `argument` (a flag such as "--lse",
  /// or empty) starts every message about it, before the path.
  void add(const std::string& path, const std::string& argument = "");

  /// Writes an added output: write_to(file) with the file to write its contents to now (its temporary
  /// file, or the path itself for a device). An Error from write_to names the target, not the
  /// temporary file. A path not added yet is added first.
  void write(const std::string& path, const std::function<void(const std::string& file)>& write_to);

  /// Replaces every target by its written file, or, if any step fails, none (the error names it).
  void commit();

  /// Removes every temporary file not committed and forgets every output, leaving each target as it
  /// was: what the destructor does, for callers (Python) whose objects may outlive a failure.
  void discard() noexcept;

 private:
  struct Staged;
  std::vector<std::unique_ptr<Staged>> staged_;
};

}  // namespace attnkit
