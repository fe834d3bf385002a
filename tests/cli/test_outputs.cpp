// Every command that writes files, all or nothing: each kind of output it cannot or must not write,
// named after an output it can, fails before any input is read, names the flag and the path, and
// leaves every earlier target byte for byte as it was and no file behind. As root in-process, and as
// user nobody through the binary.
#include <gtest/gtest.h>

#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "attnkit/npy.hpp"
#include "attnkit/tensor.hpp"
#include "cli_runner.hpp"
#include "support/scratch_dir.hpp"

namespace {

namespace fs = std::filesystem;
using attnkit::DType;
using attnkit::Tensor;
using attnkit::testing::CliResult;
using attnkit::testing::ScratchDir;

constexpr int kError = 1;

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string quoted(const std::string& word) {
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

const passwd* nobody() { return ::getpwnam("nobody"); }

// Why the binary cannot be run as nobody here, or "" when it can.
std::string cannot_drop_privileges() {
  if (::geteuid() != 0) return "not root";
  if (nobody() == nullptr) return "no user nobody";
  if (std::system("setpriv --reuid=nobody --regid=nogroup --clear-groups true >/dev/null 2>&1") != 0) {
    return "setpriv cannot drop to nobody:nogroup";
  }
  // A clone in a private folder (under /root, say) is out of nobody's reach.
  if (std::system(("setpriv --reuid=nobody --regid=nogroup --clear-groups " + quoted(ATTNKIT_CLI_BINARY) +
                   " --version >/dev/null 2>&1").c_str()) != 0) {
    return std::string("user nobody cannot run ") + ATTNKIT_CLI_BINARY + " (a folder on its path is private)";
  }
  return "";
}

// The attnkit binary as user nobody (group nogroup, no supplementary groups), stderr captured.
CliResult run_as_nobody(const std::vector<std::string>& args) {
  std::string command = "setpriv --reuid=nobody --regid=nogroup --clear-groups " + quoted(ATTNKIT_CLI_BINARY);
  for (const std::string& a : args) command += " " + quoted(a);
  command += " 2>&1 >/dev/null";
  CliResult r;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[512];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.err.append(buffer, n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Outputs : public ::testing::Test {
 protected:
  Outputs() : dir_("attnkit_outputs") {
    ::chmod(dir_.path().c_str(), 0777);  // nobody writes here too
    const Tensor t(DType::f32, {1, 2, 3, 4});
    for (const char* name : {"q.npy", "k.npy", "v.npy"}) attnkit::write_npy(path(name), t);
    Tensor p(DType::f32, {1, 1, 3, 4});
    for (std::int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = 0.25f;
    attnkit::write_npy(path("p.npy"), p);
    put(path("earlier"), "the earlier target's previous contents");
    fs::create_directory(path("sub"));
    put(path("linked"), "a file with two names");
    fs::create_hard_link(path("linked"), path("hard"));
    fs::create_symlink("earlier", path("link-to-earlier"));
  }

  std::string path(const std::string& name) const { return dir_.file(name); }

  // The later outputs that every command refuses, as root or not, with what the message says.
  std::vector<std::pair<std::string, std::string>> refused() const {
    return {
        {path("sub"), "Is a directory"},
        {"", "the file name is empty"},
        {path("new/"), "ending in '/'"},
        {path("missing/x"), "No such file or directory"},
        {path("hard"), "2 hard links"},
        {path(std::string(256, 'n')), "File name too long"},
        {path("earlier"), "the same file as"},
        {dir_.path() + "/./sub/../earlier", "the same file as"},
        {path("link-to-earlier"), "the same file as"},
    };
  }

  // The later outputs refused only to a user who may not write them.
  void prepare_unwritable() const {
    fs::create_directory(path("locked"));
    ::chmod(path("locked").c_str(), 0555);
    put(path("readonly"), "read-only");
    ::chmod(path("readonly").c_str(), 0444);
    put(path("roots"), "root's");  // 0644, root's: nobody may not write it
    for (const char* name : {"earlier", "readonly"}) {
      (void)!::chown(path(name).c_str(), nobody()->pw_uid, nobody()->pw_gid);
    }
  }
  std::vector<std::pair<std::string, std::string>> refused_to_nobody() const {
    return {
        {path("locked/x"), "Permission denied (cannot create files in"},
        {path("readonly"), "Permission denied"},
        {path("roots"), "Permission denied"},
    };
  }

  // Runs `args_with(bad)` for each refused output and checks that it failed naming `flag` and the
  // path, and that `earlier` and the folder are as they were.
  template <class Run>
  void expect_refused(const std::vector<std::pair<std::string, std::string>>& cases, const std::string& flag,
                      const std::string& earlier, Run run) {
    for (const auto& [bad, expected] : cases) {
      const std::string before = contents(earlier);
      const std::vector<std::string> entries = dir_.entries();
      const CliResult r = run(bad);
      EXPECT_EQ(r.code, kError) << flag << " '" << bad << "': " << r.err;
      EXPECT_TRUE(contains(r.err, flag + " " + bad + ": ")) << "names the flag and the path: " << r.err;
      EXPECT_TRUE(contains(r.err, expected)) << bad << ": " << r.err;
      EXPECT_EQ(contents(earlier), before) << bad << ": the earlier target changed";
      EXPECT_EQ(dir_.entries(), entries) << bad << ": a file created or left";
    }
  }

  ScratchDir dir_;
};

}  // namespace

TEST_F(Outputs, RunRefusesEachBadLaterOutputBeforeReadingInputs) {
  for (const bool inputs_exist : {true, false}) {
    const std::string q = inputs_exist ? path("q.npy") : path("no-such-input.npy");
    expect_refused(refused(), "--lse", path("earlier"), [&](const std::string& bad) {
      return attnkit::testing::run_cli({"run", "--q", q, "--k", path("k.npy"), "--v", path("v.npy"), "--out",
                                        path("earlier"), "--lse", bad});
    });
  }
  // And the same for a gradient named after every forward output.
  expect_refused(refused(), "--dv", path("earlier"), [&](const std::string& bad) {
    return attnkit::testing::run_cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                      "--out", path("o.npy"), "--lse", path("earlier"), "--d-out", path("q.npy"),
                                      "--dq", path("dq.npy"), "--dv", bad});
  });
}

TEST_F(Outputs, HeatmapRefusesEachBadOutputBeforeReadingTheWeights) {
  for (const bool html_first : {true, false}) {
    const std::string flag = html_first ? "--out" : "--html";
    const std::string earlier_flag = html_first ? "--html" : "--out";
    expect_refused(refused(), flag, path("earlier"), [&](const std::string& bad) {
      return attnkit::testing::run_cli({"heatmap", "--probs", path("no-such-input.npy"), earlier_flag,
                                        path("earlier"), flag, bad});
    });
  }
  // Both named the same.
  const CliResult r = attnkit::testing::run_cli(
      {"heatmap", "--probs", path("p.npy"), "--html", path("earlier"), "--out", path("earlier")});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "--out " + path("earlier") + ": the same file as --html " + path("earlier"))) << r.err;
}

TEST_F(Outputs, LabRefusesABadPlotBeforeTheExperimentRuns) {
  for (const auto& [bad, expected] : refused()) {
    if (bad == path("earlier") || contains(bad, "earlier")) continue;  // one output: nothing to name twice
    const CliResult r = attnkit::testing::run_cli({"lab", "scaling", "--dims", "2", "--trials", "1", "--plot", bad});
    EXPECT_EQ(r.code, kError) << bad;
    EXPECT_TRUE(contains(r.err, "--plot " + bad + ": ")) << r.err;
    EXPECT_TRUE(contains(r.err, expected)) << r.err;
    EXPECT_TRUE(r.out.empty()) << "the experiment ran: " << r.out;
  }
}

// Written outputs keep the mode of what they replace, and every one is written when all can be.
TEST_F(Outputs, ReplacedOutputsKeepTheirMode) {
  ::chmod(path("earlier").c_str(), 0600);
  const CliResult r = attnkit::testing::run_cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v",
                                                 path("v.npy"), "--out", path("earlier"), "--lse",
                                                 path(std::string(250, 'l'))});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(attnkit::read_npy(path("earlier")).shape(), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(fs::status(path("earlier")).permissions() & fs::perms::mask, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(fs::exists(path(std::string(250, 'l')))) << "a long name is written";
}

TEST_F(Outputs, AsAnUnprivilegedUserEveryCommandRefusesWhatItMayNotWrite) {
  const std::string why = cannot_drop_privileges();
  if (!why.empty()) GTEST_SKIP() << "cannot run the binary as nobody: " << why;
  prepare_unwritable();
  std::vector<std::pair<std::string, std::string>> cases = refused();
  for (const auto& c : refused_to_nobody()) cases.push_back(c);
  expect_refused(cases, "--lse", path("earlier"), [&](const std::string& bad) {
    return run_as_nobody({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out",
                          path("earlier"), "--lse", bad});
  });
  expect_refused(cases, "--out", path("earlier"), [&](const std::string& bad) {
    return run_as_nobody({"heatmap", "--probs", path("p.npy"), "--html", path("earlier"), "--out", bad});
  });
  expect_refused(cases, "--html", path("earlier"), [&](const std::string& bad) {
    return run_as_nobody({"heatmap", "--probs", path("p.npy"), "--out", path("earlier"), "--html", bad});
  });
  for (const auto& [bad, expected] : refused_to_nobody()) {
    const CliResult r = run_as_nobody({"lab", "scaling", "--dims", "2", "--trials", "1", "--plot", bad});
    EXPECT_EQ(r.code, kError) << r.err;
    EXPECT_TRUE(contains(r.err, "--plot " + bad + ": ") && contains(r.err, expected)) << r.err;
  }
  // What nobody may write is written, keeping its mode; root's file is refused, not replaced.
  ::chmod(path("earlier").c_str(), 0640);
  const CliResult r = run_as_nobody({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                     "--out", path("earlier"), "--lse", path("lse.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(attnkit::read_npy(path("earlier")).shape(), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(fs::status(path("earlier")).permissions() & fs::perms::mask,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(contents(path("roots")), "root's");
}

// As root, a user's file replaced by a command stays the user's.
TEST_F(Outputs, AsRootAReplacedFileKeepsItsOwner) {
  if (::geteuid() != 0 || nobody() == nullptr) GTEST_SKIP() << "not root, or no user nobody";
  ASSERT_EQ(::chown(path("earlier").c_str(), nobody()->pw_uid, nobody()->pw_gid), 0);
  const CliResult r = attnkit::testing::run_cli({"heatmap", "--probs", path("p.npy"), "--out", path("earlier.png"),
                                                 "--html", path("earlier")});
  ASSERT_EQ(r.code, 0) << r.err;
  struct stat s {};
  ASSERT_EQ(::stat(path("earlier").c_str(), &s), 0);
  EXPECT_EQ(s.st_uid, nobody()->pw_uid);
  EXPECT_EQ(s.st_gid, nobody()->pw_gid);
  EXPECT_TRUE(contains(contents(path("earlier")), "<html")) << "the page was written";
}
