// Replacing a file by rename, as io::OutputFile and attnkit::StagedOutputs do: the checks on an
// output path made before anything is written, the short temporary name beside it, the old file's
// mode and owner carried over, and a second name that keeps the old file until a commit is complete.
#pragma once

#include <string>
#include <sys/types.h>

namespace attnkit::io {

// An output path, checked. Every failure here is an io_error whose message starts with the label
// the caller gave (the path, or "--flag path").
struct OutputTarget {
  std::string label;  // how messages name it
  std::string path;   // the file to replace: the path as given, or where its symbolic links lead
  bool in_place = false;  // an existing device, FIFO or socket: written directly, never replaced
  bool exists = false;    // a regular file is there now (mode, owner and group below are its)
  mode_t mode = 0;
  uid_t owner = 0;
  gid_t group = 0;
  // Identity, for refusing one file named twice: the file's device and inode when it exists, its
  // directory's and its name when it does not.
  dev_t device = 0;
  ino_t inode = 0;
  std::string name;
};

// Refuses, naming the label: an empty name, a name ending in '/', a directory, a directory that is
// missing or that this user may not write in, a name longer than the file system allows, an existing
// file this user may not write (as `cp` does; root may), and a file with several hard links. Symbolic
// links are followed to the file they name.
OutputTarget check_output(const std::string& path, const std::string& label);

// Whether two checked targets are one file (never true for files written in place).
bool same_output(const OutputTarget& a, const OutputTarget& b);

// Creates an empty file with a fresh short name (".attnkit-XXXXXX") in the target's directory,
// exclusively, so that the name fits wherever the target's fits. Returns its descriptor (O_CLOEXEC,
// open for writing) and sets `temp` to its path. Created 0600 when it will replace an existing file
// (whose mode it receives at commit), else 0666 less the umask, as a new file gets.
int create_temp_beside(const OutputTarget& target, std::string& temp);

// Gives the open file `fd` what the replaced file had: its permission bits, and its owner and group
// where this process may set them (root: both; others: a group they belong to).
void keep_attributes(int fd, const OutputTarget& target);

// A second name, beside it, for the file now at the target's path (a hard link; a copy where the file
// system has none), so that it can be put back by rename if a later step of a commit fails. Returns
// an empty string when there is no regular file to keep.
std::string keep_previous(const OutputTarget& target);

// rename(2), through a seam that a test can replace to make one rename of a commit fail.
using RenameFunction = int (*)(const char* from, const char* to);
int rename_file(const std::string& from, const std::string& to);
// For tests only: the function rename_file calls (nullptr restores rename(2)).
void set_rename_for_testing(RenameFunction rename);

}  // namespace attnkit::io
