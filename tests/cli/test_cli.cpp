// The attnkit tool: `explain`, `run`, --help and --version, driven in-process through
// attnkit::cli::run, plus a few runs of the real binary to check process exit codes.
//
// Expected numbers are computed here independently, with plain double loops, never by the library
// (except for dropout, whose random stream is the library's: there the CLI must match a direct call;
// and for `run`'s gradients, which must equal a direct attnkit::backward call bit for bit, with dV
// also checked against the plain loops).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit/targets.hpp"
#include "cli.hpp"
#include "commands.hpp"
#include "cli/cli_runner.hpp"

namespace {

using Result = attnkit::testing::CliResult;
Result cli(const std::vector<std::string>& args) { return attnkit::testing::run_cli(args); }

namespace fs = std::filesystem;
using attnkit::DType;
using attnkit::Tensor;

constexpr int kOk = 0, kError = 1, kUsage = 2;

// ---- running the tool ----


bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs the built binary through the shell; returns its exit code and fills `output` (stdout+stderr).
int run_binary(const std::string& args, std::string& output) {
  const std::string command = std::string(ATTNKIT_CLI_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[256];
  output.clear();
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string fixed4(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.4f", x);
  return text;
}

// ---- top level ----

TEST(CliTopLevel, HelpListsCommandsAndExamples) {
  for (const char* flag : {"--help", "-h"}) {
    const Result r = cli({flag});
    EXPECT_EQ(r.code, kOk) << flag;
    EXPECT_TRUE(contains(r.out, "explain")) << r.out;
    EXPECT_TRUE(contains(r.out, "run")) << r.out;
    EXPECT_TRUE(contains(r.out, "--version")) << r.out;
    EXPECT_TRUE(contains(r.out, "attnkit explain")) << "an example invocation: " << r.out;
    EXPECT_TRUE(r.err.empty());
  }
}

// Memory that runs out inside a command (a huge --keys for lab or bench) is reported in words with
// the error code, never as a bare "std::bad_alloc".
TEST(CliTopLevel, OutOfMemoryIsSaidInWords) {
  std::ostringstream err;
  const int code = attnkit::cli::guarded("lab", err, []() -> int { throw std::bad_alloc(); });
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(contains(err.str(), "attnkit lab: out of memory")) << err.str();
  EXPECT_TRUE(contains(err.str(), "[out_of_memory]")) << err.str();
  EXPECT_FALSE(contains(err.str(), "std::bad_alloc")) << err.str();
}

TEST(CliTopLevel, VersionPrintsLibraryVersion) {
  const Result r = cli({"--version"});
  EXPECT_EQ(r.code, kOk);
  EXPECT_TRUE(contains(r.out, attnkit::version())) << r.out;
}

TEST(CliTopLevel, NoCommandIsUsageError) {
  const Result r = cli({});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "Usage")) << r.err;
}

TEST(CliTopLevel, UnknownCommandIsUsageError) {
  const Result r = cli({"frobnicate"});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "unknown command 'frobnicate'")) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(CliTopLevel, UnknownTopLevelOptionIsUsageError) {
  const Result r = cli({"--frobnicate"});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "--frobnicate")) << r.err;
}

TEST(CliTopLevel, CommandHelpListsEveryFlagAndAnExample) {
  const std::vector<std::string> explain_flags = {"--q", "--k", "--v", "--no-scale", "--help"};
  const std::vector<std::string> run_flags = {"--q",     "--k",     "--v",       "--out",     "--lse",
                                              "--probs", "--scale", "--causal",  "--window",  "--mask",
                                              "--key-lengths",      "--alibi",   "--softcap", "--dropout",
                                              "--seed",  "--dtype", "--kernel",  "--threads", "--verbose",
                                              "--d-out", "--dq",    "--dk",      "--dv",      "--cu-seqlens-q", "--cu-seqlens-k"};
  for (const auto& [command, flags] : {std::pair{"explain", explain_flags}, std::pair{"run", run_flags}}) {
    for (const char* help : {"--help", "-h"}) {
      const Result r = cli({command, help});
      EXPECT_EQ(r.code, kOk) << command << " " << help;
      for (const std::string& flag : flags) EXPECT_TRUE(contains(r.out, flag)) << command << " help lacks " << flag;
      EXPECT_TRUE(contains(r.out, std::string("attnkit ") + command + " ")) << "no example: " << r.out;
    }
  }
}

// ---- explain ----

// Independent computation of the explain story for one query.
struct Story {
  std::vector<double> raw, scaled, weights, output;
};

Story hand_story(const std::vector<double>& q, const std::vector<std::vector<double>>& k,
                 const std::vector<std::vector<double>>& v, double scale) {
  Story s;
  double denominator = 0.0;
  for (const auto& key : k) {
    double dot = 0.0;
    for (std::size_t c = 0; c < q.size(); ++c) dot += q[c] * key[c];
    s.raw.push_back(dot);
    s.scaled.push_back(dot * scale);
    denominator += std::exp(dot * scale);
  }
  for (double z : s.scaled) s.weights.push_back(std::exp(z) / denominator);
  s.output.assign(v.front().size(), 0.0);
  for (std::size_t j = 0; j < v.size(); ++j) {
    for (std::size_t c = 0; c < s.output.size(); ++c) s.output[c] += s.weights[j] * v[j][c];
  }
  return s;
}

// Each of `parts` appears in `text`, in this order.
void expect_in_order(const std::string& text, const std::vector<std::string>& parts) {
  std::size_t pos = 0;
  for (const std::string& part : parts) {
    const std::size_t found = text.find(part, pos);
    ASSERT_NE(found, std::string::npos) << "'" << part << "' missing (or out of order) in:\n" << text;
    pos = found + part.size();
  }
}

std::vector<std::string> story_in_order(const Story& s) {
  std::vector<std::string> parts = {"Step 1"};
  for (double x : s.raw) parts.push_back(fixed4(x));
  parts.push_back("Step 2");
  for (double x : s.scaled) parts.push_back(fixed4(x));
  parts.push_back("Step 3");
  for (double x : s.weights) parts.push_back(fixed4(x));
  parts.push_back("sum = 1.0000");
  parts.push_back("Step 4");
  for (double x : s.output) parts.push_back(fixed4(x));
  return parts;
}

// The w_j values as printed ("  w_2 = 0.3089").
std::vector<double> printed_weights(const std::string& text) {
  std::vector<double> weights;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find(" = ");
    if (line.starts_with("  w_") && eq != std::string::npos) weights.push_back(std::stod(line.substr(eq + 3)));
  }
  return weights;
}

const std::vector<double> kDefaultQ = {0.5, 0.3, -0.2};
const std::vector<std::vector<double>> kDefaultK = {{0.4, 0.2, -0.1}, {0.1, 0.1, 0.8}, {-0.3, 0.4, 0.2}};
const std::vector<std::vector<double>> kDefaultV = {{0.9, 0.1, 0.3}, {0.2, 0.5, 0.1}, {0.3, 0.2, 0.4}};

TEST(CliExplain, DefaultExampleShowsHandComputedSteps) {
  const Result r = cli({"explain"});
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;

  const Story s = hand_story(kDefaultQ, kDefaultK, kDefaultV, 1.0 / std::sqrt(3.0));
  // The raw affinities, worked by hand: 0.5·0.4 + 0.3·0.2 + (−0.2)(−0.1) = 0.28, etc.
  EXPECT_EQ(fixed4(s.raw[0]), "0.2800");
  EXPECT_EQ(fixed4(s.raw[1]), "-0.0800");
  EXPECT_EQ(fixed4(s.raw[2]), "-0.0700");
  expect_in_order(r.out, story_in_order(s));
  expect_in_order(r.out, {"Step 2", fixed4(1.0 / std::sqrt(3.0))});  // the scale itself

  const std::vector<double> weights = printed_weights(r.out);
  ASSERT_EQ(weights.size(), 3u) << r.out;
  double sum = 0.0;
  for (double w : weights) sum += w;
  EXPECT_NEAR(sum, 1.0, 2e-4) << "printed weights (each rounded to 4 decimals) sum to 1";

  EXPECT_TRUE(contains(r.out, "sum to 1")) << r.out;
  EXPECT_TRUE(contains(r.out, "weighted average of the value vectors")) << r.out;
  EXPECT_TRUE(contains(r.out, "unit variance")) << r.out;
}

TEST(CliExplain, NoScaleUsesScaleOneAndSaysWhatChanges) {
  const Result r = cli({"explain", "--no-scale"});
  ASSERT_EQ(r.code, kOk) << r.err;
  const Story s = hand_story(kDefaultQ, kDefaultK, kDefaultV, 1.0);
  expect_in_order(r.out, story_in_order(s));
  EXPECT_TRUE(contains(r.out, "scale = 1 ")) << r.out;
  EXPECT_TRUE(contains(r.out, "sharper")) << r.out;

  // Without scaling the largest weight grows: 0.4163 instead of 0.3803.
  const Story scaled = hand_story(kDefaultQ, kDefaultK, kDefaultV, 1.0 / std::sqrt(3.0));
  EXPECT_GT(s.weights[0], scaled.weights[0]);
  EXPECT_TRUE(contains(r.out, fixed4(s.weights[0])));
  EXPECT_FALSE(contains(r.out, fixed4(scaled.weights[0])));
}

TEST(CliExplain, UserExampleFromFlags) {
  const Result r = cli({"explain", "--q", "1,0", "--k", "1,0;0,1;1,1", "--v=1,2;3,4;5,6"});
  ASSERT_EQ(r.code, kOk) << r.err;
  const Story s = hand_story({1, 0}, {{1, 0}, {0, 1}, {1, 1}}, {{1, 2}, {3, 4}, {5, 6}}, 1.0 / std::sqrt(2.0));
  expect_in_order(r.out, story_in_order(s));
  EXPECT_TRUE(contains(r.out, "d_k = 2")) << r.out;
}

TEST(CliExplain, AcceptsTypesetMinusSign) {
  const Result r = cli({"explain", "--q", "0.5, 0.3, \xE2\x88\x92" "0.2"});
  ASSERT_EQ(r.code, kOk) << r.err;
  expect_in_order(r.out, {"Step 1", "0.2800", "-0.0800", "-0.0700"});
}

TEST(CliExplain, PartialOverrideKeepsDefaultKeysAndValues) {
  const Result r = cli({"explain", "--q", "1,0,0"});
  ASSERT_EQ(r.code, kOk) << r.err;
  expect_in_order(r.out, story_in_order(hand_story({1, 0, 0}, kDefaultK, kDefaultV, 1.0 / std::sqrt(3.0))));
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Parameterised names hold '/' ("Dtypes/CliRunOptions"): flattened so that one folder is made
    // and TearDown removes all of it.
    std::string name = "attnkit_cli_" + std::to_string(getpid()) + "_" + info->test_suite_name() + "_" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

using CliExplainFiles = TempDir;

Tensor tensor_from(const std::vector<std::int64_t>& shape, const std::vector<double>& values, DType dtype) {
  Tensor t(DType::f64, shape);
  std::copy(values.begin(), values.end(), t.data<double>());
  return dtype == DType::f64 ? std::move(t) : Tensor::converted(t.view(), dtype);
}

TEST_F(CliExplainFiles, NpyInputsGiveTheSameStoryAsText) {
  attnkit::write_npy(path("q.npy"), tensor_from({3}, kDefaultQ, DType::f64));
  attnkit::write_npy(path("k.npy"), tensor_from({3, 3}, {0.4, 0.2, -0.1, 0.1, 0.1, 0.8, -0.3, 0.4, 0.2}, DType::f64));
  attnkit::write_npy(path("v.npy"), tensor_from({3, 2}, {0.9, 0.1, 0.2, 0.5, 0.3, 0.2}, DType::f64));
  const Result from_files = cli({"explain", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy")});
  ASSERT_EQ(from_files.code, kOk) << from_files.err;
  const Result from_text = cli({"explain", "--v", "0.9,0.1;0.2,0.5;0.3,0.2"});
  ASSERT_EQ(from_text.code, kOk) << from_text.err;
  EXPECT_EQ(from_files.out, from_text.out);
  expect_in_order(from_files.out,
                  story_in_order(hand_story(kDefaultQ, kDefaultK, {{0.9, 0.1}, {0.2, 0.5}, {0.3, 0.2}},
                                            1.0 / std::sqrt(3.0))));
}

TEST_F(CliExplainFiles, NpyWithWrongRankIsUsageError) {
  attnkit::write_npy(path("q.npy"), tensor_from({1, 3}, kDefaultQ, DType::f32));
  const Result r = cli({"explain", "--q", path("q.npy")});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "--q")) << r.err;
  EXPECT_TRUE(contains(r.err, "[1, 3]")) << r.err;
}

TEST_F(CliExplainFiles, MissingNpyIsFileError) {
  const Result r = cli({"explain", "--k", path("absent.npy")});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(r.err.starts_with("attnkit explain: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "absent.npy")) << r.err;
}

TEST(CliExplain, KeyLengthMismatchNamesFlagsAndSizes) {
  const Result r = cli({"explain", "--q", "1,2", "--k", "1,2,3;4,5,6", "--v", "1;2"});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "--k")) << r.err;
  EXPECT_TRUE(contains(r.err, "--q")) << r.err;
  EXPECT_TRUE(contains(r.err, "length 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "length 2")) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(CliExplain, ValueCountMismatchNamesFlagsAndSizes) {
  const Result r = cli({"explain", "--v", "1,2;3,4"});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "--v has 2 value vectors")) << r.err;
  EXPECT_TRUE(contains(r.err, "default --k has 3 keys")) << r.err;
}

TEST(CliExplain, MalformedValuesAreUsageErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {"--q", "0.5,abc,1"},           // not a number
      {"--k", "1,2,3;4,5"},           // ragged rows
      {"--q", ""},                    // empty
      {"--k", "1,2,3;"},              // empty row
      {"--bogus"},                    // unknown flag
      {"--q"},                        // missing value
      {"--no-scale=yes"},             // boolean flag given a value
      {"--q", "1,2,3", "--q", "1,2,3"},  // repeated
      {"stray"},                      // positional
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"explain"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = cli(args);
    EXPECT_EQ(r.code, kUsage) << extra.front();
    EXPECT_TRUE(r.err.starts_with("attnkit explain: ")) << r.err;
    EXPECT_TRUE(contains(r.err, "attnkit explain --help")) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  const Result bad = cli({"explain", "--q", "0.5,abc,1"});
  EXPECT_TRUE(contains(bad.err, "--q")) << bad.err;
  EXPECT_TRUE(contains(bad.err, "abc")) << bad.err;
}

// The parser's conventions, on explain's flags: an empty inline value is that value (not the next
// word), and -h/--help is answered wherever it is, except as a flag's value.
TEST(CliExplain, EmptyInlineValueAndHelpAnywhere) {
  const Result empty = cli({"explain", "--q=", "--no-scale"});
  EXPECT_EQ(empty.code, kUsage);
  EXPECT_TRUE(contains(empty.err, "--q: expected a comma-separated list of numbers, got an empty value")) << empty.err;
  for (const std::vector<std::string>& args : {std::vector<std::string>{"explain", "--q", "abc", "--help"},
                                              {"explain", "--bogus", "-h"}}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, kOk) << args[1] << ": " << r.err;
    EXPECT_TRUE(contains(r.out, "Usage: attnkit explain")) << r.out;
  }
  const Result as_value = cli({"explain", "--q", "-h"});
  EXPECT_EQ(as_value.code, kUsage);
  EXPECT_TRUE(contains(as_value.err, "--q: item 1 of '-h'")) << as_value.err;
}

// ---- run: an independent float64 attention ----

// A dense array in C order.
struct Array {
  std::vector<std::int64_t> shape;
  std::vector<double> data;

  std::int64_t dim(int d) const { return shape[static_cast<std::size_t>(d)]; }
};

// Shape as rank 4, with leading 1s (what the tool does with rank 2 and 3 inputs).
std::vector<std::int64_t> as_rank4(std::vector<std::int64_t> shape) {
  while (shape.size() < 4) shape.insert(shape.begin(), 1);
  return shape;
}

enum class CausalMode { none, top_left, bottom_right };

struct Spec {
  double scale = 0.0;  // 0: 1/sqrt(d_k)
  CausalMode causal = CausalMode::none;
  std::int64_t left = -1, right = -1;
  std::function<bool(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> keep;  // (b, h, i, j)
  std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> add;
  std::vector<std::int64_t> key_lengths;
  std::vector<double> alibi;
  double softcap = 0.0;
};

struct Expected {
  Array out, lse, probs;  // rank 4 [B, Hq, n, d_v], rank 3 [B, Hq, n], rank 4 [B, Hq, n, m]
};

// softmax(q·kᵀ·scale + bias)·v with plain loops, following the order in docs/semantics.md.
Expected naive_attention(const Array& q_in, const Array& k_in, const Array& v_in, const Spec& spec) {
  Array q{as_rank4(q_in.shape), q_in.data}, k{as_rank4(k_in.shape), k_in.data}, v{as_rank4(v_in.shape), v_in.data};
  const std::int64_t B = q.dim(0), Hq = q.dim(1), n = q.dim(2), dk = q.dim(3);
  const std::int64_t Hkv = k.dim(1), m = k.dim(2), dv = v.dim(3);
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(dk));
  const double inf = std::numeric_limits<double>::infinity();
  Expected e;
  e.out = {{B, Hq, n, dv}, std::vector<double>(static_cast<std::size_t>(B * Hq * n * dv), 0.0)};
  e.lse = {{B, Hq, n}, std::vector<double>(static_cast<std::size_t>(B * Hq * n), -inf)};
  e.probs = {{B, Hq, n, m}, std::vector<double>(static_cast<std::size_t>(B * Hq * n * m), 0.0)};
  auto at = [](const Array& a, std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) {
    return a.data[static_cast<std::size_t>(((i0 * a.dim(1) + i1) * a.dim(2) + i2) * a.dim(3) + i3)];
  };
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t g = h / (Hq / Hkv);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t aligned = spec.causal == CausalMode::bottom_right ? i + (m - n) : i;
        std::vector<double> s(static_cast<std::size_t>(m), -inf);
        for (std::int64_t j = 0; j < m; ++j) {
          bool visible = spec.key_lengths.empty() || j < spec.key_lengths[static_cast<std::size_t>(b)];
          if (spec.causal != CausalMode::none) visible = visible && j <= aligned;
          if (spec.left >= 0) visible = visible && j >= aligned - spec.left;
          if (spec.right >= 0) visible = visible && j <= aligned + spec.right;
          if (spec.keep) visible = visible && spec.keep(b, h, i, j);
          if (!visible) continue;
          double x = 0.0;
          for (std::int64_t c = 0; c < dk; ++c) x += at(q, b, h, i, c) * at(k, b, g, j, c);
          x *= scale;
          if (spec.softcap > 0) x = spec.softcap * std::tanh(x / spec.softcap);
          if (!spec.alibi.empty()) x -= spec.alibi[static_cast<std::size_t>(h)] * std::abs(static_cast<double>(aligned - j));
          if (spec.add) x += spec.add(b, h, i, j);
          s[static_cast<std::size_t>(j)] = x;
        }
        const double max = *std::max_element(s.begin(), s.end());
        if (max == -inf) continue;  // no visible key: O = 0, LSE = -inf, probs = 0
        double sum = 0.0;
        for (double x : s) sum += std::exp(x - max);
        const std::size_t row = static_cast<std::size_t>((b * Hq + h) * n + i);
        e.lse.data[row] = max + std::log(sum);
        for (std::int64_t j = 0; j < m; ++j) {
          const double p = std::exp(s[static_cast<std::size_t>(j)] - max) / sum;
          e.probs.data[row * static_cast<std::size_t>(m) + static_cast<std::size_t>(j)] = p;
          for (std::int64_t c = 0; c < dv; ++c) {
            e.out.data[row * static_cast<std::size_t>(dv) + static_cast<std::size_t>(c)] += p * at(v, b, g, j, c);
          }
        }
      }
    }
  }
  return e;
}

// ---- run: files ----

Array array_of(const Tensor& t) {
  Array a{t.shape(), std::vector<double>(static_cast<std::size_t>(t.numel()))};
  const auto* bytes = static_cast<const unsigned char*>(t.raw());
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    a.data[i] = attnkit::load_as_double(bytes + i * attnkit::dtype_size(t.dtype()), t.dtype());
  }
  return a;
}

// Gaussian values stored as `dtype`; returns the stored (rounded) values.
Tensor random_tensor(const std::vector<std::int64_t>& shape, std::uint64_t seed, DType dtype = DType::f64,
                     double stddev = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, stddev);
  Tensor t(DType::f64, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = normal(rng);
  return dtype == DType::f64 ? std::move(t) : Tensor::converted(t.view(), dtype);
}

// Tolerance of one output element against the float64 oracle, per compute dtype.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-12;
    case DType::f32: return 2e-5;
    case DType::f16: return 5e-3;
    case DType::bf16: return 4e-2;
    default: return 0.0;
  }
}

void expect_close(const Array& actual, const std::vector<std::int64_t>& shape, const std::vector<double>& expected,
                  double tol, const std::string& what) {
  ASSERT_EQ(actual.shape, shape) << what;
  ASSERT_EQ(actual.data.size(), expected.size()) << what;
  constexpr int kMaxReported = 5;  // one bug breaks many elements; a few show the pattern
  int reported = 0;
  for (std::size_t i = 0; i < expected.size() && reported < kMaxReported; ++i) {
    const bool ok = std::isinf(expected[i]) ? actual.data[i] == expected[i]
                                            : std::abs(actual.data[i] - expected[i]) <= tol;
    if (!ok) {
      ++reported;
      ADD_FAILURE() << what << " element " << i << ": got " << actual.data[i] << ", expected " << expected[i]
                    << " (tolerance " << tol << ")";
    }
  }
}

struct Problem {
  Tensor q, k, v;
};

class CliRun : public TempDir {
 protected:
  // Writes q, k, v with the given shapes as `dtype` and remembers their stored values.
  void make(const std::vector<std::int64_t>& q_shape, const std::vector<std::int64_t>& k_shape,
            const std::vector<std::int64_t>& v_shape, DType dtype = DType::f64, double q_stddev = 1.0) {
    p_.q = random_tensor(q_shape, 11, dtype, q_stddev);
    p_.k = random_tensor(k_shape, 12, dtype);
    p_.v = random_tensor(v_shape, 13, dtype);
    attnkit::write_npy(path("q.npy"), p_.q);
    attnkit::write_npy(path("k.npy"), p_.k);
    attnkit::write_npy(path("v.npy"), p_.v);
  }
  void make_default(DType dtype = DType::f64, double q_stddev = 1.0) {
    make({kB, kH, kN, kDk}, {kB, kH, kM, kDk}, {kB, kH, kM, kDv}, dtype, q_stddev);
  }

  Result run(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run", "--q", path("q.npy"), "--k", path("k.npy"),
                                     "--v", path("v.npy"), "--out", path("o.npy")};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  }

  Array read(const std::string& name) { return array_of(attnkit::read_npy(path(name))); }

  Expected expected(const Spec& spec) const {
    return naive_attention(array_of(p_.q), array_of(p_.k), array_of(p_.v), spec);
  }

  // Runs with `extra` flags and checks O against the oracle with `spec`.
  void check_run(const std::vector<std::string>& extra, const Spec& spec, DType dtype = DType::f64) {
    const Result r = run(extra);
    ASSERT_EQ(r.code, kOk) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
    const Expected e = expected(spec);
    std::vector<std::int64_t> shape = e.out.shape;  // the oracle works in rank 4; O keeps the inputs' rank
    shape.erase(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(4 - p_.q.shape().size()));
    expect_close(read("o.npy"), shape, e.out.data, tolerance(dtype), "O");
  }

  static constexpr std::int64_t kB = 2, kH = 3, kN = 5, kM = 7, kDk = 4, kDv = 6;
  Problem p_;
};

// The per-option runs, in float64 (the reference kernel) and in float32 (the fast kernel), each
// against the float64 oracle with its dtype's tolerance.
class CliRunOptions : public CliRun, public ::testing::WithParamInterface<DType> {
 protected:
  static DType dtype() { return GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(Dtypes, CliRunOptions, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(attnkit::dtype_name(info.param)); });

TEST_P(CliRunOptions, PlainMatchesIndependentComputation) {
  make_default(dtype());
  check_run({}, Spec{}, dtype());
  EXPECT_EQ(attnkit::read_npy(path("o.npy")).dtype(), dtype());
}

TEST_P(CliRunOptions, ExplicitScale) {
  make_default(dtype());
  Spec spec;
  spec.scale = 0.3;
  check_run({"--scale", "0.3"}, spec, dtype());
}

TEST_P(CliRunOptions, CausalTopLeft) {
  make_default(dtype());
  Spec spec;
  spec.causal = CausalMode::top_left;
  check_run({"--causal", "top-left"}, spec, dtype());
}

TEST_P(CliRunOptions, CausalBottomRight) {
  make_default(dtype());
  Spec spec;
  spec.causal = CausalMode::bottom_right;
  check_run({"--causal=bottom-right"}, spec, dtype());
}

TEST_P(CliRunOptions, CausalBottomRightWithMoreQueriesThanKeysLeavesEmptyRowsZero) {
  make({1, 2, 6, 3}, {1, 2, 4, 3}, {1, 2, 4, 2}, dtype());
  Spec spec;
  spec.causal = CausalMode::bottom_right;
  check_run({"--causal", "bottom-right", "--lse", path("lse.npy")}, spec, dtype());
  const Expected e = expected(spec);
  expect_close(read("lse.npy"), e.lse.shape, e.lse.data, tolerance(DType::f32), "LSE");  // LSE is written as float32
  EXPECT_TRUE(std::isinf(read("lse.npy").data[0]));  // row 0 sees no key
}

TEST_P(CliRunOptions, CausalNoneIsPlain) {
  make_default(dtype());
  check_run({"--causal", "none"}, Spec{}, dtype());
}

TEST_P(CliRunOptions, SlidingWindow) {
  make_default(dtype());
  Spec spec;
  spec.left = 2;
  spec.right = 1;
  check_run({"--window", "2,1"}, spec, dtype());
}

TEST_P(CliRunOptions, WindowWithUnboundedSideAndCausal) {
  make_default(dtype());
  Spec spec;
  spec.causal = CausalMode::bottom_right;
  spec.left = 3;
  spec.right = -1;
  check_run({"--window", "3,-1", "--causal", "bottom-right"}, spec, dtype());
}

// Sides near the top of int64 ("unbounded" written as INT64_MAX or sys.maxsize) keep every key on
// their side, exactly as −1 does.
TEST_P(CliRunOptions, WindowSidesUpToInt64MaxMeanUnbounded) {
  make_default(dtype());
  for (const char* window : {"-1,9223372036854775807", "9223372036854775807,-1", "4611686018427387904,9223372036854775806"}) {
    SCOPED_TRACE(window);
    Spec spec;
    spec.causal = CausalMode::bottom_right;
    check_run({"--window", window, "--causal", "bottom-right"}, spec, dtype());
    spec.causal = CausalMode::none;
    check_run({"--window", window}, spec, dtype());
  }
}

// A keep-mask with a fully masked row (row 1) and an additive mask with large negative entries.
bool keep_pattern(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  return i != 1 && (b + h + i + j) % 3 != 0;
}
double bias_pattern(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  return 0.25 * static_cast<double>((b * 5 + h * 3 + i * 2 + j) % 7) - 1.0;
}

Tensor mask_tensor(const std::vector<std::int64_t>& shape4, DType dtype, bool keep) {
  Tensor t(dtype, shape4);
  std::int64_t flat = 0;
  for (std::int64_t b = 0; b < shape4[0]; ++b)
    for (std::int64_t h = 0; h < shape4[1]; ++h)
      for (std::int64_t i = 0; i < shape4[2]; ++i)
        for (std::int64_t j = 0; j < shape4[3]; ++j, ++flat) {
          const double value = keep ? (keep_pattern(b, h, i, j) ? 1.0 : 0.0) : bias_pattern(b, h, i, j);
          attnkit::store_from_double(static_cast<unsigned char*>(t.raw()) + flat * attnkit::dtype_size(dtype), dtype,
                                     value);
        }
  return t;
}

Tensor reshaped(const Tensor& t, const std::vector<std::int64_t>& shape) {
  Tensor r(t.dtype(), shape);
  std::copy_n(static_cast<const unsigned char*>(t.raw()), t.nbytes(), static_cast<unsigned char*>(r.raw()));
  return r;
}

TEST_P(CliRunOptions, BoolMaskRank2) {
  make_default(dtype());
  attnkit::write_npy(path("mask.npy"), reshaped(mask_tensor({1, 1, kN, kM}, DType::boolean, true), {kN, kM}));
  Spec spec;
  spec.keep = [](auto, auto, auto i, auto j) { return keep_pattern(0, 0, i, j); };
  check_run({"--mask", path("mask.npy")}, spec, dtype());
}

TEST_P(CliRunOptions, BoolMaskRank4) {
  make_default(dtype());
  attnkit::write_npy(path("mask.npy"), mask_tensor({kB, kH, kN, kM}, DType::boolean, true));
  Spec spec;
  spec.keep = keep_pattern;
  check_run({"--mask", path("mask.npy")}, spec, dtype());
}

TEST_P(CliRunOptions, AdditiveMaskRank2) {
  make_default(dtype());
  attnkit::write_npy(path("mask.npy"), reshaped(mask_tensor({1, 1, kN, kM}, DType::f64, false), {kN, kM}));
  Spec spec;
  spec.add = [](auto, auto, auto i, auto j) { return bias_pattern(0, 0, i, j); };
  check_run({"--mask", path("mask.npy")}, spec, dtype());
}

TEST_P(CliRunOptions, AdditiveMaskRank4BroadcastOverHeads) {
  make_default(dtype());
  attnkit::write_npy(path("mask.npy"), mask_tensor({kB, 1, kN, kM}, DType::f32, false));
  Spec spec;
  spec.add = [](auto b, auto, auto i, auto j) { return bias_pattern(b, 0, i, j); };
  check_run({"--mask", path("mask.npy")}, spec, dtype());
}

TEST_P(CliRunOptions, KeyLengths) {
  make_default(dtype());
  Spec spec;
  spec.key_lengths = {3, 7};
  check_run({"--key-lengths", "3,7"}, spec, dtype());
}

TEST_P(CliRunOptions, KeyLengthZeroGivesZeroRows) {
  make_default(dtype());
  Spec spec;
  spec.key_lengths = {0, 5};
  check_run({"--key-lengths", "0,5"}, spec, dtype());
}

TEST_P(CliRunOptions, Alibi) {
  make_default(dtype());
  Spec spec;
  spec.alibi = {0.5, 0.25, 0.125};  // exact in float32, as the options store them
  check_run({"--alibi", "0.5,0.25,0.125"}, spec, dtype());
}

TEST_P(CliRunOptions, Softcap) {
  make_default(dtype(), 4.0);  // large logits, so the cap matters
  Spec spec;
  spec.softcap = 0.7;
  check_run({"--softcap", "0.7"}, spec, dtype());
  const Expected uncapped = expected(Spec{});
  EXPECT_GT(std::abs(read("o.npy").data[0] - uncapped.out.data[0]), 1e-6) << "the cap changed nothing";
}

TEST_P(CliRunOptions, GroupedQueryHeads) {
  make({1, 4, 5, 3}, {1, 2, 6, 3}, {1, 2, 6, 2}, dtype());
  check_run({}, Spec{}, dtype());
}

TEST_P(CliRunOptions, DropoutMatchesDirectCallWithSameSeed) {
  make_default(dtype());
  const Result r = run({"--dropout", "0.3", "--seed", "1234"});
  ASSERT_EQ(r.code, kOk) << r.err;

  Tensor direct(dtype(), {kB, kH, kN, kDv});
  attnkit::AttentionOptions options;
  options.dropout_p = 0.3;
  options.seed = 1234;
  attnkit::forward(p_.q.view(), p_.k.view(), p_.v.view(), direct.view(), options);
  const Array via_cli = read("o.npy");
  EXPECT_EQ(via_cli.data, array_of(direct).data) << "same seed, same output";
  EXPECT_NE(via_cli.data, expected(Spec{}).out.data) << "dropout changed nothing";

  ASSERT_EQ(run({"--dropout", "0.3", "--seed", "99"}).code, kOk);
  EXPECT_NE(read("o.npy").data, via_cli.data) << "another seed, another output";
}

TEST_F(CliRun, DtypeDefaultsToQs) {
  make_default(DType::f32);
  check_run({}, Spec{}, DType::f32);
  EXPECT_EQ(attnkit::read_npy(path("o.npy")).dtype(), DType::f32);
}

TEST_F(CliRun, DtypeF16InputsStayF16) {
  make_default(DType::f16);
  check_run({}, Spec{}, DType::f16);
  EXPECT_EQ(attnkit::read_npy(path("o.npy")).dtype(), DType::f16);
}

TEST_F(CliRun, DtypeConversions) {
  make_default();  // f64 files
  const std::pair<const char*, DType> cases[] = {
      {"f32", DType::f32}, {"f16", DType::f16}, {"bf16", DType::bf16}, {"f64", DType::f64}};
  for (const auto& [name, dtype] : cases) {
    SCOPED_TRACE(name);
    check_run({"--dtype", name, "--probs", path("p.npy")}, Spec{}, dtype);
    const DType written = dtype == DType::bf16 ? DType::f32 : dtype;  // .npy has no bf16
    EXPECT_EQ(attnkit::read_npy(path("o.npy")).dtype(), written);
    EXPECT_EQ(attnkit::read_npy(path("p.npy")).dtype(), written);
  }
}

TEST_F(CliRun, NonFloatingQueryNeedsDtype) {
  make_default();
  Tensor q_int(DType::i32, {kB, kH, kN, kDk});
  attnkit::write_npy(path("q.npy"), q_int);
  const Result r = run({});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "i32")) << r.err;
  EXPECT_TRUE(contains(r.err, "--dtype")) << r.err;
}

TEST_F(CliRun, AMaskOfFiveDimensionsIsRefusedByItsFlag) {
  make_default();
  attnkit::write_npy(path("mask.npy"), Tensor(DType::boolean, {1, kB, kH, kN, kM}));
  const Result r = run({"--mask", path("mask.npy")});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "--mask " + path("mask.npy") + ": shape [1, 2, 3, 5, 7] has 5 dimensions")) << r.err;
}

TEST_F(CliRun, LseAndProbsOutputs) {
  make_default();
  Spec spec;
  spec.causal = CausalMode::top_left;
  check_run({"--causal", "top-left", "--lse", path("lse.npy"), "--probs", path("p.npy")}, spec);
  const Expected e = expected(spec);
  const Tensor lse = attnkit::read_npy(path("lse.npy"));
  EXPECT_EQ(lse.dtype(), DType::f32);
  expect_close(array_of(lse), e.lse.shape, e.lse.data, 1e-5, "LSE");
  expect_close(read("p.npy"), e.probs.shape, e.probs.data, tolerance(DType::f64), "probs");
}

TEST_F(CliRun, Rank2InputsKeepTheirRank) {
  make({kN, kDk}, {kM, kDk}, {kM, kDv});
  const Result r = run({"--lse", path("lse.npy"), "--probs", path("p.npy")});
  ASSERT_EQ(r.code, kOk) << r.err;
  const Expected e = expected(Spec{});
  expect_close(read("o.npy"), {kN, kDv}, e.out.data, tolerance(DType::f64), "O");
  expect_close(read("lse.npy"), {kN}, e.lse.data, 1e-5, "LSE");
  expect_close(read("p.npy"), {kN, kM}, e.probs.data, tolerance(DType::f64), "probs");
}

TEST_F(CliRun, Rank3InputsKeepTheirRank) {
  make({kH, kN, kDk}, {kH, kM, kDk}, {kH, kM, kDv});
  const Result r = run({"--lse", path("lse.npy"), "--probs", path("p.npy")});
  ASSERT_EQ(r.code, kOk) << r.err;
  const Expected e = expected(Spec{});
  expect_close(read("o.npy"), {kH, kN, kDv}, e.out.data, tolerance(DType::f64), "O");
  expect_close(read("lse.npy"), {kH, kN}, e.lse.data, 1e-5, "LSE");
  expect_close(read("p.npy"), {kH, kN, kM}, e.probs.data, tolerance(DType::f64), "probs");
}

TEST_F(CliRun, Rank3MaskGoesWithRank3Inputs) {
  make({kH, kN, kDk}, {kH, kM, kDk}, {kH, kM, kDv});
  attnkit::write_npy(path("mask.npy"), reshaped(mask_tensor({1, kH, kN, kM}, DType::boolean, true), {kH, kN, kM}));
  Spec spec;
  spec.keep = [](auto, auto h, auto i, auto j) { return keep_pattern(0, h, i, j); };
  const Result r = run({"--mask", path("mask.npy")});
  ASSERT_EQ(r.code, kOk) << r.err;
  expect_close(read("o.npy"), {kH, kN, kDv}, expected(spec).out.data, tolerance(DType::f64), "O");
}

// float32 (the fast kernel), with enough rows for several work items per head, causal: 1, 2 and 3
// threads write the same bytes.
TEST_F(CliRun, ThreadsDoNotChangeTheResult) {
  make({2, 3, 200, 16}, {2, 3, 230, 16}, {2, 3, 230, 8}, DType::f32);
  std::vector<std::vector<unsigned char>> outputs;
  for (const char* threads : {"1", "2", "3"}) {
    const Result r = run({"--threads", threads, "--causal", "bottom-right", "--verbose"});
    ASSERT_EQ(r.code, kOk) << r.err;
    EXPECT_TRUE(contains(r.out, "fast kernel")) << r.out;
    const Tensor o = attnkit::read_npy(path("o.npy"));
    ASSERT_EQ(o.dtype(), DType::f32);
    const auto* bytes = static_cast<const unsigned char*>(o.raw());
    outputs.emplace_back(bytes, bytes + o.nbytes());
  }
  attnkit::set_num_threads(0);  // restore the default for the tests that follow
  Spec spec;
  spec.causal = CausalMode::bottom_right;
  expect_close(read("o.npy"), {2, 3, 200, 8}, expected(spec).out.data, tolerance(DType::f32), "O");
  EXPECT_EQ(outputs[1], outputs[0]) << "2 threads";
  EXPECT_EQ(outputs[2], outputs[0]) << "3 threads";
}

TEST_F(CliRun, KernelReferenceAndAuto) {
  make_default();
  check_run({"--kernel", "reference"}, Spec{});
  check_run({"--kernel", "auto"}, Spec{});
}

// --kernel fast runs for f32, f16 and bf16 (bf16 by --dtype: .npy has no bf16) and agrees with the oracle.
TEST_F(CliRun, KernelFastRunsForEachOfItsDtypes) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(attnkit::dtype_name(dtype));
    make_default(dtype == DType::bf16 ? DType::f32 : dtype);
    std::vector<std::string> extra = {"--kernel", "fast", "--verbose"};
    if (dtype == DType::bf16) extra.insert(extra.end(), {"--dtype", "bf16"});
    const Result r = run(extra);
    ASSERT_EQ(r.code, kOk) << r.err;
    EXPECT_TRUE(contains(r.out, "fast kernel")) << r.out;
    expect_close(read("o.npy"), {kB, kH, kN, kDv}, expected(Spec{}).out.data, tolerance(dtype), "O");
  }
}

// The fast kernel refuses float64 by name, and writes nothing.
TEST_F(CliRun, KernelFastRefusesFloat64) {
  make_default();
  const Result r = run({"--kernel", "fast"});
  EXPECT_EQ(r.code, kError) << r.err;
  EXPECT_TRUE(r.err.starts_with("attnkit run: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "fast")) << r.err;
  EXPECT_TRUE(contains(r.err, "[unsupported]")) << r.err;
  EXPECT_FALSE(fs::exists(path("o.npy"))) << "nothing is written on failure";
}

// Without --dtype, K, V and dO must have Q's dtype (a float64 key file is not quietly rounded to
// float16); with it, every input is converted.
TEST_F(CliRun, InputsOfAnotherDtypeThanQAreAnErrorUnlessDtypeIsGiven) {
  make_default(DType::f16);
  for (const char* name : {"k.npy", "v.npy"}) {
    SCOPED_TRACE(name);
    make_default(DType::f16);
    const Tensor stored = attnkit::read_npy(path(name));
    attnkit::write_npy(path(name), Tensor::converted(stored.view(), DType::f64));
    const Result r = run({});
    EXPECT_EQ(r.code, kError) << r.err;
    const std::string flag = std::string("--") + name[0] + " ";
    EXPECT_TRUE(contains(r.err, flag + path(name) + " has dtype f64 but --q has f16")) << r.err;
    EXPECT_TRUE(contains(r.err, "[invalid_dtype]")) << r.err;
    EXPECT_TRUE(contains(r.err, "--dtype")) << r.err;
    EXPECT_FALSE(fs::exists(path("o.npy"))) << "nothing is written on failure";
    check_run({"--dtype", "f32"}, Spec{}, DType::f16);  // f16 values, converted exactly to f32
    EXPECT_EQ(attnkit::read_npy(path("o.npy")).dtype(), DType::f32);
    fs::remove(path("o.npy"));
  }
  make_default(DType::f32);
  attnkit::write_npy(path("do.npy"), random_tensor({kB, kH, kN, kDv}, 14, DType::f64));
  const Result r = run({"--d-out", path("do.npy"), "--dq", path("dq.npy")});
  EXPECT_EQ(r.code, kError) << r.err;
  EXPECT_TRUE(contains(r.err, "--d-out " + path("do.npy") + " has dtype f64 but --q has f32")) << r.err;
  EXPECT_FALSE(fs::exists(path("dq.npy")));
  EXPECT_EQ(run({"--d-out", path("do.npy"), "--dq", path("dq.npy"), "--dtype", "f32"}).code, kOk);
}

// Every output or none: when one output cannot be written (its directory is missing, the device is
// full), the command fails and no other output is created or changed, and nothing is left behind.
TEST_F(CliRun, AnOutputThatCannotBeWrittenLeavesEveryOtherOutputUntouched) {
  make_default(DType::f32);
  const auto files = [&] {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> inputs = files();
  Result r = run({"--lse", path("missing/lse.npy")});
  EXPECT_EQ(r.code, kError) << r.err;
  EXPECT_TRUE(contains(r.err, path("missing/lse.npy") + ": cannot open for writing")) << r.err;
  EXPECT_EQ(files(), inputs) << "o.npy created, or a temporary file left";

  {
    std::ofstream previous(path("o.npy"), std::ios::binary);
    previous << "the previous contents";
  }
  const auto contents = [&](const std::string& name) {
    std::ifstream in(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  r = run({"--probs", path("p.npy"), "--lse", path("missing/lse.npy")});
  EXPECT_EQ(r.code, kError) << r.err;
  EXPECT_EQ(contents("o.npy"), "the previous contents");
  EXPECT_FALSE(fs::exists(path("p.npy")));
  if (fs::exists("/dev/full")) {
    r = run({"--lse", "/dev/full"});
    EXPECT_EQ(r.code, kError) << r.err;
    EXPECT_TRUE(contains(r.err, "/dev/full: write failed")) << r.err;
    EXPECT_EQ(contents("o.npy"), "the previous contents");
    EXPECT_TRUE(fs::is_character_file("/dev/full")) << "a device is written in place, never replaced";
  }
  std::vector<std::string> expected = inputs;
  expected.push_back("o.npy");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files(), expected) << "a temporary file left";
  ASSERT_EQ(run({"--lse", path("lse.npy")}).code, kOk);  // and when every output can be written, all are
  EXPECT_EQ(attnkit::read_npy(path("o.npy")).shape(), (std::vector<std::int64_t>{kB, kH, kN, kDv}));
  EXPECT_TRUE(fs::exists(path("lse.npy")));
}

TEST_F(CliRun, VerbosePrintsOneLine) {
  make_default();
  const Result r = run({"--verbose"});
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_TRUE(contains(r.out, "o.npy")) << r.out;
}

TEST_F(CliRun, MissingFileIsError) {
  make_default();
  fs::remove(path("k.npy"));
  const Result r = run({});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(r.err.starts_with("attnkit run: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "k.npy")) << r.err;
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(CliRun, MismatchedShapesPassTheLibraryMessageThrough) {
  make({kB, kH, kN, kDk}, {kB, kH, kM, kDk + 1}, {kB, kH, kM, kDv});
  std::string library_message;
  try {
    Tensor out(DType::f64, {kB, kH, kN, kDv});
    attnkit::forward(p_.q.view(), p_.k.view(), p_.v.view(), out.view());
  } catch (const attnkit::Error& e) {
    library_message = e.what();
  }
  ASSERT_FALSE(library_message.empty()) << "the library accepted mismatched d_k";
  const Result r = run({});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "attnkit run: " + library_message)) << r.err << "\nexpected: " << library_message;
  EXPECT_TRUE(contains(r.err, "[invalid_shape]")) << r.err;
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(CliRun, DifferentRanksAreAnError) {
  make({kN, kDk}, {kH, kM, kDk}, {kH, kM, kDv});
  const Result r = run({});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "same rank")) << r.err;
}

// ---- run on packed variable-length batches ----

// Rows [first, first + count) of a packed [total, H, D] float64 tensor, as the [H, count, D] a plain
// rank-3 run takes.
Tensor sequence_of(const Tensor& packed, std::int64_t first, std::int64_t count) {
  const std::int64_t H = packed.shape()[1], D = packed.shape()[2];
  Tensor out(DType::f64, {H, count, D});
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < count; ++i)
      for (std::int64_t c = 0; c < D; ++c)
        out.data<double>()[(h * count + i) * D + c] = packed.data<double>()[((first + i) * H + h) * D + c];
  return out;
}

class CliRunPacked : public TempDir {
 protected:
  // Sequences of (5, 7), (0, 3) and (4, 2) queries and keys; 4 query heads over 2 KV heads.
  const std::vector<std::int64_t> cu_q_{0, 5, 5, 9}, cu_k_{0, 7, 10, 12};
  Tensor q_ = random_tensor({9, 4, 6}, 21), k_ = random_tensor({12, 2, 6}, 22), v_ = random_tensor({12, 2, 5}, 23);
  Tensor d_out_ = random_tensor({9, 4, 5}, 24);

  void SetUp() override {
    TempDir::SetUp();
    attnkit::write_npy(path("q.npy"), q_);
    attnkit::write_npy(path("k.npy"), k_);
    attnkit::write_npy(path("v.npy"), v_);
    attnkit::write_npy(path("do.npy"), d_out_);
  }
  static std::string list(const std::vector<std::int64_t>& values) {
    std::string text;
    for (std::int64_t x : values) text += (text.empty() ? "" : ",") + std::to_string(x);
    return text;
  }
  Result run_packed(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                     "--out", path("o.npy"), "--cu-seqlens-q", list(cu_q_), "--cu-seqlens-k", list(cu_k_)};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  }
};

// Each sequence's rows of the packed outputs equal a plain run on that sequence's own files (float64:
// the reference kernel, bit for bit), for the forward, the log-sum-exp, the probabilities and the
// gradients, with options that act per sequence.
TEST_F(CliRunPacked, EachSequenceEqualsAPlainRunOnIt) {
  const std::vector<std::string> options = {"--causal", "bottom-right", "--window", "3,-1", "--alibi", "0.5,0.25,0.125,0.0625"};
  std::vector<std::string> extra = {"--lse", path("lse.npy"), "--probs", path("p.npy"), "--d-out", path("do.npy"),
                                    "--dq", path("dq.npy"), "--dk", path("dk.npy"), "--dv", path("dv.npy")};
  extra.insert(extra.end(), options.begin(), options.end());
  const Result packed = run_packed(extra);
  ASSERT_EQ(packed.code, kOk) << packed.err;
  const Tensor out = attnkit::read_npy(path("o.npy")), lse = attnkit::read_npy(path("lse.npy"));
  const Tensor probs = attnkit::read_npy(path("p.npy")), dq = attnkit::read_npy(path("dq.npy"));
  const Tensor dk = attnkit::read_npy(path("dk.npy")), dv = attnkit::read_npy(path("dv.npy"));
  EXPECT_EQ(out.shape(), (std::vector<std::int64_t>{9, 4, 5}));
  EXPECT_EQ(lse.shape(), (std::vector<std::int64_t>{4, 9}));
  EXPECT_EQ(probs.shape(), (std::vector<std::int64_t>{3, 4, 5, 7}));  // [B, Hq, max_n, max_m]
  for (std::size_t b = 0; b + 1 < cu_q_.size(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const std::int64_t first_q = cu_q_[b], n = cu_q_[b + 1] - first_q, first_k = cu_k_[b], m = cu_k_[b + 1] - first_k;
    attnkit::write_npy(path("q1.npy"), sequence_of(q_, first_q, n));
    attnkit::write_npy(path("k1.npy"), sequence_of(k_, first_k, m));
    attnkit::write_npy(path("v1.npy"), sequence_of(v_, first_k, m));
    attnkit::write_npy(path("do1.npy"), sequence_of(d_out_, first_q, n));
    std::vector<std::string> alone = {"run", "--q", path("q1.npy"), "--k", path("k1.npy"), "--v", path("v1.npy"),
                                      "--out", path("o1.npy"), "--lse", path("lse1.npy"), "--probs", path("p1.npy"),
                                      "--d-out", path("do1.npy"), "--dq", path("dq1.npy"), "--dk", path("dk1.npy"),
                                      "--dv", path("dv1.npy")};
    alone.insert(alone.end(), options.begin(), options.end());
    const Result r = cli(alone);
    ASSERT_EQ(r.code, kOk) << r.err;
    const Tensor out1 = attnkit::read_npy(path("o1.npy")), lse1 = attnkit::read_npy(path("lse1.npy"));
    const Tensor probs1 = attnkit::read_npy(path("p1.npy")), dq1 = attnkit::read_npy(path("dq1.npy"));
    const Tensor dk1 = attnkit::read_npy(path("dk1.npy")), dv1 = attnkit::read_npy(path("dv1.npy"));
    for (std::int64_t h = 0; h < 4; ++h) {
      for (std::int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(lse.data<float>()[h * 9 + first_q + i], lse1.data<float>()[h * n + i]);
        for (std::int64_t c = 0; c < 5; ++c)
          EXPECT_EQ(out.data<double>()[((first_q + i) * 4 + h) * 5 + c], out1.data<double>()[(h * n + i) * 5 + c]);
        for (std::int64_t c = 0; c < 6; ++c)
          EXPECT_EQ(dq.data<double>()[((first_q + i) * 4 + h) * 6 + c], dq1.data<double>()[(h * n + i) * 6 + c]);
        for (std::int64_t j = 0; j < 7; ++j) {
          const double p = probs.data<double>()[((static_cast<std::int64_t>(b) * 4 + h) * 5 + i) * 7 + j];
          EXPECT_EQ(p, j < m ? probs1.data<double>()[(h * n + i) * m + j] : 0.0);
        }
      }
    }
    for (std::int64_t g = 0; g < 2; ++g)
      for (std::int64_t j = 0; j < m; ++j) {
        for (std::int64_t c = 0; c < 6; ++c)
          EXPECT_EQ(dk.data<double>()[((first_k + j) * 2 + g) * 6 + c], dk1.data<double>()[(g * m + j) * 6 + c]);
        for (std::int64_t c = 0; c < 5; ++c)
          EXPECT_EQ(dv.data<double>()[((first_k + j) * 2 + g) * 5 + c], dv1.data<double>()[(g * m + j) * 5 + c]);
      }
  }
}

TEST_F(CliRunPacked, BadOffsetsAreLibraryErrorsNamingTheIndex) {
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out", path("o.npy"),
                        "--cu-seqlens-q", "0,5,4,9", "--cu-seqlens-k", list(cu_k_)});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "cu_seqlens_q[2]: 4 is less than cu_seqlens_q[1] = 5")) << r.err;
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(CliRunPacked, UsageErrors) {
  Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out", path("o.npy"),
                  "--cu-seqlens-q", list(cu_q_)});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "--cu-seqlens-q needs --cu-seqlens-k")) << r.err;
  r = run_packed({"--key-lengths", "1,1,1"});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "--key-lengths does not apply")) << r.err;
  attnkit::write_npy(path("q.npy"), random_tensor({1, 4, 9, 6}, 25));
  r = run_packed({});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "packed [total, H, D]")) << r.err;
}

TEST_F(CliRun, OptionOutOfRangeIsLibraryError) {
  make_default();
  const Result r = run({"--dropout", "1.5"});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "dropout_p")) << r.err;
  EXPECT_TRUE(contains(r.err, "[invalid_argument]")) << r.err;
}

TEST_F(CliRun, UsageErrors) {
  make_default();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus", "1"}, "--bogus"},
      {{"--key-lengths", "3,x"}, "--key-lengths"},
      {{"--alibi", "0.5,,0.1"}, "--alibi"},
      {{"--scale", "big"}, "--scale"},
      {{"--seed", "-3"}, "--seed"},
      {{"--window", "4"}, "--window"},
      {{"--causal", "diagonal"}, "--causal"},
      {{"--dtype", "f8"}, "--dtype"},
      {{"--kernel", "gpu"}, "--kernel"},
      {{"--threads", "many"}, "--threads"},
      {{"--threads", "1025"}, "0 (the default) to 1024"},  // above attnkit::kMaxThreads
      {{"--threads", "2147483647"}, "--threads"},
      {{"--lse"}, "--lse"},
  };
  for (const auto& [extra, flag] : cases) {
    const Result r = run(extra);
    EXPECT_EQ(r.code, kUsage) << extra.front() << ": " << r.err;
    EXPECT_TRUE(r.err.starts_with("attnkit run: ")) << r.err;
    EXPECT_TRUE(contains(r.err, flag)) << r.err;
    EXPECT_TRUE(contains(r.err, "attnkit run --help")) << r.err;
  }
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(CliRun, MissingRequiredFlagIsUsageError) {
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy")});
  EXPECT_EQ(r.code, kUsage);
  EXPECT_TRUE(contains(r.err, "missing required flag(s) --out")) << r.err;
  const Result none = cli({"run"});
  EXPECT_EQ(none.code, kUsage);
  EXPECT_TRUE(contains(none.err, "--q, --k, --v, --out")) << none.err;
}

// ---- run: gradients ----

// The library's own forward then backward on the same tensors and options: what `run --d-out` must
// write, bit for bit. Inputs of rank 2 or 3 are viewed as rank 4, as the tool does.
struct Gradients {
  Tensor out, lse, dq, dk, dv;
};

Gradients library_gradients(const Problem& p, const Tensor& d_out, const attnkit::AttentionOptions& options = {}) {
  const attnkit::ConstTensorView q = p.q.view4(), k = p.k.view4(), v = p.v.view4();
  const DType dtype = p.q.dtype();
  Gradients g;
  g.out = Tensor(dtype, {q.size(0), q.size(1), q.size(2), v.size(3)});
  g.lse = Tensor(DType::f32, {q.size(0), q.size(1), q.size(2)});
  g.dq = Tensor(dtype, p.q.shape());
  g.dk = Tensor(dtype, p.k.shape());
  g.dv = Tensor(dtype, p.v.shape());
  attnkit::forward(q, k, v, g.out.view(), options, attnkit::ForwardExtras{g.lse.view(), {}});
  attnkit::backward(q, k, v, g.out.view(), d_out.view4(), g.lse.view(), g.dq.view4(), g.dk.view4(), g.dv.view4(),
                    options);
  return g;
}

// `file` holds exactly `expected`'s bytes (bf16 results are compared as the float32 the file holds).
void expect_bitwise(const Tensor& file, const Tensor& expected, const std::string& what) {
  const Tensor same = expected.dtype() == file.dtype() ? expected : Tensor::converted(expected.view(), file.dtype());
  ASSERT_EQ(file.shape(), same.shape()) << what;
  ASSERT_EQ(file.nbytes(), same.nbytes()) << what;
  EXPECT_EQ(std::memcmp(file.raw(), same.raw(), file.nbytes()), 0) << what << " differs from the library's";
}

class CliRunGradients : public CliRun {
 protected:
  // dO, Gaussian, the shape of O for the problem made last, stored as `dtype`.
  void make_d_out(DType dtype) {
    const attnkit::ConstTensorView q = p_.q.view4(), v = p_.v.view4();
    std::vector<std::int64_t> shape = {q.size(0), q.size(1), q.size(2), v.size(3)};
    shape.erase(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(4 - p_.q.rank()));
    d_out_ = random_tensor(shape, 14, dtype);
    attnkit::write_npy(path("do.npy"), d_out_);
  }
  std::vector<std::string> gradient_flags() const {
    return {"--d-out", path("do.npy"), "--dq", path("dq.npy"), "--dk", path("dk.npy"), "--dv", path("dv.npy")};
  }
  // Runs with every gradient output and `extra`, and checks every file against the library.
  void check_gradients(const std::vector<std::string>& extra, const attnkit::AttentionOptions& options) {
    std::vector<std::string> args = gradient_flags();
    args.insert(args.end(), {"--lse", path("lse.npy")});
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = run(args);
    ASSERT_EQ(r.code, kOk) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    const Gradients g = library_gradients(p_, d_out_, options);
    expect_bitwise(attnkit::read_npy(path("dq.npy")), g.dq, "dQ");
    expect_bitwise(attnkit::read_npy(path("dk.npy")), g.dk, "dK");
    expect_bitwise(attnkit::read_npy(path("dv.npy")), g.dv, "dV");
    const Tensor o = attnkit::read_npy(path("o.npy"));
    expect_bitwise(Tensor::converted(o.view4(), o.dtype()), g.out, "O");  // the forward still writes O
    expect_bitwise(attnkit::read_npy(path("lse.npy")), g.lse, "LSE");
  }

  Tensor d_out_;
};

TEST_F(CliRunGradients, MatchTheLibraryCallBitwise) {
  make_default(DType::f32);
  make_d_out(DType::f32);
  check_gradients({}, {});
  EXPECT_EQ(attnkit::read_npy(path("dq.npy")).dtype(), DType::f32) << "gradients keep the inputs' dtype";
}

TEST_F(CliRunGradients, GroupedQueryHeadsSumIntoTheirKvHead) {
  make({1, 4, 5, 3}, {1, 2, 6, 3}, {1, 2, 6, 2});  // f64
  make_d_out(DType::f64);
  check_gradients({}, {});
  const Tensor dk = attnkit::read_npy(path("dk.npy"));
  EXPECT_EQ(dk.shape(), (std::vector<std::int64_t>{1, 2, 6, 3}));
  EXPECT_EQ(attnkit::read_npy(path("dq.npy")).shape(), (std::vector<std::int64_t>{1, 4, 5, 3}));

  // Independently: dV[g, j, c] = Σ over the query heads h of KV head g, Σ_i P[h, i, j] · dO[h, i, c].
  const Expected e = expected(Spec{});
  const Array d_out = array_of(d_out_);
  std::vector<double> dv(static_cast<std::size_t>(2 * 6 * 2), 0.0);
  for (std::int64_t h = 0; h < 4; ++h) {
    for (std::int64_t i = 0; i < 5; ++i) {
      for (std::int64_t j = 0; j < 6; ++j) {
        const double p = e.probs.data[static_cast<std::size_t>((h * 5 + i) * 6 + j)];
        for (std::int64_t c = 0; c < 2; ++c) {
          dv[static_cast<std::size_t>(((h / 2) * 6 + j) * 2 + c)] += p * d_out.data[static_cast<std::size_t>((h * 5 + i) * 2 + c)];
        }
      }
    }
  }
  expect_close(read("dv.npy"), {1, 2, 6, 2}, dv, tolerance(DType::f64), "dV");
}

TEST_F(CliRunGradients, CausalWithDropoutUsesEveryOption) {
  make_default(DType::f32);
  make_d_out(DType::f32);
  attnkit::AttentionOptions options;
  options.causal = attnkit::Causal::top_left;
  options.dropout_p = 0.3;
  options.seed = 99;
  check_gradients({"--causal", "top-left", "--dropout", "0.3", "--seed", "99"}, options);
  const Gradients plain = library_gradients(p_, d_out_);
  const Tensor dq = attnkit::read_npy(path("dq.npy"));
  EXPECT_NE(std::memcmp(dq.raw(), plain.dq.raw(), dq.nbytes()), 0) << "the options changed nothing";
}

TEST_F(CliRunGradients, OnlyTheAskedGradientsAreWrittenAndOutIsOptional) {
  make({kN, kDk}, {kM, kDk}, {kM, kDv});  // rank 2: the gradients keep it
  make_d_out(DType::f64);
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--d-out",
                        path("do.npy"), "--dv", path("dv.npy")});
  ASSERT_EQ(r.code, kOk) << r.err;
  const Gradients g = library_gradients(p_, d_out_);
  expect_bitwise(attnkit::read_npy(path("dv.npy")), g.dv, "dV");
  EXPECT_EQ(attnkit::read_npy(path("dv.npy")).shape(), (std::vector<std::int64_t>{kM, kDv}));
  for (const char* name : {"o.npy", "dq.npy", "dk.npy"}) EXPECT_FALSE(fs::exists(path(name))) << name;
}

TEST_F(CliRunGradients, Bf16GradientsAreWrittenAsFloat32) {
  make_default();  // f64 files
  make_d_out(DType::f64);
  const Result r = run({"--dtype", "bf16", "--d-out", path("do.npy"), "--dq", path("dq.npy")});
  ASSERT_EQ(r.code, kOk) << r.err;
  const Tensor dq = attnkit::read_npy(path("dq.npy"));
  EXPECT_EQ(dq.dtype(), DType::f32);
  const Problem bf16{Tensor::converted(p_.q.view(), DType::bf16), Tensor::converted(p_.k.view(), DType::bf16),
                     Tensor::converted(p_.v.view(), DType::bf16)};
  expect_bitwise(dq, library_gradients(bf16, Tensor::converted(d_out_.view(), DType::bf16)).dq, "dQ");
}

TEST_F(CliRunGradients, VerboseNamesBothPasses) {
  make_default();
  make_d_out(DType::f64);
  std::vector<std::string> args = gradient_flags();
  args.push_back("--verbose");
  const Result r = run(args);
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  for (const char* part : {"forward and backward on the reference kernel", "o.npy", "dq.npy", "dk.npy", "dv.npy"}) {
    EXPECT_TRUE(contains(r.out, part)) << part << " in " << r.out;
  }
}

TEST_F(CliRunGradients, GradientOutputsWithoutDOutAreUsageErrors) {
  make_default();
  for (const char* flag : {"--dq", "--dk", "--dv"}) {
    const Result r = run({flag, path("g.npy")});
    EXPECT_EQ(r.code, kUsage) << flag << ": " << r.err;
    EXPECT_TRUE(r.err.starts_with(std::string("attnkit run: ") + flag + " needs --d-out")) << r.err;
    EXPECT_TRUE(contains(r.err, "attnkit run --help")) << r.err;
  }
  EXPECT_FALSE(fs::exists(path("o.npy")));
  EXPECT_FALSE(fs::exists(path("g.npy")));
}

TEST_F(CliRunGradients, DOutWithoutGradientOutputsIsUsageError) {
  make_default();
  make_d_out(DType::f64);
  const Result r = run({"--d-out", path("do.npy")});
  EXPECT_EQ(r.code, kUsage) << r.err;
  EXPECT_TRUE(contains(r.err, "--d-out")) << r.err;
  EXPECT_TRUE(contains(r.err, "--dq, --dk and/or --dv")) << r.err;
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(CliRunGradients, DOutShapeMismatchPassesTheLibraryMessageThrough) {
  make_default();
  d_out_ = random_tensor({kB, kH, kN, kDv + 1}, 14);
  attnkit::write_npy(path("do.npy"), d_out_);
  std::string library_message;
  try {
    library_gradients(p_, d_out_);
  } catch (const attnkit::Error& e) {
    library_message = e.what();
  }
  ASSERT_FALSE(library_message.empty()) << "the library accepted a d_out of the wrong shape";
  EXPECT_TRUE(contains(library_message, "d_out")) << library_message;
  const Result r = run(gradient_flags());
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "attnkit run: " + library_message)) << r.err << "\nexpected: " << library_message;
  EXPECT_TRUE(contains(r.err, "[invalid_shape]")) << r.err;
  for (const char* name : {"o.npy", "dq.npy", "dk.npy", "dv.npy"}) EXPECT_FALSE(fs::exists(path(name))) << name;
}

TEST_F(CliRunGradients, DOutOfAnotherRankIsAnError) {
  make_default();
  attnkit::write_npy(path("do.npy"), random_tensor({kH, kN, kDv}, 14));
  const Result r = run(gradient_flags());
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "--d-out")) << r.err;
  EXPECT_TRUE(contains(r.err, "[3, 5, 6]")) << r.err;
  EXPECT_TRUE(contains(r.err, "[invalid_shape]")) << r.err;
  EXPECT_FALSE(fs::exists(path("dq.npy")));
}

TEST_F(CliRunGradients, MissingDOutFileIsError) {
  make_default();
  const Result r = run(gradient_flags());
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "do.npy")) << r.err;
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

// --kernel fast computes the gradients for f32, f16 and bf16 (bf16 by --dtype), each within its dtype's
// tolerance of the float64 reference's on the same (rounded) inputs, relative to the gradient's size.
TEST_F(CliRunGradients, KernelFastRunsForEachOfItsDtypes) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(attnkit::dtype_name(dtype));
    const DType stored = dtype == DType::bf16 ? DType::f32 : dtype;
    make_default(stored);
    make_d_out(stored);
    std::vector<std::string> args = gradient_flags();
    args.insert(args.end(), {"--kernel", "fast", "--verbose"});
    if (dtype == DType::bf16) args.insert(args.end(), {"--dtype", "bf16"});
    const Result r = run(args);
    ASSERT_EQ(r.code, kOk) << r.err;
    EXPECT_TRUE(contains(r.out, "fast kernel")) << r.out;
    // The oracle: the reference kernel in float64 on the inputs as the computation's dtype holds them.
    const auto exact = [&](const Tensor& t) {
      return Tensor::converted(Tensor::converted(t.view(), dtype).view(), DType::f64);
    };
    const Gradients g = library_gradients(Problem{exact(p_.q), exact(p_.k), exact(p_.v)}, exact(d_out_));
    for (const auto& [name, reference] : {std::pair{"dq.npy", &g.dq}, {"dk.npy", &g.dk}, {"dv.npy", &g.dv}}) {
      const Array expected = array_of(*reference);
      double size = 1.0;
      for (const double x : expected.data) size = std::max(size, std::abs(x));
      const Array got = read(name);
      expect_close(got, got.shape, expected.data, tolerance(dtype) * size, name);
    }
  }
}

// ---- the real binary ----

TEST(CliBinary, ExitCodes) {
  std::string output;
  EXPECT_EQ(run_binary("--version", output), kOk) << output;
  EXPECT_TRUE(contains(output, attnkit::version())) << output;
  EXPECT_EQ(run_binary("explain", output), kOk) << output;
  EXPECT_TRUE(contains(output, "0.2800")) << output;
  EXPECT_EQ(run_binary("frobnicate", output), kUsage) << output;
  EXPECT_EQ(run_binary("run --q /nonexistent/q.npy --k k.npy --v v.npy --out o.npy", output), kError) << output;
  EXPECT_EQ(run_binary("run --help", output), kOk) << output;
}

TEST(CliInfo, ShowsKernelsTargetsAndThreads) {
  const Result r = cli({"info"});
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_TRUE(contains(r.out, attnkit::version()));
  EXPECT_TRUE(contains(r.out, "f32, f16, bf16 -> fast")) << r.out;
  EXPECT_TRUE(contains(r.out, "f64 -> reference")) << r.out;
  EXPECT_TRUE(contains(r.out, std::string("target in use:     ") + attnkit::target_name(attnkit::active_target()))) << r.out;
  EXPECT_TRUE(contains(r.out, "scalar")) << r.out;
  EXPECT_EQ(cli({"info", "--help"}).code, kOk);
  EXPECT_EQ(cli({"info", "--bogus"}).code, kUsage);
}

// Runs the CLI binary as `VARIABLE=value attnkit ARGS` in a child process; its exit code and its
// standard output and error together.
std::pair<int, std::string> run_with_environment(const std::string& assignment, const std::string& args) {
  const std::string command = assignment + " " + std::string(ATTNKIT_CLI_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed: " + command};
  std::string output;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  return {WEXITSTATUS(pclose(pipe)), output};
}

// ATTNKIT_TARGET is read from the environment: force the portable target in a child process, name a
// target that does not exist, one this CPU lacks, and an emulated one.
TEST(CliInfo, TargetFromTheEnvironment) {
  std::string output;
  EXPECT_EQ(run_binary("info", output), kOk) << output;
  auto [code, forced] = run_with_environment("ATTNKIT_TARGET=scalar", "info");
  ASSERT_EQ(code, kOk) << forced;
  EXPECT_TRUE(contains(forced, "target in use:     scalar")) << forced;
  auto [bogus_code, bogus] = run_with_environment("ATTNKIT_TARGET=avx9000", "info");
  EXPECT_EQ(bogus_code, kError) << bogus;
  EXPECT_TRUE(contains(bogus, "ATTNKIT_TARGET")) << bogus;
  // A target this CPU cannot run: the error names the feature it lacks.
  for (attnkit::Target t : attnkit::compiled_targets()) {
    const std::string missing = attnkit::missing_cpu_feature(t);
    if (missing.empty()) continue;
    auto [lacking_code, lacking] = run_with_environment("ATTNKIT_TARGET=" + std::string(attnkit::target_name(t)), "info");
    EXPECT_EQ(lacking_code, kError) << lacking;
    EXPECT_TRUE(contains(lacking, "lacks " + missing)) << lacking;
    break;
  }
  // An emulated target can be forced where it runs, and info says how it multiplies bf16.
  const auto compiled = attnkit::compiled_targets();
  if (attnkit::missing_cpu_feature(attnkit::Target::avx512_bf16_emulated).empty() &&
      std::find(compiled.begin(), compiled.end(), attnkit::Target::avx512_bf16_emulated) != compiled.end()) {
    auto [emulated_code, emulated] = run_with_environment("ATTNKIT_TARGET=avx512_bf16_emulated", "info");
    EXPECT_EQ(emulated_code, kOk) << emulated;
    EXPECT_TRUE(contains(emulated, "target in use:     avx512_bf16_emulated")) << emulated;
    EXPECT_TRUE(contains(emulated, "bf16 products:     bf16 dot products")) << emulated;
  }
  if (attnkit::missing_cpu_feature(attnkit::Target::amx_bf16_emulated).empty() &&
      std::find(compiled.begin(), compiled.end(), attnkit::Target::amx_bf16_emulated) != compiled.end()) {
    auto [tiles_code, tiles] = run_with_environment("ATTNKIT_TARGET=amx_bf16_emulated", "info");
    EXPECT_EQ(tiles_code, kOk) << tiles;
    EXPECT_TRUE(contains(tiles, "target in use:     amx_bf16_emulated")) << tiles;
    EXPECT_TRUE(contains(tiles, "bf16 products:     AMX tiles (tdpbf16ps), forward and backward; P (and the backward's dS) "
                                "rounded to bf16 before they multiply; f32 and f16 inputs and quantized caches run on "
                                "avx512_emulated")) << tiles;
  }
  if (attnkit::missing_cpu_feature(attnkit::Target::amx_fp16_emulated).empty() &&
      std::find(compiled.begin(), compiled.end(), attnkit::Target::amx_fp16_emulated) != compiled.end()) {
    auto [tiles_code, tiles] = run_with_environment("ATTNKIT_TARGET=amx_fp16_emulated", "info");
    EXPECT_EQ(tiles_code, kOk) << tiles;
    EXPECT_TRUE(contains(tiles, "target in use:     amx_fp16_emulated")) << tiles;
    EXPECT_TRUE(contains(tiles, "the f16 forward on the tiles too (tdpfp16ps, P rounded to f16); the f16 backward, f32 "
                                "inputs and quantized caches run on avx512_emulated")) << tiles;
  }
}

}  // namespace
