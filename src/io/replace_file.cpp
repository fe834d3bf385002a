#include "io/replace_file.hpp"

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include "attnkit/error.hpp"
#include "io/file_common.hpp"

namespace attnkit::io {
namespace {

constexpr int kMaxNameAttempts = 16;       // fresh random temporary names tried before giving up
constexpr int kMaxSymlinkHops = 40;        // as the kernel's own limit (ELOOP)
constexpr std::string_view kTempPrefix = ".attnkit-";
constexpr int kTempRandomChars = 6;        // as mkstemp's XXXXXX: 62^6 names
constexpr mode_t kPermissionBits = 0777;   // set-id and sticky bits are not carried to new contents
constexpr mode_t kPrivateMode = 0600;      // a replacement's mode until commit gives it the old one
constexpr mode_t kNewFileMode = 0666;      // less the umask, as fopen(path, "w") creates
constexpr std::size_t kCopyChunk = 1 << 16;

RenameFunction rename_function = nullptr;

[[noreturn]] void refuse(const std::string& label, const std::string& why) {
  throw Error(ErrorCode::io_error, label + ": cannot open for writing: " + why);
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Where `path`'s chain of symbolic links ends (the path itself when it is none): lstat and readlink,
// so that a dangling link leads to the file it would create. `status` is filled when that exists.
std::string follow_links(const std::string& path, const std::string& label, struct stat& status, bool& exists) {
  std::string at = path;
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    if (::lstat(at.c_str(), &status) != 0) {
      if (errno != ENOENT) refuse(label, errno_text(errno));
      exists = false;
      return at;
    }
    if (!S_ISLNK(status.st_mode)) {
      exists = true;
      return at;
    }
    std::vector<char> buffer(static_cast<std::size_t>(status.st_size > 0 ? status.st_size : PATH_MAX) + 1);
    const ssize_t n = ::readlink(at.c_str(), buffer.data(), buffer.size());
    if (n < 0) refuse(label, errno_text(errno));
    const std::string link(buffer.data(), static_cast<std::size_t>(n));
    at = link.front() == '/' ? link : directory_of(at) + "/" + link;
  }
  refuse(label, errno_text(ELOOP));
}

void check_directory(OutputTarget& t) {
  const std::string directory = directory_of(t.path);
  struct stat status {};
  if (::stat(directory.c_str(), &status) != 0) refuse(t.label, errno_text(errno));
  if (!S_ISDIR(status.st_mode)) refuse(t.label, errno_text(ENOTDIR));
  // The replacement is created beside the target and renamed over it: both need the directory.
  if (::faccessat(AT_FDCWD, directory.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    refuse(t.label, errno_text(errno) + " (cannot create files in " + directory + ")");
  }
  if (t.exists) return;
  // A new name must fit the directory's file system: found now, not at the rename that ends a commit.
  const long name_max = ::pathconf(directory.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && t.name.size() > static_cast<std::size_t>(name_max)) {
    refuse(t.label, errno_text(ENAMETOOLONG) + " (the name has " + std::to_string(t.name.size()) +
                        " bytes; the file system allows " + std::to_string(name_max) + ")");
  }
  t.device = status.st_dev;
  t.inode = status.st_ino;
}

// A random name in `directory`, short enough to fit wherever the target's name fits.
std::string fresh_name(const std::string& directory) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::string name(kTempPrefix);
  for (int i = 0; i < kTempRandomChars; ++i) name += kChars[random() % (sizeof kChars - 1)];
  return directory + "/" + name;
}

// Copies the file at `from` to the new file `to_fd`: the fallback of keep_previous where the file
// system has no hard links.
bool copy_contents(const std::string& from, int to_fd) {
  const int from_fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (from_fd < 0) return false;
  std::vector<char> buffer(kCopyChunk);
  bool ok = true;
  for (;;) {
    const ssize_t n = ::read(from_fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0 || ::write(to_fd, buffer.data(), static_cast<std::size_t>(n)) != n) {
      ok = false;
      break;
    }
  }
  ::close(from_fd);
  return ok;
}

}  // namespace

OutputTarget check_output(const std::string& path, const std::string& label) {
  OutputTarget t;
  t.label = label;
  if (path.empty()) refuse(label, "the file name is empty");
  if (path.back() == '/') refuse(label, errno_text(EISDIR) + " (a name ending in '/' names a directory)");
  struct stat status {};
  t.path = follow_links(path, label, status, t.exists);
  t.name = name_of(t.path);
  if (t.name == "." || t.name == "..") refuse(label, errno_text(EISDIR));
  if (t.exists) {
    if (S_ISDIR(status.st_mode)) refuse(label, errno_text(EISDIR));
    if (!S_ISREG(status.st_mode)) {
      t.in_place = true;  // a device, FIFO or socket: nothing to protect, and no rename could replace it
      t.exists = false;
      return t;
    }
    // A file with several names is refused, as careful atomic writers that keep the guarantee do:
    // a rename would give this name new contents and leave the others the old ones (splitting what
    // the user linked), and writing in place would give up all or nothing.
    if (status.st_nlink > 1) {
      refuse(label, "it has " + std::to_string(status.st_nlink) +
                        " hard links, and replacing it would separate them (write to another name, or remove "
                        "the other links)");
    }
    // As cp: a file this user may not write is not replaced behind its back (root may, as with cp).
    if (::faccessat(AT_FDCWD, t.path.c_str(), W_OK, AT_EACCESS) != 0) refuse(label, errno_text(errno));
    t.mode = status.st_mode & kPermissionBits;
    t.owner = status.st_uid;
    t.group = status.st_gid;
    t.device = status.st_dev;
    t.inode = status.st_ino;
  }
  check_directory(t);
  return t;
}

bool same_output(const OutputTarget& a, const OutputTarget& b) {
  if (a.in_place || b.in_place || a.exists != b.exists) return false;
  return a.device == b.device && a.inode == b.inode && (a.exists || a.name == b.name);
}

int create_temp_beside(const OutputTarget& target, std::string& temp) {
  const std::string directory = directory_of(target.path);
  int error = 0;
  for (int attempt = 0; attempt < kMaxNameAttempts; ++attempt) {
    temp = fresh_name(directory);
    // O_EXCL: the name is ours, never a file or link someone else put there.
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                          target.exists ? kPrivateMode : kNewFileMode);
    if (fd >= 0) return fd;
    error = errno;
    if (error != EEXIST) break;
  }
  refuse(target.label, errno_text(error) + " (creating a file in " + directory + ")");
}

void keep_attributes(int fd, const OutputTarget& target) {
  if (!target.exists) return;
  // Owner before mode: chown clears set-id bits, and the mode is the old one either way. Not
  // permitted (EPERM) means the file is the writer's, as any replacement by rename makes it.
  if (::geteuid() == 0) {
    (void)::fchown(fd, target.owner, target.group);
  } else {
    (void)::fchown(fd, static_cast<uid_t>(-1), target.group);
  }
  if (::fchmod(fd, target.mode) != 0) {
    throw Error(ErrorCode::io_error, target.label + ": cannot give the new file the old one's mode: " +
                                         errno_text(errno));
  }
}

std::string keep_previous(const OutputTarget& target) {
  struct stat status {};
  if (::lstat(target.path.c_str(), &status) != 0 || !S_ISREG(status.st_mode)) return "";
  const std::string directory = directory_of(target.path);
  int error = 0;
  for (int attempt = 0; attempt < kMaxNameAttempts; ++attempt) {
    const std::string kept = fresh_name(directory);
    if (::link(target.path.c_str(), kept.c_str()) == 0) return kept;
    error = errno;
    if (error == EEXIST) continue;
    if (error != EPERM && error != EOPNOTSUPP && error != EMLINK) break;
    // No hard links here: a copy, under a name created exclusively.
    const int fd = ::open(kept.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kPrivateMode);
    if (fd < 0) {
      error = errno;
      if (error == EEXIST) continue;
      break;
    }
    const bool copied = copy_contents(target.path, fd);
    error = errno;
    if (::close(fd) == 0 && copied) return kept;
    ::unlink(kept.c_str());
    break;
  }
  throw Error(ErrorCode::io_error, target.label + ": cannot keep the previous file until every output is written: " +
                                       errno_text(error));
}

int rename_file(const std::string& from, const std::string& to) {
  return (rename_function != nullptr ? rename_function : &std::rename)(from.c_str(), to.c_str());
}

void set_rename_for_testing(RenameFunction rename) { rename_function = rename; }

}  // namespace attnkit::io
