// `attnkit lab <experiment>`: small experiments that show what attention does, with the numbers
// to back the usual claims (lab/). Each prints a table, or JSON Lines with --json, and can draw
// its figure as a PNG with --plot.
#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "attnkit/staged_outputs.hpp"
#include "attnkit_viz/picture_file.hpp"
#include "attnkit_viz/plot.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "lab/precision.hpp"
#include "lab/precision_report.hpp"
#include "lab/scaling.hpp"
#include "lab/scaling_report.hpp"
#include "progress.hpp"

namespace attnkit::cli {

namespace {

constexpr std::string_view kHelp = R"(Usage: attnkit lab <experiment> [flags]

Experiments that test claims about attention with numbers:
  scaling     what the 1/√d_k factor does to the logits, the weights and the gradient, d_k = 2..1024
  precision   each kernel's and dtype's error against the exact output, by length and logit size

Run 'attnkit lab <experiment> --help' for its flags.

Examples:
  attnkit lab scaling
  attnkit lab scaling --plot scaling.png
  attnkit lab precision --json > precision.jsonl

Exit codes: 0 success, 1 a library or file error, 2 bad usage.
)";

constexpr std::string_view kScalingAbout = R"(Usage: attnkit lab scaling [--keys M] [--trials T] [--seed S] [--json] [--plot FILE]

For each d_k, draws queries and keys with N(0, 1) entries and compares softmax attention with the
logits q·k (unscaled) and q·k/√d_k (scaled), on the same draws. Per d_k and scale, averaged over
every row (trials x queries per trial):
  logit variance   pooled variance of all logits: d_k unscaled, 1 scaled, for i.i.d. unit entries
  max weight       mean of max_j p_j: 1/m for uniform weights, 1 for one-hot
  entropy          mean of -Σ p_j log p_j / log m: 1 for uniform weights, 0 for one-hot
  Jacobian norm    mean Frobenius norm of the softmax Jacobian diag(p) - p·pᵀ: how much of a
                   gradient on the weights reaches the logits (sqrt(m-1)/m if uniform, 0 if one-hot,
                   never above 0.5)
Computed in float64 with plain loops (this is about the mathematics, not the kernels). Each d_k has
its own random stream from (seed, d_k): the same seed gives the same numbers.

)";

constexpr std::string_view kScalingFooter = R"(Examples:
  attnkit lab scaling
  attnkit lab scaling --plot docs/lab-scaling.png
  attnkit lab scaling --json --trials 1000 --seed 7 > scaling.jsonl
  attnkit lab scaling --correlation 0.1 --keys 512)";

constexpr std::string_view kPrecisionAbout = R"(Usage: attnkit lab precision [--lengths LIST] [--logit-stds LIST] [--json] [--plot FILE]

Runs one attention problem per sequence length m (n queries over m keys, Q, K, V entries N(0, 1),
Q multiplied by the logit std, so that the logits have that std) through every kernel and dtype
this build has, and reports the relative RMS error ||O - O_exact||_F / ||O_exact||_F, with O_exact
computed in long double:
  reference f64   Kernel::reference on f64 inputs (the float64 oracle)
  fast f32        Kernel::fast on f32 inputs
  naive f32       the plain float32 loops of 'attnkit bench' (scores, max, exp, sum, P·V)
  fast bf16       Kernel::fast on bf16 inputs, bf16 output
  fast f16        Kernel::fast on f16 inputs, f16 output
The inputs are rounded to each dtype, so the 16-bit errors include that rounding, as they do in use.

)";

constexpr std::string_view kPrecisionFooter = R"(Examples:
  attnkit lab precision
  attnkit lab precision --plot docs/lab-precision.png
  attnkit lab precision --lengths 1024,65536 --logit-stds 1,30 --json)";

// What both experiments print: a table, or JSON Lines, and perhaps a plot.
struct Output {
  bool json = false;
  std::optional<std::string> plot_path;
};

void add_output_flags(CommandLine& c, Output& o, const std::string& json_help, const std::string& plot_help) {
  c.flag("--json", o.json, json_help);
  // A picture format it cannot write (.svg) fails here, before the experiment runs.
  const auto writable_picture = [](std::string_view text, std::string_view) {
    viz::picture_format(std::string(text));
    return std::string(text);
  };
  c.value("--plot", o.plot_path, writable_picture, "FILE", plot_help);
}

// Limits that keep sizes in an int and a run in minutes, and catch typos.
constexpr std::int64_t kMaxKeys = 1 << 20;
constexpr std::int64_t kMaxTrials = 10'000'000;
constexpr std::int64_t kMaxDim = 1 << 16;
constexpr std::int64_t kMaxQueries = 1 << 16;
constexpr std::int64_t kMaxLength = 1 << 22;
constexpr double kMaxInputStd = 1e6;   // logits stay far from overflow in float64
constexpr double kMaxLogitStd = 1e4;   // beyond this every row is one-hot in every dtype

void check_range(std::int64_t value, std::string_view flag, std::int64_t lo, std::int64_t hi) {
  if (value < lo || value > hi) {
    throw UsageError(std::string(flag) + ": must be in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got " + std::to_string(value));
  }
}

std::vector<std::int64_t> integers_in(std::string_view text, std::string_view flag, std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> values = parse_integer_list(text, flag);
  for (std::int64_t v : values) check_range(v, flag, lo, hi);
  return values;
}

// The plot's path, checked and staged before the experiment runs (minutes, sometimes): a path that
// cannot be written fails at once.
void stage_plot(const Output& output, StagedOutputs& staged) {
  if (output.plot_path) staged.add(*output.plot_path, "--plot");
}

// The plot replaces its target only once it is completely written.
void write_plot(const std::string& path, const std::string& title, const std::vector<viz::Panel>& panels, int columns,
                StagedOutputs& staged) {
  const viz::Canvas image = viz::plot(title, panels, columns);
  staged.write(path, [&](const std::string& file) { viz::write_picture(image, file, viz::picture_format(path)); });
  staged.commit();
}

// A parser for CommandLine::value: an int in [lo, hi].
auto int_in(std::int64_t lo, std::int64_t hi) {
  return [lo, hi](std::string_view text, std::string_view flag) {
    const std::int64_t value = parse_integer(text, flag);
    check_range(value, flag, lo, hi);
    return static_cast<int>(value);
  };
}

std::vector<int> parse_dims(std::string_view text, std::string_view flag) {
  std::vector<int> dims;
  for (std::int64_t d : integers_in(text, flag, 1, kMaxDim)) dims.push_back(static_cast<int>(d));
  return dims;
}

double parse_input_std(std::string_view text, std::string_view flag) {
  const double value = parse_number(text, flag);
  if (!(value > 0 && value <= kMaxInputStd)) {
    throw UsageError(std::string(flag) + ": must be > 0 and at most 1e6, got " + std::string(text));
  }
  return value;
}

double parse_correlation(std::string_view text, std::string_view flag) {
  const double value = parse_number(text, flag);
  if (!(value >= 0 && value < 1)) throw UsageError(std::string(flag) + ": must be in [0, 1), got " + std::string(text));
  return value;
}

void add_scaling_flags(CommandLine& c, lab::ScalingConfig& config, Output& output) {
  c.value("--keys", config.keys, int_in(2, kMaxKeys), "M", "keys per softmax row (default 128)");
  c.value("--trials", config.trials, int_in(1, kMaxTrials), "T", "draws of Q and K per d_k (default 200: about 3 s on one core)");
  c.value("--queries", config.queries_per_trial, int_in(1, kMaxQueries), "N",
          "query rows per draw, sharing its keys (default 16)");
  c.value("--dims", config.dims, parse_dims, "LIST", "d_k values (default 2,4,8,...,1024)");
  c.value("--seed", config.seed, parse_unsigned, "S", "random seed (default 1)");
  c.value("--input-std", config.input_std, parse_input_std, "S",
          "standard deviation of every entry (default 1): the factor assumes 1");
  c.value("--correlation", config.correlation, parse_correlation, "R",
          "correlation in [0, 1) between the entries of one vector, each entry staying\n"
          "N(0, S²) (default 0): the factor assumes independent entries");
  add_output_flags(c, output, "one JSON object per d_k instead of the table", "also draw the four figures against d_k as a PNG (a PDF for a .pdf name)");
}

int scaling(const CommandArgs& words, std::ostream& out, std::ostream& err) {
  lab::ScalingConfig config;
  Output output;
  CommandLine command_line(kScalingAbout, kScalingFooter);
  add_scaling_flags(command_line, config, output);
  if (!command_line.parse(words, out)) return kExitOk;  // --help
  StagedOutputs staged;
  stage_plot(output, staged);
  std::vector<lab::ScalingRow> rows;
  {
    ProgressBar progress(err, "lab scaling", lab::scaling_work(config));
    rows = lab::run_scaling(config, [&](double units) { progress.advance(units); });
  }
  if (output.json) {
    lab::print_scaling_json(out, config, rows);
  } else {
    lab::print_scaling_table(out, config, rows);
  }
  if (output.plot_path) {
    write_plot(*output.plot_path, lab::scaling_title(config), lab::scaling_panels(config, rows), 2, staged);
    if (!output.json) out << "plot written to " << *output.plot_path << '\n';
  }
  return kExitOk;
}

std::vector<double> parse_logit_stds(std::string_view text, std::string_view flag) {
  std::vector<double> stds = parse_number_list(text, flag);
  for (double s : stds) {
    if (!(s > 0 && s <= kMaxLogitStd)) {
      throw UsageError(std::string(flag) + ": every value must be > 0 and at most 1e4, got " + short_number(s));
    }
  }
  return stds;
}

void add_precision_flags(CommandLine& c, lab::PrecisionConfig& config, Output& output) {
  c.value("--lengths", config.lengths, [](std::string_view text, std::string_view flag) {
    return integers_in(text, flag, 1, kMaxLength);
  }, "LIST", "key counts m (default 16,32,...,8192)");
  c.value("--logit-stds", config.logit_stds, parse_logit_stds, "LIST", "logit standard deviations (default 1,10,100)");
  c.value("--queries", config.queries, int_in(1, kMaxQueries), "N", "query rows n (default 64)");
  c.value("--dim", config.head_dim, int_in(1, kMaxDim), "D", "d_k = d_v (default 64)");
  c.value("--seed", config.seed, parse_unsigned, "S", "random seed (default 1)");
  add_output_flags(c, output, "one JSON object per variant, std and length instead of the table",
                   "also draw error against length (log-log), one panel per logit std, as a PNG\n"
                   "(a PDF for a .pdf name)");
}

int precision(const CommandArgs& words, std::ostream& out, std::ostream& err) {
  lab::PrecisionConfig config;
  Output output;
  CommandLine command_line(kPrecisionAbout, kPrecisionFooter);
  add_precision_flags(command_line, config, output);
  if (!command_line.parse(words, out)) return kExitOk;  // --help
  StagedOutputs staged;
  stage_plot(output, staged);
  lab::PrecisionResult result;
  {
    ProgressBar progress(err, "lab precision", lab::precision_work(config));
    result = lab::run_precision(config, [&](double units) { progress.advance(units); });
  }
  if (output.json) {
    lab::print_precision_json(out, config, result);
  } else {
    lab::print_precision_table(out, config, result);
  }
  if (output.plot_path) {
    const int columns = static_cast<int>(std::min<std::size_t>(config.logit_stds.size(), 3));
    write_plot(*output.plot_path, lab::precision_title(config), lab::precision_panels(config, result), columns, staged);
    if (!output.json) out << "plot written to " << *output.plot_path << '\n';
  }
  return kExitOk;
}

int lab_main(const CommandArgs& words, std::ostream& out, std::ostream& err) {
  if (words.empty()) throw UsageError("which experiment? expected 'scaling' or 'precision'");
  const std::string& experiment = words.front();
  const CommandArgs rest(words.begin() + 1, words.end());
  if (experiment == "--help" || experiment == "-h") {
    out << kHelp;
    return kExitOk;
  }
  if (experiment == "scaling") return scaling(rest, out, err);
  if (experiment == "precision") return precision(rest, out, err);
  throw UsageError("unknown experiment '" + experiment + "' (expected 'scaling' or 'precision')");
}

}  // namespace

int lab_command(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  // Errors name the experiment, so that the hint points at its own --help.
  const bool known = !args.empty() && (args.front() == "scaling" || args.front() == "precision");
  return guarded(known ? "lab " + args.front() : "lab", err, [&] { return lab_main(args, out, err); });
}

}  // namespace attnkit::cli
