// `attnkit heatmap`: draws attention weights as a PNG, one heatmap per head, from a probabilities
// .npy or from Q and K under `attnkit run`'s options; `--demo` draws hand-built heads on a sentence.
#include <cmath>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "attention_flags.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/staged_outputs.hpp"
#include "attnkit_viz/heatmap/figure.hpp"
#include "attnkit_viz/heatmap/html.hpp"
#include "attnkit_viz/picture_file.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "heatmap/demo.hpp"
#include "heatmap/tokens.hpp"
#include "heatmap/weights.hpp"

namespace attnkit::cli {

namespace {

constexpr std::string_view kAbout = R"(Usage: attnkit heatmap --probs P.npy (--out heatmap.png | --html page.html) [options]
       attnkit heatmap --q Q.npy --k K.npy [--v V.npy] (--out heatmap.png | --html page.html) [attention options] [options]
       attnkit heatmap --demo [--out heatmap-demo.png] [--html heatmap-demo.html]

Draws attention weights as a PNG: one heatmap per head in a grid, row = query, column = key, in a
perceptually uniform colour map (dark blue = 0, yellow = the top of the scale) with a colour bar,
the head number over each panel and token labels (or positions) on the axes. A panel with more
than --max-cells queries or keys is downsampled: each cell shows the maximum weight of a block
(max pooling), and the picture says so.

)";

constexpr std::string_view kFooter = R"(Examples:
  attnkit heatmap --demo --out heatmap-demo.png
  attnkit run --q q.npy --k k.npy --v v.npy --out o.npy --probs p.npy --causal top-left
  attnkit heatmap --probs p.npy --tokens tokens.txt --heads 0,1 --out heatmap.png
  attnkit heatmap --demo --html heatmap-demo.html
  attnkit heatmap --q q.npy --k k.npy --causal top-left --tokens tokens.txt --out heatmap.png --vmax 1

Exit codes: 0 success, 1 a library or file error (including a label count that does not match),
2 bad usage.)";

// Flags that describe how to compute the weights from Q and K: meaningless with --probs or --demo.
constexpr const char* kComputeFlags[] = {"--v",     "--scale",   "--causal", "--window", "--mask",   "--key-lengths",
                                         "--alibi", "--softcap", "--dtype",  "--kernel", "--threads"};
constexpr std::string_view kDefaultTitle = "Attention weights";
constexpr std::string_view kDemoOut = "heatmap-demo.png";

struct Picture {
  std::optional<std::string> out_path, html_path;  // the PNG, the interactive page: one or both
  std::optional<std::string> title;
  Selection selection;
  std::optional<std::string> tokens_path, query_tokens_path;
  std::optional<double> vmax;
  std::int64_t max_cells = kDefaultMaxCells;
};

// Everything the flags say.
struct Request {
  std::optional<std::string> q_path, k_path, v_path, probs_path;
  bool demo = false;
  AttentionFlags flags;  // with --q/--k
  Picture picture;
};

std::int64_t parse_non_negative(std::string_view text, std::string_view flag) {
  const std::int64_t value = parse_integer(text, flag);
  if (value < 0) throw UsageError(std::string(flag) + ": " + std::string(text) + " is negative");
  return value;
}

std::vector<std::int64_t> parse_heads(std::string_view text, std::string_view flag) {
  std::vector<std::int64_t> heads = parse_integer_list(text, flag);
  for (std::int64_t h : heads) {
    if (h < 0) throw UsageError(std::string(flag) + ": " + std::to_string(h) + " is negative; heads are numbered from 0");
  }
  return heads;
}

double parse_vmax(std::string_view text, std::string_view flag) {
  const double vmax = parse_number(text, flag);
  if (!(vmax > 0.0) || !std::isfinite(vmax)) {
    throw UsageError(std::string(flag) + ": " + std::string(text) + " is not a positive number (the weight drawn yellow)");
  }
  return vmax;
}

std::int64_t parse_max_cells(std::string_view text, std::string_view flag) {
  const std::int64_t cells = parse_integer(text, flag);
  if (cells < 1) throw UsageError(std::string(flag) + ": " + std::string(text) + " must be at least 1");
  return cells;
}

void add_flags(CommandLine& c, Request& r) {
  c.section("Input (one of)");
  c.text("--probs", r.probs_path, "PATH",
         "softmax weights as `attnkit run --probs` writes them: [B, H, n, m], [H, n, m]\nor [n, m]");
  c.text("--q", r.q_path, "PATH", "queries, as for `attnkit run`; with --k the weights are computed with\nattnkit::forward");
  c.text("--k", r.k_path, "PATH", "keys, as for `attnkit run`");
  c.text("--v", r.v_path, "PATH", "accepted and unused (the weights do not need V)");
  c.flag("--demo", r.demo,
         "a built-in sentence with six hand-built heads (previous token, same word,\n"
         "first token, broad, recent, nouns); prints what each head shows");
  c.section("Attention options (with --q/--k, as for `attnkit run`)");
  add_attention_flags(c, r.flags, false);
  Picture& p = r.picture;
  c.section("Picture");
  c.text("--out", p.out_path, "PATH",
         "the PNG to write, or a PDF (vector) for a name ending in .pdf\n"
         "(default heatmap-demo.png with --demo)");
  c.text("--html", p.html_path, "PATH",
         "also (or instead) write a self-contained interactive page: a head selector,\n"
         "the exact weight and both tokens under the pointer, and a \"lines\" view\n"
         "linking each query to the keys it attends to (width ∝ weight); no pooling,\n"
         "at most 4,000,000 weights in all (pick heads with --heads)");
  c.value("--batch", p.selection.batch, parse_non_negative, "B", "which batch entry to draw (default 0)");
  c.value("--heads", p.selection.heads, parse_heads, "LIST", "which heads, e.g. 0,3,5 (default all)");
  c.text("--tokens", p.tokens_path, "PATH",
         "labels, one per line: for the keys, and for the queries too unless\n"
         "--query-tokens is given (self-attention: n = m)");
  c.text("--query-tokens", p.query_tokens_path, "PATH", "labels for the queries (cross-attention: n labels, --tokens has m)");
  c.text("--title", p.title, "TEXT", "the title (default \"Attention weights\")");
  c.value("--vmax", p.vmax, parse_vmax, "V", "top of the colour scale (default: the largest weight drawn; 1 for 0..1)");
  c.value("--max-cells", p.max_cells, parse_max_cells, "N", "cells per axis per panel before max pooling (default 200)");
}

void reject(const CommandLine& c, const char* flag, std::string_view because) {
  if (c.given(flag)) throw UsageError(std::string(flag) + " " + std::string(because));
}

// Labels from --tokens / --query-tokens, checked against n and m.
void attach_tokens(const Picture& p, HeatmapFigure& figure) {
  const HeadWeights& w = figure.weights;
  if (p.tokens_path) {
    figure.key_tokens = read_tokens(*p.tokens_path, "--tokens");
    check_token_count(figure.key_tokens, w.m, "--tokens", *p.tokens_path, "keys number m");
  }
  if (p.query_tokens_path) {
    figure.query_tokens = read_tokens(*p.query_tokens_path, "--query-tokens");
    check_token_count(figure.query_tokens, w.n, "--query-tokens", *p.query_tokens_path, "queries number n");
  } else if (p.tokens_path) {
    check_token_count(figure.key_tokens, w.n, "--tokens", *p.tokens_path, "queries number n",
                      "for cross-attention (n != m) give the query labels with --query-tokens");
    figure.query_tokens = figure.key_tokens;
  }
}

// The page and the picture, checked and staged before the weights are read or computed: a path
// that cannot be written, or --out and --html naming one file, fails with nothing done.
void stage_pictures(const Picture& p, StagedOutputs& staged) {
  if (p.out_path) viz::picture_format(*p.out_path);  // a format it cannot write (.svg) fails first
  if (p.html_path) staged.add(*p.html_path, "--html");
  if (p.out_path) staged.add(*p.out_path, "--out");
}

void draw(HeatmapFigure& figure, const Picture& p, std::ostream& out, StagedOutputs& staged) {
  figure.title = p.title.value_or(std::string(kDefaultTitle));
  figure.vmax = p.vmax;
  figure.max_cells = p.max_cells;
  // Both files, or neither: the page and the PNG replace their targets only once both are written.
  if (p.html_path) {
    // The page shows every weight (no pooling): write_heatmap_html refuses sizes a browser would not
    // handle well, naming --heads.
    HeatmapPage page;
    page.title = figure.title;
    page.query_tokens = figure.query_tokens;
    page.key_tokens = figure.key_tokens;
    page.weights = figure.weights;
    page.head_names = figure.head_names;
    staged.write(*p.html_path, [&](const std::string& file) { write_heatmap_html(page, file); });
  }
  std::optional<viz::Canvas> image;
  if (p.out_path) {
    image = render_figure(figure);
    staged.write(*p.out_path, [&](const std::string& file) { viz::write_picture(*image, file, viz::picture_format(*p.out_path)); });
  }
  staged.commit();
  if (p.html_path) {
    out << "attnkit heatmap: wrote " << *p.html_path << " (a self-contained page: " << figure.weights.heads.size()
        << " heads of " << figure.weights.n << " queries x " << figure.weights.m << " keys)\n";
  }
  if (!p.out_path) return;
  const FigureLayout layout = layout_figure(figure);
  out << "attnkit heatmap: wrote " << *p.out_path << " (" << image->width() << " x " << image->height() << " pixels, "
      << figure.weights.heads.size() << " heads of " << figure.weights.n << " queries x " << figure.weights.m
      << " keys";
  if (layout.block_rows > 1 || layout.block_cols > 1) {
    out << "; downsampled to " << layout.rows << " x " << layout.cols << " cells, each the maximum over "
        << layout.block_rows << " x " << layout.block_cols << " weights";
  }
  out << ")\n";
}

int run_demo(const CommandLine& c, Picture p, std::ostream& out) {
  for (const char* flag : {"--q", "--k", "--probs", "--tokens", "--query-tokens", "--batch", "--heads"}) {
    reject(c, flag, "does not go with --demo: the demo has its own sentence and heads");
  }
  for (const char* flag : kComputeFlags) reject(c, flag, "does not go with --demo");
  if (!p.out_path && !p.html_path) p.out_path = std::string(kDemoOut);
  StagedOutputs staged;
  stage_pictures(p, staged);
  const Demo demo = make_demo();
  HeatmapFigure figure;
  figure.source = "demo: hand-built heads, causal";
  figure.weights = demo.weights;
  figure.query_tokens = demo.tokens;
  figure.key_tokens = demo.tokens;
  for (const DemoHead& head : demo.heads) figure.head_names.push_back(head.name);
  out << "The demo sentence: ";
  for (const std::string& t : demo.tokens) out << t << ' ';
  out << "\nIts heads (queries and keys built by hand from token and position features; causal):\n";
  for (std::size_t h = 0; h < demo.heads.size(); ++h) {
    out << "  head " << h << "  " << demo.heads[h].name << ": " << demo.heads[h].description << '\n';
  }
  draw(figure, p, out, staged);
  return kExitOk;
}

int run(const CommandArgs& words, std::ostream& out) {
  Request r;
  CommandLine command_line(kAbout, kFooter);
  add_flags(command_line, r);
  if (!command_line.parse(words, out)) return kExitOk;  // --help
  if (r.demo) return run_demo(command_line, r.picture, out);

  const bool from_probs = r.probs_path.has_value(), from_qk = r.q_path || r.k_path;
  if (from_probs && from_qk) throw UsageError("give either --probs or --q and --k, not both");
  if (!from_probs && !from_qk) throw UsageError("missing input: --probs PATH, or --q PATH --k PATH (or --demo)");
  if (from_qk && !(r.q_path && r.k_path)) {
    throw UsageError(std::string("missing required flag ") + (r.q_path ? "--k" : "--q") +
                     ": the weights need both queries and keys");
  }
  if (from_probs) {
    for (const char* flag : kComputeFlags) reject(command_line, flag, "applies to --q/--k input, not to --probs");
  }
  const Picture& p = r.picture;
  if (!p.out_path && !p.html_path) throw UsageError("missing --out (the PNG to write) or --html (the page to write)");
  StagedOutputs staged;
  stage_pictures(p, staged);  // before the weights are read

  HeatmapFigure figure;
  if (from_probs) {
    figure.weights = load_probs(*r.probs_path, p.selection);
    figure.source = *r.probs_path + ", batch " + std::to_string(p.selection.batch);
  } else {
    if (r.flags.threads) set_num_threads(*r.flags.threads);
    figure.weights = compute_probs(*r.q_path, *r.k_path, r.v_path, r.flags, p.selection);
    figure.source = *r.q_path + " \xC2\xB7 " + *r.k_path + ", batch " + std::to_string(p.selection.batch);
  }
  attach_tokens(p, figure);
  draw(figure, p, out, staged);
  return kExitOk;
}

}  // namespace

int heatmap_command(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  return guarded("heatmap", err, [&] { return run(args, out); });
}

}  // namespace attnkit::cli
