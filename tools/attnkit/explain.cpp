// `attnkit explain`: attention for one query, step by step, with every number computed by the library.
//
// Only the raw affinities q·k_j are computed here (they are the input to the story); the weights and
// the output come from attnkit::forward (float64, reference kernel), so what is printed is what the
// library computes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/npy.hpp"
#include "attnkit/tensor.hpp"
#include "command_line.hpp"
#include "commands.hpp"

namespace attnkit::cli {

namespace {

constexpr int kDecimals = 4;  // enough to see differences in small examples without clutter
constexpr std::string_view kNpySuffix = ".npy";

constexpr std::string_view kAbout = R"(Usage: attnkit explain [--q Q] [--k K] [--v V] [--no-scale]

Walks through scaled dot-product attention for one query, o = softmax(q·Kᵀ · scale) · V, printing
each step with the numbers the library computes (float64, reference kernel):
  1. raw affinities s_j = q·k_j
  2. scaled affinities z_j = s_j · scale, scale = 1/√d_k
  3. softmax weights w_j
  4. the output o = Σ_j w_j · v_j

)";

constexpr std::string_view kFooter = R"(A flag that is not given takes the built-in example: q = [0.5, 0.3, -0.2];
keys [0.4, 0.2, -0.1], [0.1, 0.1, 0.8], [-0.3, 0.4, 0.2]; values [0.9, 0.1, 0.3],
[0.2, 0.5, 0.1], [0.3, 0.2, 0.4]; d_k = 3.

Examples:
  attnkit explain
  attnkit explain --no-scale
  attnkit explain --q 1,0 --k "1,0;0,1;1,1" --v "1,2;3,4;5,6"
  attnkit explain --q q.npy --k k.npy --v v.npy

Exit codes: 0 success, 1 a library or file error, 2 bad usage (including sizes that do not fit).)";

using Vector = std::vector<double>;
using Matrix = std::vector<Vector>;  // rows

// One query against m key/value pairs, and where each part came from (for error messages).
struct Example {
  Vector q;  // [d_k]
  Matrix k;  // [m][d_k]
  Matrix v;  // [m][d_v]
  std::string q_source, k_source, v_source;
};

// What the library computed for the example.
struct Story {
  Vector raw;      // [m] q·k_j
  double scale;    // the factor passed to the library
  Vector scaled;   // [m] raw · scale
  Vector weights;  // [m] softmax weights, from the library's probabilities output
  Vector output;   // [d_v] from the library
};

Example default_example() {
  Example e;
  e.q = {0.5, 0.3, -0.2};
  e.k = {{0.4, 0.2, -0.1}, {0.1, 0.1, 0.8}, {-0.3, 0.4, 0.2}};
  e.v = {{0.9, 0.1, 0.3}, {0.2, 0.5, 0.1}, {0.3, 0.2, 0.4}};
  e.q_source = "the default --q";
  e.k_source = "the default --k";
  e.v_source = "the default --v";
  return e;
}

bool is_npy_path(std::string_view text) { return text.ends_with(kNpySuffix); }

// Rows of a rank-1 ([d] -> one row) or rank-2 .npy file, any numeric dtype, as doubles.
Matrix rows_from_npy(const std::string& path, std::string_view flag, int expected_rank, std::string_view shape_name) {
  const Tensor t = read_npy(path);
  if (t.rank() != expected_rank) {
    throw UsageError(std::string(flag) + " " + path + ": expected rank " + std::to_string(expected_rank) + " " +
                     std::string(shape_name) + ", got shape " + t.view().shape_string());
  }
  const std::int64_t cols = t.shape().back();
  const std::int64_t rows = expected_rank == 1 ? 1 : t.shape().front();
  const auto* bytes = static_cast<const unsigned char*>(t.raw());
  const std::size_t elem = dtype_size(t.dtype());
  Matrix m(static_cast<std::size_t>(rows), Vector(static_cast<std::size_t>(cols)));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      m[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] =
          load_as_double(bytes + static_cast<std::size_t>(r * cols + c) * elem, t.dtype());
    }
  }
  return m;
}

Matrix matrix_arg(const std::string& text, std::string_view flag, std::string_view shape_name) {
  if (is_npy_path(text)) return rows_from_npy(text, flag, 2, shape_name);
  return parse_matrix(text, flag);
}

Vector vector_arg(const std::string& text, std::string_view flag) {
  if (is_npy_path(text)) return rows_from_npy(text, flag, 1, "[d_k]").front();
  return parse_number_list(text, flag);
}

// The flags as given: each replaces its part of the built-in example.
struct Request {
  std::optional<std::string> q, k, v;
  bool no_scale = false;
};

Example load_example(const Request& r) {
  Example e = default_example();
  if (r.q) {
    e.q = vector_arg(*r.q, "--q");
    e.q_source = "--q";
  }
  if (r.k) {
    e.k = matrix_arg(*r.k, "--k", "[m, d_k]");
    e.k_source = "--k";
  }
  if (r.v) {
    e.v = matrix_arg(*r.v, "--v", "[m, d_v]");
    e.v_source = "--v";
  }
  return e;
}

// Sizes must fit together: every key has d_k numbers, one value vector per key.
void check_sizes(const Example& e) {
  const std::size_t d_k = e.q.size();
  if (d_k == 0 || e.k.empty() || e.v.empty() || e.v.front().empty()) {
    throw UsageError("the query, the keys and the values must not be empty");
  }
  if (e.k.front().size() != d_k) {
    throw UsageError(e.k_source + " has keys of length " + std::to_string(e.k.front().size()) + " but " +
                     e.q_source + " has length " + std::to_string(d_k) + " (d_k): every key needs d_k numbers");
  }
  if (e.v.size() != e.k.size()) {
    throw UsageError(e.v_source + " has " + std::to_string(e.v.size()) + " value vectors but " + e.k_source +
                     " has " + std::to_string(e.k.size()) + " keys: give one value vector per key");
  }
}

double dot(const Vector& a, const Vector& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// Contiguous float64 tensor [1, 1, rows, cols] holding `m`.
Tensor batch_of_one(const Matrix& m) {
  const auto rows = static_cast<std::int64_t>(m.size()), cols = static_cast<std::int64_t>(m.front().size());
  Tensor t(DType::f64, {1, 1, rows, cols});
  double* data = t.data<double>();
  for (const Vector& row : m) data = std::copy(row.begin(), row.end(), data);
  return t;
}

Story compute(const Example& e, bool no_scale) {
  Story s;
  for (const Vector& key : e.k) s.raw.push_back(dot(e.q, key));
  s.scale = no_scale ? 1.0 : 1.0 / std::sqrt(static_cast<double>(e.q.size()));
  for (double r : s.raw) s.scaled.push_back(r * s.scale);

  const auto m = static_cast<std::int64_t>(e.k.size()), d_v = static_cast<std::int64_t>(e.v.front().size());
  const Tensor q = batch_of_one({e.q}), k = batch_of_one(e.k), v = batch_of_one(e.v);
  Tensor out(DType::f64, {1, 1, 1, d_v}), probs(DType::f64, {1, 1, 1, m});
  AttentionOptions options;
  options.kernel = Kernel::reference;
  options.scale = s.scale;  // explicit, so the printed scale is the one the library used
  ForwardExtras extras;
  extras.probs = probs.view();
  forward(q.view(), k.view(), v.view(), out.view(), options, extras);

  s.weights.assign(probs.data<double>(), probs.data<double>() + m);
  s.output.assign(out.data<double>(), out.data<double>() + d_v);
  return s;
}

std::string fixed(double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(kDecimals) << x;
  std::string text = s.str();
  if (text.find_first_not_of("-0.") == std::string::npos && text.front() == '-') text.erase(0, 1);  // no "-0.0000"
  return text;
}

// Right-aligned to the width of "-0.0000", so that columns of mixed signs line up.
std::string padded(double x) {
  constexpr std::size_t kWidth = kDecimals + 3;  // sign, units digit, point
  std::string text = fixed(x);
  return text.size() < kWidth ? std::string(kWidth - text.size(), ' ') + text : text;
}

std::string fixed(const Vector& xs) {
  std::string text = "[";
  for (std::size_t i = 0; i < xs.size(); ++i) text += (i ? ", " : "") + padded(xs[i]);
  return text + "]";
}

// "  name_1 =  0.2800" for each entry, one per line.
void print_indexed(std::ostream& out, std::string_view name, const Vector& xs) {
  for (std::size_t j = 0; j < xs.size(); ++j) out << "  " << name << '_' << j + 1 << " = " << padded(xs[j]) << '\n';
}

void print_inputs(std::ostream& out, const Example& e) {
  out << "Attention for one query, step by step: o = softmax(q·Kᵀ · scale) · V\n"
      << "d_k = " << e.q.size() << " (query and key length), m = " << e.k.size()
      << " keys, d_v = " << e.v.front().size() << " (value length)\n\n"
      << "Inputs\n"
      << "  q   = " << fixed(e.q) << '\n';
  for (std::size_t j = 0; j < e.k.size(); ++j) {
    out << "  k_" << j + 1 << " = " << fixed(e.k[j]) << "    v_" << j + 1 << " = " << fixed(e.v[j]) << '\n';
  }
  out << '\n';
}

void print_scaling(std::ostream& out, const Story& s, std::size_t d_k, bool no_scale) {
  const std::string root = "√" + std::to_string(d_k);
  if (no_scale) {
    out << "Step 2: scaled affinities z_j = s_j · scale, scale = 1 (--no-scale: no 1/√d_k factor)\n";
    print_indexed(out, "z", s.scaled);
    out << "  Without the 1/√d_k factor the logits are " << root << " = " << fixed(std::sqrt(static_cast<double>(d_k)))
        << " times larger, so the weights below come out sharper (closer to all on one key); for large d_k the "
           "softmax saturates and its gradients vanish.\n\n";
    return;
  }
  out << "Step 2: scaled affinities z_j = s_j · scale, scale = 1/√d_k = 1/" << root << " = " << fixed(s.scale)
      << '\n';
  print_indexed(out, "z", s.scaled);
  out << "  Dividing by √d_k keeps the logits at unit variance when q and k have random unit-variance entries, "
         "so the softmax does not saturate as d_k grows.\n\n";
}

void print_story(std::ostream& out, const Example& e, const Story& s, bool no_scale) {
  print_inputs(out, e);

  out << "Step 1: raw affinities s_j = q·k_j\n";
  print_indexed(out, "s", s.raw);
  out << "  Each is a dot product: it is large when key j points the same way as the query, so it measures "
         "how well key j matches the query.\n\n";

  print_scaling(out, s, e.q.size(), no_scale);

  double sum = 0.0;
  for (double w : s.weights) sum += w;
  out << "Step 3: softmax weights w_j = exp(z_j) / Σ_i exp(z_i)\n";
  print_indexed(out, "w", s.weights);
  out << "  sum = " << fixed(sum) << '\n'
      << "  The weights are positive and sum to 1: the share of its attention the query gives to each key.\n\n";

  out << "Step 4: output o = Σ_j w_j · v_j\n"
      << "  o = " << fixed(s.output) << '\n'
      << "  The output is the weighted average of the value vectors: it leans toward the values whose keys "
         "match the query best.\n";
}

int explain(const CommandArgs& words, std::ostream& out) {
  Request r;
  CommandLine command_line(kAbout, kFooter);
  command_line.text("--q", r.q, "Q", "the query: d_k numbers \"0.5,0.3,-0.2\", or a .npy file of shape [d_k]");
  command_line.text("--k", r.k, "K", "the keys: m rows of d_k numbers \"0.4,0.2,-0.1;0.1,0.1,0.8\", or a .npy file [m, d_k]");
  command_line.text("--v", r.v, "V", "the values: m rows of d_v numbers, or a .npy file [m, d_v]");
  command_line.flag("--no-scale", r.no_scale, "use scale = 1 instead of 1/√d_k, to see what the scaling is for");
  if (!command_line.parse(words, out)) return kExitOk;  // --help
  const Example example = load_example(r);
  check_sizes(example);
  print_story(out, example, compute(example, r.no_scale), r.no_scale);
  return kExitOk;
}

}  // namespace

int explain_command(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  return guarded("explain", err, [&] { return explain(args, out); });
}

}  // namespace attnkit::cli
