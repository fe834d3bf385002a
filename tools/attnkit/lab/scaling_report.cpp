// Table, JSON and plot panels for `attnkit lab scaling`.
#include "lab/scaling_report.hpp"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <span>
#include <string>

#include "bench/json_line.hpp"
#include "lab/lab_colors.hpp"

namespace attnkit::lab {

namespace {

std::string fixed(double value, int decimals) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string padded(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

std::string inputs_text(const ScalingConfig& c) {
  char variance[32];
  std::snprintf(variance, sizeof variance, "%g", c.input_std * c.input_std);
  std::string text = "entries N(0, " + std::string(variance) + ")";
  text += c.correlation > 0 ? ", correlation " + fixed(c.correlation, 2) + " within a vector" : " i.i.d.";
  return text;
}

// The four figures, each with its column header, its JSON key and its panel.
struct Figure {
  const char* header;  // table, ASCII so that columns line up
  const char* title;   // plot panel
  const char* key;
  const char* axis;
  double ScalingStats::*field;
  int decimals;
};
constexpr Figure kFigures[] = {
    {"logit variance", "Variance of the logits", "logit_variance", "variance of the logits", &ScalingStats::logit_variance, 2},
    {"max weight", "Largest attention weight", "max_weight", "mean largest weight", &ScalingStats::max_weight, 3},
    {"entropy / log m", "Normalised entropy of the weights", "entropy", "mean entropy / log m", &ScalingStats::entropy, 3},
    {"Jacobian ||J||_F", "Softmax Jacobian: gradient reaching the logits", "jacobian_norm", "mean ‖diag(p) − p·pᵀ‖_F", &ScalingStats::jacobian_norm, 4},
    {"saturated rows", "Rows with a weight >= 0.99", "saturated", "fraction of rows", &ScalingStats::saturated, 3},
};
// The plot shows the first four; the saturated fraction is in the table and the JSON.
constexpr std::size_t kPlottedFigures = 4;
constexpr std::size_t kColumn = 10;  // width of one number column

// A figure's value for p_j = 1/m; 0 for the logit variance, which has no such value.
double uniform_value(const Figure& f, int keys) {
  const double m = keys;
  if (f.field == &ScalingStats::max_weight) return 1.0 / m;
  if (f.field == &ScalingStats::entropy) return 1.0;
  if (f.field == &ScalingStats::jacobian_norm) return std::sqrt(m - 1) / m;
  return 0.0;
}

}  // namespace

std::string scaling_title(const ScalingConfig& c) {
  return "Softmax attention with and without 1/√d_k: m = " + std::to_string(c.keys) + " keys, " +
         inputs_text(c);
}

void print_scaling_table(std::ostream& out, const ScalingConfig& c, const std::vector<ScalingRow>& rows) {
  out << "attnkit lab scaling: m = " << c.keys << " keys, " << c.queries_per_trial << " queries x " << c.trials
      << " trials per d_k, Q and K " << inputs_text(c) << ", seed " << c.seed << "\n"
      << "each figure: without scaling (logits q.k) | with scaling (q.k / sqrt(d_k))\n\n";
  std::string header = "   d_k";
  std::string sub = "      ";
  for (const Figure& f : kFigures) {
    header += " | " + padded(f.header, 2 * kColumn + 1);
    sub += " | " + padded("unscaled", kColumn) + " " + padded("scaled", kColumn);
  }
  out << header << '\n' << sub << '\n';
  for (const ScalingRow& r : rows) {
    out << padded(std::to_string(r.d_k), 6);
    for (const Figure& f : kFigures) {
      out << " | " << padded(fixed(r.unscaled.*f.field, f.decimals), kColumn) << " "
          << padded(fixed(r.scaled.*f.field, f.decimals), kColumn);
    }
    out << '\n';
  }
  out << "\nlogit variance: pooled over all logits; max weight: mean over rows of max_j p_j (1/m = "
      << fixed(1.0 / c.keys, 4) << " is uniform, 1 is one-hot);\nentropy: mean of -sum p log p / log m (1 is uniform); "
         "||J||_F: mean Frobenius norm of the softmax Jacobian\ndiag(p) - p p^T, how much of a gradient reaches the "
         "logits (uniform weights: sqrt(m-1)/m = "
      << fixed(std::sqrt(c.keys - 1.0) / c.keys, 4) << "; at most 0.5);\nsaturated rows: fraction of rows whose "
         "largest weight is at least " << kSaturatedWeight << ".\n";
}

void print_scaling_json(std::ostream& out, const ScalingConfig& c, const std::vector<ScalingRow>& rows) {
  for (const ScalingRow& r : rows) {
    bench::JsonLine line;
    line.text("experiment", "scaling").integer("d_k", r.d_k).integer("keys", c.keys)
        .integer("queries_per_trial", c.queries_per_trial).integer("trials", c.trials)
        .integer("seed", static_cast<std::int64_t>(c.seed)).number("input_std", c.input_std)
        .number("correlation", c.correlation);
    for (const Figure& f : kFigures) {
      line.number(std::string(f.key) + "_unscaled", r.unscaled.*f.field);
      line.number(std::string(f.key) + "_scaled", r.scaled.*f.field);
    }
    out << line.str() << '\n';
  }
}

std::vector<viz::Panel> scaling_panels(const ScalingConfig& c, const std::vector<ScalingRow>& rows) {
  std::vector<viz::Panel> panels;
  std::vector<double> x;
  for (const ScalingRow& r : rows) x.push_back(r.d_k);
  for (const Figure& f : std::span(kFigures).first(kPlottedFigures)) {
    viz::Panel panel;
    panel.title = f.title;
    panel.x_label = "d_k";
    panel.y_label = f.axis;
    panel.log_x = true;
    panel.x_ticks = x;
    // The variance spans 2..1024 without scaling: only a log axis shows both lines.
    panel.log_y = f.field == &ScalingStats::logit_variance;
    viz::Series scaled{"with 1/√d_k", x, {}, kScaledColor, false};
    viz::Series unscaled{"without scaling", x, {}, kUnscaledColor, true};
    for (const ScalingRow& r : rows) {
      scaled.y.push_back(r.scaled.*f.field);
      unscaled.y.push_back(r.unscaled.*f.field);
    }
    panel.series = {scaled, unscaled};
    // Where a row of equal weights sits, for the three figures of the weights themselves.
    if (const double uniform = uniform_value(f, c.keys); uniform > 0 && !x.empty()) {
      panel.series.push_back({"uniform weights", {x.front(), x.back()}, {uniform, uniform}, kUniformColor, true});
    }
    panels.push_back(std::move(panel));
  }
  return panels;
}

}  // namespace attnkit::lab
