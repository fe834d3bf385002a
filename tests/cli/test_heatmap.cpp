// `attnkit heatmap`: the PNG it writes (size, and the colour at the centre of every cell equal to
// colormap(weight / scale) at the place layout_figure says, for small hand-made weights), max
// pooling, token labels, errors and exit codes, and the demo's heads doing what they claim.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit_viz/colormap.hpp"
#include "attnkit_viz/heatmap/figure.hpp"
#include "attnkit_viz/picture_file.hpp"
#include "cli/cli_runner.hpp"
#include "heatmap/demo.hpp"

namespace {

namespace fs = std::filesystem;
using attnkit::DType;
using attnkit::Tensor;
using attnkit::cli::HeadWeights;
using attnkit::viz::Canvas;

constexpr int kOk = 0, kError = 1, kUsage = 2;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Heatmap : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnkit_test_heatmap_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // [B, H, n, m] float32 weights with distinct values (a cell shifted by one shows a different colour).
  std::string write_probs(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t m) {
    Tensor t(DType::f32, {b, h, n, m});
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((i * 37) % 101) / 100.0f;
    attnkit::write_npy(path("p.npy"), t);
    probs_ = t;
    return path("p.npy");
  }

  void write_lines(const std::string& name, const std::vector<std::string>& lines) {
    std::ofstream f(path(name));
    for (const auto& l : lines) f << l << '\n';
  }

  // The weights of head h of batch b of the last write_probs, as the figure takes them.
  HeadWeights weights_of(std::int64_t b, const std::vector<std::int64_t>& heads) const {
    const auto& s = probs_.shape();
    HeadWeights w;
    w.n = s[2];
    w.m = s[3];
    w.heads = heads;
    for (std::int64_t h : heads) {
      const float* p = probs_.data<float>() + ((b * s[1] + h) * s[2]) * s[3];
      w.weights.emplace_back(p, p + w.n * w.m);
    }
    return w;
  }

  fs::path dir_;
  Tensor probs_;
};

attnkit::testing::CliResult cli(const std::vector<std::string>& args) { return attnkit::testing::run_cli(args); }

// Every cell's centre pixel must be colormap(value / vmax), where value is the cell's weight (or
// the maximum of its block) and vmax the scale the layout used.
void expect_cells(const Canvas& image, const attnkit::cli::FigureLayout& layout, const HeadWeights& w) {
  ASSERT_EQ(layout.panels.size(), w.heads.size());
  for (std::size_t p = 0; p < w.heads.size(); ++p) {
    const auto& r = layout.panels[p];
    for (std::int64_t ci = 0; ci < layout.rows; ++ci) {
      for (std::int64_t cj = 0; cj < layout.cols; ++cj) {
        float top = 0.0f;
        for (std::int64_t i = ci * layout.block_rows; i < std::min(w.n, (ci + 1) * layout.block_rows); ++i) {
          for (std::int64_t j = cj * layout.block_cols; j < std::min(w.m, (cj + 1) * layout.block_cols); ++j) {
            top = std::max(top, w.weights[p][static_cast<std::size_t>(i * w.m + j)]);
          }
        }
        const int x = r.x + static_cast<int>(cj) * layout.cell_w + layout.cell_w / 2;
        const int y = r.y + static_cast<int>(ci) * layout.cell_h + layout.cell_h / 2;
        const auto want = attnkit::viz::colormap(top / layout.vmax);
        const auto got = image.at(x, y);
        ASSERT_EQ(got, want) << "panel " << p << " cell (" << ci << ", " << cj << ") at pixel (" << x << ", " << y
                             << "): weight " << top << ", got rgb " << int(got.r) << "," << int(got.g) << ","
                             << int(got.b);
      }
    }
  }
}

// A picture captioned "from 0 to 1" of numbers that are not weights would mislead: refused, naming
// the element and its value, and nothing is written.
TEST_F(Heatmap, WeightsOutsideZeroToOneAreRefusedNamingTheElement) {
  for (float bad : {-1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    Tensor t(DType::f32, {1, 2, 3, 4});
    std::fill_n(t.data<float>(), t.numel(), 0.25f);
    t.data<float>()[1 * 12 + 2 * 4 + 3] = bad;  // [0, 1, 2, 3]
    attnkit::write_npy(path("bad.npy"), t);
    const auto r = cli({"heatmap", "--probs", path("bad.npy"), "--out", path("bad.png")});
    EXPECT_EQ(r.code, kError);
    EXPECT_TRUE(contains(r.err, "weight [0, 1, 2, 3] is ")) << r.err;
    EXPECT_TRUE(contains(r.err, "lie in [0, 1]")) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("bad.png")));
  }
}

TEST_F(Heatmap, CellsHaveTheColourOfTheirWeight) {
  const std::string probs = write_probs(2, 3, 3, 4);
  const auto r = cli({"heatmap", "--probs", probs, "--batch", "1", "--out", path("h.png"), "--title", "T"});
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_TRUE(contains(r.out, path("h.png"))) << r.out;
  const Canvas image = attnkit::viz::read_png(path("h.png"));

  attnkit::cli::HeatmapFigure figure;
  figure.weights = weights_of(1, {0, 1, 2});
  const auto layout = attnkit::cli::layout_figure(figure);
  ASSERT_EQ(image.width(), layout.width);
  ASSERT_EQ(image.height(), layout.height);
  EXPECT_GE(layout.cell_w, 3);  // small problems get big cells
  EXPECT_GE(layout.cell_h, 3);
  EXPECT_EQ(layout.columns, 2);
  const auto& shown = figure.weights.weights;
  float top = 0.0f;
  for (const auto& m : shown) top = std::max(top, *std::max_element(m.begin(), m.end()));
  EXPECT_DOUBLE_EQ(layout.vmax, top) << "the default scale is the largest weight drawn";
  expect_cells(image, layout, figure.weights);
}

TEST_F(Heatmap, VmaxAndHeadSubsetAndTokens) {
  const std::string probs = write_probs(1, 4, 5, 5);
  write_lines("tokens.txt", {"the", "cat", "sat", "on", "a_rather_long_token_that_gets_shortened"});
  const auto r = cli({"heatmap", "--probs", probs, "--heads", "3,1", "--vmax", "2", "--tokens", path("tokens.txt"),
                      "--out", path("h.png")});
  ASSERT_EQ(r.code, kOk) << r.err;
  const Canvas image = attnkit::viz::read_png(path("h.png"));
  attnkit::cli::HeatmapFigure figure;
  figure.weights = weights_of(0, {3, 1});
  figure.vmax = 2.0;
  figure.query_tokens = figure.key_tokens = {"the", "cat", "sat", "on", "a_rather_long_token_that_gets_shortened"};
  const auto layout = attnkit::cli::layout_figure(figure);
  ASSERT_EQ(image.width(), layout.width);
  ASSERT_EQ(image.height(), layout.height);
  EXPECT_DOUBLE_EQ(layout.vmax, 2.0);
  expect_cells(image, layout, figure.weights);
}

// The head viewer's layout: a fixed number of columns, titles and captions over each panel, a
// smaller panel side, and token labels on the grid's outer panels only (so panels sit closer).
TEST_F(Heatmap, SmallMultiplesGrid) {
  write_probs(1, 7, 5, 5);
  attnkit::cli::HeatmapFigure figure;
  figure.weights = weights_of(0, {0, 1, 2, 3, 4, 5, 6});
  figure.query_tokens = figure.key_tokens = {"the", "cat", "sat", "on", "it"};
  figure.columns = 3;
  figure.panel_side = 150;
  for (int p = 0; p < 7; ++p) {
    figure.panel_titles.push_back("layer " + std::to_string(p / 3) + " head " + std::to_string(p % 3));
    figure.captions.push_back({"prev 0.50 self 0.25", "entropy 1.20 bits"});
  }
  attnkit::cli::HeatmapFigure labelled = figure;
  labelled.outer_labels_only = false;
  figure.outer_labels_only = true;
  attnkit::cli::HeatmapFigure uncaptioned = figure;
  uncaptioned.captions.clear();

  const auto layout = attnkit::cli::layout_figure(figure);
  EXPECT_EQ(layout.columns, 3);
  EXPECT_EQ(layout.cell_w, 30);  // 150 pixels for 5 tokens
  ASSERT_EQ(layout.panels.size(), 7u);
  EXPECT_EQ(layout.panels[1].y, layout.panels[0].y);
  EXPECT_GT(layout.panels[3].y, layout.panels[0].y);
  EXPECT_EQ(layout.panels[3].x, layout.panels[0].x);
  EXPECT_EQ(layout.panels[6].y - layout.panels[3].y, layout.panels[3].y - layout.panels[0].y);
  // Outer labels: neighbours 28 pixels apart; with labels on every panel, the labels' width apart too.
  EXPECT_EQ(layout.panels[1].x - layout.panels[0].x, layout.panels[0].w + 28);
  const auto everywhere = attnkit::cli::layout_figure(labelled);
  EXPECT_GT(everywhere.panels[1].x - everywhere.panels[0].x, layout.panels[1].x - layout.panels[0].x);
  EXPECT_GT(everywhere.panels[3].y - everywhere.panels[0].y, layout.panels[3].y - layout.panels[0].y);
  // Two caption lines push every heatmap down by the same amount.
  const auto bare = attnkit::cli::layout_figure(uncaptioned);
  EXPECT_GT(layout.panels[0].y, bare.panels[0].y);
  EXPECT_EQ(layout.panels[3].y - bare.panels[3].y, 2 * (layout.panels[0].y - bare.panels[0].y));

  const Canvas image = attnkit::cli::render_figure(figure);
  ASSERT_EQ(image.width(), layout.width);
  ASSERT_EQ(image.height(), layout.height);
  expect_cells(image, layout, figure.weights);
  // Between two inner panels there is no label: the gap is background only.
  const auto& left = layout.panels[4];
  for (int x = left.x + left.w + 3; x < layout.panels[5].x - 3; ++x) {
    for (int y = left.y; y < left.y + left.h; ++y) ASSERT_EQ(image.at(x, y), (attnkit::viz::Rgb{255, 255, 255}));
  }
  // The captions are drawn: the band above panel 4 holds grey text pixels.
  int ink = 0;
  for (int x = left.x; x < left.x + left.w; ++x) {
    for (int y = left.y - 20; y < left.y - 6; ++y) ink += image.at(x, y) != attnkit::viz::Rgb{255, 255, 255};
  }
  EXPECT_GT(ink, 10);
}

TEST_F(Heatmap, LargeMatricesAreMaxPooled) {
  const std::string probs = write_probs(1, 1, 10, 7);
  const auto r = cli({"heatmap", "--probs", probs, "--max-cells", "4", "--out", path("h.png")});
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_TRUE(contains(r.out, "downsampled to 4 x 4 cells, each the maximum over 3 x 2 weights")) << r.out;
  attnkit::cli::HeatmapFigure figure;
  figure.weights = weights_of(0, {0});
  figure.max_cells = 4;
  const auto layout = attnkit::cli::layout_figure(figure);
  EXPECT_EQ(layout.block_rows, 3);
  EXPECT_EQ(layout.block_cols, 2);
  EXPECT_EQ(layout.rows, 4);
  EXPECT_EQ(layout.cols, 4);
  const Canvas image = attnkit::viz::read_png(path("h.png"));
  ASSERT_EQ(image.width(), layout.width);
  expect_cells(image, layout, figure.weights);
}

TEST_F(Heatmap, FromQueriesAndKeysMatchesRunProbs) {
  Tensor q(DType::f32, {2, 3, 4}), k(DType::f32, {2, 5, 4}), v(DType::f32, {2, 5, 3});
  for (Tensor* t : {&q, &k, &v}) {
    float* p = t->data<float>();
    for (std::int64_t i = 0; i < t->numel(); ++i) p[i] = static_cast<float>((i * 29) % 17) / 8.0f - 1.0f;
  }
  attnkit::write_npy(path("q.npy"), q);
  attnkit::write_npy(path("k.npy"), k);
  attnkit::write_npy(path("v.npy"), v);
  const std::vector<std::string> options = {"--causal", "bottom-right", "--softcap", "3"};
  std::vector<std::string> run = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                  "--out", path("o.npy"), "--probs", path("p.npy")};
  run.insert(run.end(), options.begin(), options.end());
  ASSERT_EQ(cli(run).code, kOk);
  std::vector<std::string> heat = {"heatmap", "--q", path("q.npy"), "--k", path("k.npy"), "--out", path("h.png")};
  heat.insert(heat.end(), options.begin(), options.end());
  const auto r = cli(heat);
  ASSERT_EQ(r.code, kOk) << r.err;

  probs_ = attnkit::read_npy(path("p.npy"));  // [H, n, m] from run
  probs_ = Tensor::converted(probs_.view4(), DType::f32);
  attnkit::cli::HeatmapFigure figure;
  figure.weights = weights_of(0, {0, 1});
  const auto layout = attnkit::cli::layout_figure(figure);
  const Canvas image = attnkit::viz::read_png(path("h.png"));
  ASSERT_EQ(image.height(), layout.height);
  expect_cells(image, layout, figure.weights);
}

TEST_F(Heatmap, TokenCountsMustMatch) {
  const std::string probs = write_probs(1, 1, 3, 4);
  write_lines("three.txt", {"a", "b", "c"});
  write_lines("four.txt", {"w", "x", "y", "z"});
  auto r = cli({"heatmap", "--probs", probs, "--tokens", path("three.txt"), "--out", path("h.png")});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "--tokens " + path("three.txt") + " has 3 labels")) << r.err;
  EXPECT_TRUE(contains(r.err, "m = 4")) << r.err;
  EXPECT_FALSE(fs::exists(path("h.png")));

  r = cli({"heatmap", "--probs", probs, "--tokens", path("four.txt"), "--out", path("h.png")});  // n = 3 queries
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "n = 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "--query-tokens")) << "the hint for cross-attention: " << r.err;

  r = cli({"heatmap", "--probs", probs, "--tokens", path("four.txt"), "--query-tokens", path("three.txt"), "--out",
           path("h.png")});
  EXPECT_EQ(r.code, kOk) << r.err;
}

// Token files, like the arrays, must be regular files: a FIFO is refused before it is opened (opening
// it would wait for a writer), a directory before it is read.
TEST_F(Heatmap, TokenFilesMustBeRegularFiles) {
  const std::string probs = write_probs(1, 1, 3, 4);
  const std::string fifo = path("tokens.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& tokens : {fifo, path("")}) {
    const auto r = cli({"heatmap", "--probs", probs, "--tokens", tokens, "--out", path("h.png")});
    EXPECT_EQ(r.code, kError) << tokens;
    EXPECT_TRUE(contains(r.err, "--tokens: cannot read " + tokens + ": not a regular file")) << r.err;
    EXPECT_FALSE(fs::exists(path("h.png")));
  }
}

// The page and the PNG, or neither: a PNG that cannot be written leaves no page behind.
TEST_F(Heatmap, BothFilesOrNeither) {
  const std::string probs = write_probs(1, 1, 3, 4);
  const auto r = cli({"heatmap", "--probs", probs, "--html", path("page.html"), "--out", path("missing/h.png")});
  EXPECT_EQ(r.code, kError) << r.err;
  EXPECT_TRUE(contains(r.err, path("missing/h.png"))) << r.err;
  EXPECT_FALSE(fs::exists(path("page.html")));
  for (const auto& entry : fs::directory_iterator(path(""))) {
    EXPECT_EQ(entry.path().string().find(".partial-"), std::string::npos) << entry.path();
  }
}

TEST_F(Heatmap, BadInputsGiveClearErrors) {
  const std::string probs = write_probs(1, 2, 3, 3);
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string says;
  };
  const std::string out = path("h.png");
  const std::vector<Case> cases = {
      {{"--probs", path("missing.npy"), "--out", out}, kError, path("missing.npy")},
      {{"--probs", probs}, kUsage, "--out"},
      {{"--probs", probs, "--out", out, "--causal", "top-left"}, kUsage, "--causal applies to --q/--k"},
      {{"--probs", probs, "--q", probs, "--k", probs, "--out", out}, kUsage, "not both"},
      {{"--q", probs, "--out", out}, kUsage, "--k"},
      {{"--out", out}, kUsage, "--probs"},
      {{"--probs", probs, "--out", out, "--batch", "1"}, kError, "--batch 1"},
      {{"--probs", probs, "--out", out, "--heads", "0,2"}, kError, "--heads: head 2"},
      {{"--probs", probs, "--out", out, "--heads", "-1"}, kUsage, "--heads"},
      {{"--probs", probs, "--out", out, "--vmax", "0"}, kUsage, "--vmax"},
      {{"--probs", probs, "--out", out, "--tokens", path("none.txt")}, kError, "--tokens: cannot open"},
      {{"--probs", probs, "--out", path("no_dir/h.png")}, kError, path("no_dir/h.png")},
      {{"--demo", "--probs", probs}, kUsage, "--probs does not go with --demo"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"heatmap"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = cli(args);
    EXPECT_EQ(r.code, c.code) << c.args[0] << " ... " << r.err;
    EXPECT_TRUE(contains(r.err, c.says)) << "expected '" << c.says << "' in: " << r.err;
  }
  Tensor rank1(DType::f32, {4});
  attnkit::write_npy(path("r1.npy"), rank1);
  const auto r = cli({"heatmap", "--probs", path("r1.npy"), "--out", out});
  EXPECT_EQ(r.code, kError);
  EXPECT_TRUE(contains(r.err, "[4]") && contains(r.err, "[B, H, n, m]")) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Heatmap, ProcessExitCodes) {
  write_probs(1, 1, 2, 2);
  write_lines("one.txt", {"a"});
  for (const auto& [args, code] : std::vector<std::pair<std::string, int>>{
           {"heatmap --probs " + path("p.npy") + " --tokens " + path("one.txt") + " --out " + path("h.png"), kError},
           {"heatmap --probs " + path("p.npy"), kUsage},
           {"heatmap --probs " + path("p.npy") + " --out " + path("h.png"), kOk}}) {
    const std::string command = std::string(ATTNKIT_CLI_BINARY) + " " + args + " >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), code) << args;
  }
}

TEST(HeatmapHelp, ListedAndWithAnExample) {
  const auto top = cli({"--help"});
  EXPECT_TRUE(contains(top.out, "heatmap")) << top.out;
  const auto r = cli({"heatmap", "--help"});
  EXPECT_EQ(r.code, kOk);
  EXPECT_TRUE(contains(r.out, "attnkit heatmap --demo")) << r.out;
  EXPECT_TRUE(contains(r.out, "max pooling")) << r.out;
}

// ---- the demo ----

std::int64_t argmax_row(const HeadWeights& w, std::size_t head, std::int64_t i) {
  const float* row = w.weights[head].data() + i * w.m;
  return std::max_element(row, row + w.m) - row;
}

TEST(HeatmapDemo, HeadsShowWhatTheyClaim) {
  const attnkit::cli::Demo demo = attnkit::cli::make_demo();
  const HeadWeights& w = demo.weights;
  const auto& tok = demo.tokens;
  ASSERT_EQ(w.heads.size(), static_cast<std::size_t>(attnkit::cli::kDemoHeads));
  ASSERT_EQ(static_cast<std::int64_t>(tok.size()), w.n);
  auto weight = [&](int head, std::int64_t i, std::int64_t j) {
    return w.weights[static_cast<std::size_t>(head)][static_cast<std::size_t>(i * w.m + j)];
  };
  bool saw_repeat = false;
  for (std::int64_t i = 0; i < w.n; ++i) {
    for (std::int64_t j = i + 1; j < w.m; ++j) {
      for (int h = 0; h < attnkit::cli::kDemoHeads; ++h) ASSERT_EQ(weight(h, i, j), 0.0f) << "causal: head " << h;
    }
    if (i >= 1) {
      EXPECT_EQ(argmax_row(w, attnkit::cli::kDemoPrevious, i), i - 1) << "previous token, query " << i;
    }
    EXPECT_GT(weight(attnkit::cli::kDemoPrevious, i, std::max<std::int64_t>(i - 1, 0)), 0.9f);

    const std::int64_t same = argmax_row(w, attnkit::cli::kDemoSameWord, i);
    const bool earlier_copy = std::find(tok.begin(), tok.begin() + i, tok[static_cast<std::size_t>(i)]) != tok.begin() + i;
    saw_repeat = saw_repeat || earlier_copy;
    if (earlier_copy) {
      EXPECT_LT(same, i) << "same word, query " << i;
      EXPECT_EQ(tok[static_cast<std::size_t>(same)], tok[static_cast<std::size_t>(i)]) << "query " << i;
    } else {
      EXPECT_EQ(same, i) << "same word without an earlier copy attends to itself, query " << i;
    }

    EXPECT_EQ(argmax_row(w, attnkit::cli::kDemoFirst, i), 0);
    EXPECT_GT(weight(attnkit::cli::kDemoFirst, i, 0), 0.9f);

    for (std::int64_t j = 0; j <= i; ++j) {
      EXPECT_NEAR(weight(attnkit::cli::kDemoBroad, i, j), 1.0 / static_cast<double>(i + 1), 1e-6) << i << "," << j;
    }

    EXPECT_EQ(argmax_row(w, attnkit::cli::kDemoRecent, i), i);
    for (std::int64_t j = 1; j <= i; ++j) {
      EXPECT_LT(weight(attnkit::cli::kDemoRecent, i, j - 1), weight(attnkit::cli::kDemoRecent, i, j));
    }

    const auto is_noun = [&](std::int64_t j) {
      const auto& t = tok[static_cast<std::size_t>(j)];
      return t == "cat" || t == "mat" || t == "dog";
    };
    bool noun_visible = false;
    for (std::int64_t j = 0; j <= i; ++j) noun_visible = noun_visible || is_noun(j);
    if (noun_visible) {
      EXPECT_TRUE(is_noun(argmax_row(w, attnkit::cli::kDemoNouns, i))) << "nouns, query " << i;
    }
  }
  EXPECT_TRUE(saw_repeat) << "the sentence must repeat words for the same-word head to show anything";
}

TEST(HeatmapDemo, CommandWritesThePictureAndDescribesTheHeads) {
  const fs::path out = fs::temp_directory_path() / ("attnkit_test_demo_" + std::to_string(::getpid()) + ".png");
  const auto r = cli({"heatmap", "--demo", "--out", out.string()});
  ASSERT_EQ(r.code, kOk) << r.err;
  for (const auto& head : attnkit::cli::make_demo().heads) EXPECT_TRUE(contains(r.out, head.name)) << r.out;
  const Canvas image = attnkit::viz::read_png(out.string());
  EXPECT_GT(image.width(), 600);
  EXPECT_GT(image.height(), 400);
  fs::remove(out);
}

// --out x.pdf gives a vector file of the PNG's size (the file is staged under a temporary name, so
// the format must come from the name asked for); --out x.svg is refused, naming the file, and
// nothing is written.
TEST(HeatmapDemo, PdfByExtension) {
  const fs::path base = fs::temp_directory_path() / ("attnkit_test_demo_" + std::to_string(::getpid()));
  const auto png = cli({"heatmap", "--demo", "--out", base.string() + ".png"});
  ASSERT_EQ(png.code, kOk) << png.err;
  const Canvas image = attnkit::viz::read_png(base.string() + ".png");
  const std::string size = std::to_string(image.width()) + " x " + std::to_string(image.height()) + " pixels";
  const std::string pdf = base.string() + ".PDF";
  const auto r = cli({"heatmap", "--demo", "--out", pdf});
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_TRUE(contains(r.out, size)) << r.out;
  std::ifstream in(pdf, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(text.substr(0, 5), "%PDF-");
  EXPECT_NE(text.find("/MediaBox [ 0 0 " + std::to_string(image.width()) + " " + std::to_string(image.height())),
            std::string::npos);
  const std::string svg = base.string() + ".svg";
  const auto refused = cli({"heatmap", "--demo", "--out", svg});
  EXPECT_EQ(refused.code, 1);
  EXPECT_TRUE(contains(refused.err, svg)) << refused.err;
  EXPECT_FALSE(fs::exists(svg));
  fs::remove(pdf);
  fs::remove(base.string() + ".png");
}

}  // namespace
