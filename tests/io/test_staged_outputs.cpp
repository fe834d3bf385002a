// attnkit::StagedOutputs and io::OutputFile: what is refused before anything is written, the commit
// that puts every replaced file back when a later rename fails, modes and owners kept, short
// temporary names, and inputs opened once.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/memory.hpp"
#include "attnkit/npy.hpp"
#include "attnkit/safetensors.hpp"
#include "attnkit/staged_outputs.hpp"
#include "attnkit/tensor.hpp"
#include "io/replace_file.hpp"
#include "support/scratch_dir.hpp"

namespace {

namespace fs = std::filesystem;
using attnkit::DType;
using attnkit::Error;
using attnkit::ErrorCode;
using attnkit::StagedOutputs;
using attnkit::Tensor;
using attnkit::testing::ScratchDir;

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void put(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

mode_t mode_of(const std::string& path) {
  struct stat s {};
  EXPECT_EQ(::stat(path.c_str(), &s), 0) << path;
  return s.st_mode & 07777;
}

// A writer for StagedOutputs::write: the file gets `text`.
std::function<void(const std::string&)> writes(const std::string& text) {
  return [text](const std::string& file) { put(file, text); };
}

// The error add() throws for `path` (with A staged first), or "" if it is accepted.
std::string refusal(const ScratchDir& dir, const std::string& path, const std::string& first = "a") {
  StagedOutputs staged;
  staged.add(dir.file(first), "--first");
  try {
    staged.add(path, "--second");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every staging refusal names the argument and the path, and is made when the output is added.
TEST(StagedOutputs, RefusesBadTargetsWhenTheyAreAdded) {
  const ScratchDir dir("attnkit_staged");
  put(dir.file("a"), "old a");
  fs::create_directory(dir.file("sub"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "--second : cannot open for writing: the file name is empty"},
      {dir.file("sub"), "--second " + dir.file("sub") + ": cannot open for writing: Is a directory"},
      {dir.file("x/"), "ending in '/'"},
      {dir.file("missing/x"), "No such file or directory"},
      {dir.file("a/x"), "Not a directory"},
      {dir.file(std::string(256, 'n')), "cannot open for writing: File name too long"},
      {dir.file("a"), "--second " + dir.file("a") + ": the same file as --first " + dir.file("a")},
      {dir.path() + "/./sub/../a", "the same file as --first"},
  };
  for (const auto& [path, expected] : cases) {
    const std::string error = refusal(dir, path);
    EXPECT_TRUE(contains(error, expected)) << path << ": " << error;
  }
  EXPECT_EQ(contents(dir.file("a")), "old a");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a", "sub"})) << "a temporary file left";
}

// discard() removes the temporary files of what was added or written and forgets it: commit() then
// replaces nothing, and the object can be dropped later without touching anything.
TEST(StagedOutputs, DiscardLeavesEveryTargetAsItWas) {
  const ScratchDir dir("attnkit_staged");
  put(dir.file("a"), "old a");
  StagedOutputs staged;
  staged.add(dir.file("a"), "--first");
  staged.write(dir.file("b"), [](const std::string& file) { put(file, "new b"); });
  EXPECT_EQ(dir.entries().size(), 3u) << "a, and the two temporary files";
  staged.discard();
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a"}));
  staged.commit();
  EXPECT_EQ(contents(dir.file("a")), "old a");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a"}));
}

// One file named twice through a symbolic link, a link to a new file, or a hard link.
TEST(StagedOutputs, RefusesOneFileNamedTwiceThroughLinks) {
  const ScratchDir dir("attnkit_staged");
  put(dir.file("a"), "old a");
  fs::create_symlink(dir.file("a"), dir.file("link"));
  fs::create_symlink("new", dir.file("dangling"));  // relative, to a file not yet there
  EXPECT_TRUE(contains(refusal(dir, dir.file("link")), "the same file as --first"));
  EXPECT_TRUE(contains(refusal(dir, dir.file("dangling"), "new"), "the same file as --first"));
  EXPECT_EQ(refusal(dir, dir.file("new")), "") << "two new files are two files";
  fs::create_hard_link(dir.file("a"), dir.file("hard"));
  EXPECT_TRUE(contains(refusal(dir, dir.file("hard"), "b"), "2 hard links")) << "a hard-linked file is refused";
  EXPECT_EQ(contents(dir.file("a")), "old a");
}

// Devices are written in place and are not duplicates of anything.
TEST(StagedOutputs, DevicesAreWrittenInPlace) {
  StagedOutputs staged;
  staged.add("/dev/null", "--first");
  staged.add("/dev/null", "--second");
  std::string written_to;
  staged.write("/dev/null", [&](const std::string& file) { written_to = file; });
  staged.commit();
  EXPECT_EQ(written_to, "/dev/null");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

// Temporary names are short and hidden: a target name of 255 bytes (the usual NAME_MAX) works.
TEST(StagedOutputs, LongNamesWork) {
  const ScratchDir dir("attnkit_staged");
  const std::string longest = dir.file(std::string(255, 'x'));
  put(longest, "old");
  StagedOutputs staged;
  staged.add(longest, "--out");
  staged.add(dir.file(std::string(254, 'y')), "--lse");
  std::vector<std::string> temps;
  staged.write(longest, [&](const std::string& file) {
    temps.push_back(file);
    put(file, "new");
  });
  staged.write(dir.file(std::string(254, 'y')), writes("new y"));
  staged.commit();
  EXPECT_EQ(contents(longest), "new");
  ASSERT_EQ(temps.size(), 1u);
  EXPECT_TRUE(fs::path(temps[0]).filename().string().starts_with(".attnkit-")) << temps[0];
  EXPECT_LE(fs::path(temps[0]).filename().string().size(), 16u);
  const Tensor t(DType::f32, {3});
  attnkit::write_npy(longest, t);  // the library's writer too
  EXPECT_EQ(attnkit::read_npy(longest).shape(), t.shape());
  EXPECT_EQ(dir.entries().size(), 2u) << "a temporary file left";
}

// Provokes the failure of rename number `fail_at` (counted from 1) of a commit.
int renames = 0, fail_at = 0;
int failing_rename(const char* from, const char* to) {
  if (++renames == fail_at) {
    errno = EIO;
    return -1;
  }
  return std::rename(from, to);
}

struct RenameFailure {
  explicit RenameFailure(int at) {
    renames = 0;
    fail_at = at;
    attnkit::io::set_rename_for_testing(&failing_rename);
  }
  ~RenameFailure() { attnkit::io::set_rename_for_testing(nullptr); }
};

// If rename k of a commit fails, the k - 1 targets already replaced are put back byte for byte (and a
// target that did not exist is removed), and no temporary or kept file is left.
TEST(StagedOutputs, CommitPutsBackWhatItReplacedWhenALaterRenameFails) {
  for (int k = 1; k <= 3; ++k) {
    const ScratchDir dir("attnkit_staged");
    put(dir.file("a"), "old a");
    put(dir.file("c"), "old c");
    ::chmod(dir.file("a").c_str(), 0640);
    {
      StagedOutputs staged;
      for (const char* name : {"a", "b", "c"}) staged.add(dir.file(name), std::string("--") + name);
      for (const char* name : {"a", "b", "c"}) staged.write(dir.file(name), writes(std::string("new ") + name));
      const RenameFailure failure(k);
      try {
        staged.commit();
        ADD_FAILURE() << "rename " << k << " failed and commit did not say so";
      } catch (const Error& e) {
        const std::string failed = dir.file(std::string(1, "abc"[k - 1]));
        EXPECT_TRUE(contains(e.what(), failed + ": cannot replace with the written file: ")) << e.what();
      }
    }
    EXPECT_EQ(contents(dir.file("a")), "old a") << "rename " << k;
    EXPECT_FALSE(fs::exists(dir.file("b"))) << "rename " << k;
    EXPECT_EQ(contents(dir.file("c")), "old c") << "rename " << k;
    EXPECT_EQ(mode_of(dir.file("a")), 0640u);
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a", "c"})) << "rename " << k << ": a file left";
  }
}

// The same without a test seam: the last target becomes a directory between staging and commit, so
// that its rename fails (EISDIR), as root too.
TEST(StagedOutputs, CommitPutsBackWhenTheLastTargetBecameADirectory) {
  const ScratchDir dir("attnkit_staged");
  put(dir.file("a"), "old a");
  {
    StagedOutputs staged;
    staged.add(dir.file("a"), "--out");
    staged.add(dir.file("z"), "--lse");
    staged.write(dir.file("a"), writes("new a"));
    staged.write(dir.file("z"), writes("new z"));
    fs::create_directory(dir.file("z"));
    EXPECT_THROW(staged.commit(), Error);
  }
  EXPECT_EQ(contents(dir.file("a")), "old a");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a", "z"}));
  EXPECT_TRUE(fs::is_empty(dir.file("z")));
}

TEST(StagedOutputs, CommitReplacesEveryTargetAndKeepsModesAndLinks) {
  const ScratchDir dir("attnkit_staged");
  put(dir.file("private"), "old");
  ::chmod(dir.file("private").c_str(), 0600);
  put(dir.file("shared"), "old");
  ::chmod(dir.file("shared").c_str(), 0664);
  put(dir.file("real"), "old");
  fs::create_symlink("real", dir.file("link"));
  StagedOutputs staged;
  for (const char* name : {"private", "shared", "link", "new"}) staged.add(dir.file(name));
  for (const char* name : {"private", "shared", "link", "new"}) staged.write(dir.file(name), writes(name));
  staged.commit();
  EXPECT_EQ(contents(dir.file("private")), "private");
  EXPECT_EQ(mode_of(dir.file("private")), 0600u) << "a private file stays private";
  EXPECT_EQ(mode_of(dir.file("shared")), 0664u);
  EXPECT_TRUE(fs::is_symlink(dir.file("link"))) << "the link stays; the file it names is replaced";
  EXPECT_EQ(contents(dir.file("real")), "link");
  const mode_t mask = ::umask(022);
  ::umask(mask);
  EXPECT_EQ(mode_of(dir.file("new")), 0666u & ~mask) << "a new file gets the usual mode";
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"link", "new", "private", "real", "shared"}));
}

// What the writers name in an error is the target, never the temporary file.
TEST(StagedOutputs, WriteErrorsNameTheTarget) {
  const ScratchDir dir("attnkit_staged");
  StagedOutputs staged;
  staged.add(dir.file("o.npy"), "--out");
  try {
    staged.write(dir.file("o.npy"), [](const std::string& file) {
      throw Error(ErrorCode::io_error, file + ": write failed: No space left on device");
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--out " + dir.file("o.npy") + ": write failed: No space left on device");
  }
}

// The library's own writer keeps the mode, and as root the owner and group.
TEST(OutputFile, KeepsModeAndOwner) {
  const ScratchDir dir("attnkit_staged");
  const std::string path = dir.file("x.npy");
  put(path, "old");
  ::chmod(path.c_str(), 0600);
  const bool root = ::geteuid() == 0;
  const passwd* nobody = ::getpwnam("nobody");
  if (root && nobody != nullptr) {
    ASSERT_EQ(::chown(path.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  }
  const Tensor t(DType::f32, {2, 3});
  attnkit::write_npy(path, t);
  EXPECT_EQ(attnkit::read_npy(path).shape(), t.shape());
  EXPECT_EQ(mode_of(path), 0600u);
  if (root && nobody != nullptr) {
    struct stat s {};
    ASSERT_EQ(::stat(path.c_str(), &s), 0);
    EXPECT_EQ(s.st_uid, nobody->pw_uid) << "root replacing a user's file keeps it the user's";
    EXPECT_EQ(s.st_gid, nobody->pw_gid);
  }
  attnkit::write_safetensors(dir.file("x.safetensors"), {{"t", t.view()}});
  ::chmod(dir.file("x.safetensors").c_str(), 0640);
  attnkit::write_safetensors(dir.file("x.safetensors"), {{"t", t.view()}});
  EXPECT_EQ(mode_of(dir.file("x.safetensors")), 0640u);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"x.npy", "x.safetensors"}));
}

TEST(OutputFile, RefusesAHardLinkedFileAndLeavesBothNames) {
  const ScratchDir dir("attnkit_staged");
  put(dir.file("a.npy"), "old");
  fs::create_hard_link(dir.file("a.npy"), dir.file("b.npy"));
  const Tensor t(DType::f32, {2});
  try {
    attnkit::write_npy(dir.file("a.npy"), t);
    ADD_FAILURE() << "a hard-linked file was replaced";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), dir.file("a.npy") + ": cannot open for writing: it has 2 hard links")) << e.what();
  }
  EXPECT_EQ(contents(dir.file("a.npy")), "old");
  EXPECT_EQ(fs::hard_link_count(dir.file("b.npy")), 2u);
}

// ---- as an unprivileged user ----

// Runs `body` in a child process as user nobody (group nogroup, no supplementary groups); returns
// the child's failure text, or "" when it passed. Skips (returns nullopt) when privileges cannot be
// dropped (not root, or no user nobody).
std::optional<std::string> as_nobody(const std::function<std::string()>& body) {
  const passwd* nobody = ::getpwnam("nobody");
  if (::geteuid() != 0 || nobody == nullptr) return std::nullopt;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string failure;
    if (::setgroups(0, nullptr) != 0 || ::setgid(nobody->pw_gid) != 0 || ::setuid(nobody->pw_uid) != 0) {
      failure = "cannot drop privileges";
    } else {
      failure = body();
    }
    (void)!::write(pipe_fds[1], failure.data(), failure.size());
    ::_exit(failure.empty() ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status)) return "the child did not exit: " + text;
  return text;
}

// A directory nobody can write in, with `a` (nobody's, "old a") and `b` (nobody's, 0444).
void prepare_for_nobody(const ScratchDir& dir) {
  const passwd* nobody = ::getpwnam("nobody");
  ::chmod(dir.path().c_str(), 0777);
  put(dir.file("a"), "old a");
  put(dir.file("b"), "old b");
  ::chmod(dir.file("b").c_str(), 0444);
  fs::create_directory(dir.file("locked"));
  ::chmod(dir.file("locked").c_str(), 0555);
  put(dir.file("roots"), "root's");  // root's, 0644: not nobody's to write
  for (const char* name : {"a", "b"}) (void)!::chown(dir.file(name).c_str(), nobody->pw_uid, nobody->pw_gid);
}

TEST(StagedOutputs, AsAnUnprivilegedUserRefusesWhatItMayNotWrite) {
  if (::geteuid() != 0 || ::getpwnam("nobody") == nullptr) {
    GTEST_SKIP() << "cannot drop privileges to user nobody: not root, or no such user";
  }
  const ScratchDir dir("attnkit_staged");
  prepare_for_nobody(dir);
  const auto failure = as_nobody([&]() -> std::string {
    for (const auto& [name, expected] : std::vector<std::pair<std::string, std::string>>{
             {"b", "Permission denied"}, {"roots", "Permission denied"}, {"locked/x", "cannot create files in"}}) {
      const std::string error = refusal(dir, dir.file(name));
      if (!contains(error, dir.file(name) + ": cannot open for writing: ") || !contains(error, expected)) {
        return name + ": " + error;
      }
    }
    // The library's writer refuses the same.
    try {
      attnkit::write_npy(dir.file("b"), Tensor(DType::f32, {1}));
      return "write_npy replaced a read-only file";
    } catch (const Error& e) {
      if (!contains(e.what(), "Permission denied")) return e.what();
    }
    // And a rename failing in the middle puts back what was replaced, as nobody too.
    {
      StagedOutputs staged;
      staged.add(dir.file("a"));
      staged.add(dir.file("new"));
      staged.write(dir.file("a"), writes("new a"));
      staged.write(dir.file("new"), writes("new"));
      const RenameFailure failure(2);
      try {
        staged.commit();
        return "commit did not fail";
      } catch (const Error&) {
      }
    }
    return "";
  });
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(*failure, "");
  EXPECT_EQ(contents(dir.file("a")), "old a");
  EXPECT_EQ(contents(dir.file("b")), "old b");
  EXPECT_EQ(contents(dir.file("roots")), "root's");
  EXPECT_FALSE(fs::exists(dir.file("new")));
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a", "b", "locked", "roots"}));
}

// ---- inputs ----

// A FIFO input, or a link to one, is refused at once (opened without waiting, then asked what it is).
TEST(InputFile, RefusesAFifoAndALinkToOneWithoutWaiting) {
  const ScratchDir dir("attnkit_staged");
  const std::string fifo = dir.file("pipe.npy"), link = dir.file("link.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  fs::create_symlink(fifo, link);
  for (const std::string& path : {fifo, link}) {
    for (const bool npy : {true, false}) {
      auto refused = std::async(std::launch::async, [&]() -> std::string {
        try {
          if (npy) {
            (void)attnkit::read_npy(path);
          } else {
            (void)attnkit::read_safetensors(path);
          }
          return "read";
        } catch (const Error& e) {
          return e.what();
        }
      });
      if (refused.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
        ADD_FAILURE() << "the reader waited on " << path;
        const int writer = ::open(fifo.c_str(), O_WRONLY);
        if (writer >= 0) ::close(writer);
      }
      EXPECT_EQ(refused.get(), path + ": cannot read: it is a FIFO (named pipe), not a regular file");
    }
  }
  EXPECT_TRUE(contains([&] {
    try {
      (void)attnkit::read_npy(dir.path());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }(), dir.path() + ": cannot read: it is a directory, not a regular file"));
}

// Running out of memory for a .npy's data names the file.
TEST(InputFile, OutOfMemoryNamesTheFile) {
  const ScratchDir dir("attnkit_staged");
  const std::string path = dir.file("big.npy");
  constexpr std::int64_t kElements = std::int64_t{1} << 25;  // 128 MiB of f32, past the 64 MiB checked
  attnkit::write_npy(path, Tensor(DType::f32, {1}));
  // The same header for 2^25 elements, then a sparse file of that size.
  std::string bytes = contents(path);
  const std::string header_shape = "(1,)", big_shape = "(" + std::to_string(kElements) + ",)";
  const std::size_t at = bytes.find(header_shape);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, header_shape.size(), big_shape);
  const std::size_t longer = big_shape.size() - header_shape.size();
  bytes.erase(bytes.find('\n') - longer, longer);  // fewer padding spaces: the header keeps its length
  bytes.resize(bytes.size() - 4);  // without the one element
  put(path, bytes);
  fs::resize_file(path, bytes.size() + static_cast<std::uintmax_t>(kElements) * 4);
  attnkit::set_memory_limit(std::uint64_t{64} << 20);
  try {
    (void)attnkit::read_npy(path);
    ADD_FAILURE() << "read 128 MiB under a 64 MiB limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_TRUE(std::string(e.what()).starts_with(path + ": data: ")) << e.what();
  }
  attnkit::set_memory_limit(0);
}

}  // namespace
