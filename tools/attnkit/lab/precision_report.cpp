// Table, JSON and plot panels for `attnkit lab precision`.
#include "lab/precision_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>

#include "attnkit/attention.hpp"
#include "bench/json_line.hpp"
#include "lab/lab_colors.hpp"

namespace attnkit::lab {

namespace {

std::string number(const char* format, double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string padded(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

constexpr std::size_t kColumn = 15;  // fits "reference f64" and "1.23e-04"

}  // namespace

std::string precision_title(const PrecisionConfig& c) {
  return "Error of attention against the exact output: " + std::to_string(c.queries) + " queries, d = " +
         std::to_string(c.head_dim) + ", inputs N(0, 1)";
}

void print_precision_table(std::ostream& out, const PrecisionConfig& c, const PrecisionResult& result) {
  out << "attnkit lab precision: n = " << c.queries << " queries over m keys, d_k = d_v = " << c.head_dim
      << ", Q, K, V entries N(0, 1), Q times the logit std, seed " << c.seed << "\n"
      << "relative RMS error ||O - O_exact||_F / ||O_exact||_F, O_exact in long double; inputs and O in each "
         "variant's dtype\n";
  for (const std::string& note : result.skipped) out << "not in this build: " << note << '\n';
  double current_std = -1;
  for (const PrecisionRow& row : result.rows) {
    if (row.logit_std != current_std) {
      current_std = row.logit_std;
      out << "\nlogit std " << number("%g", row.logit_std) << '\n' << padded("m", 7);
      for (const PrecisionVariant& v : result.variants) out << padded(v.name, kColumn);
      out << '\n';
    }
    out << padded(std::to_string(row.length), 7);
    for (double e : row.errors) out << padded(number("%.2e", e), kColumn);
    out << '\n';
  }
}

void print_precision_json(std::ostream& out, const PrecisionConfig& c, const PrecisionResult& result) {
  for (const PrecisionRow& row : result.rows) {
    for (std::size_t i = 0; i < result.variants.size(); ++i) {
      const PrecisionVariant& v = result.variants[i];
      out << bench::JsonLine()
                 .text("experiment", "precision").text("variant", v.name)
                 .text("kernel", v.naive ? "naive" : kernel_name(v.kernel)).text("dtype", dtype_name(v.dtype))
                 .number("logit_std", row.logit_std).integer("m", row.length).integer("n", c.queries)
                 .integer("d", c.head_dim).integer("seed", static_cast<std::int64_t>(c.seed))
                 .number("relative_rms_error", row.errors[i])
                 .str()
          << '\n';
    }
  }
}

std::vector<viz::Panel> precision_panels(const PrecisionConfig& c, const PrecisionResult& result) {
  // One error range for every panel, so that heights compare across logit stds.
  double lowest = std::numeric_limits<double>::infinity(), highest = 0;
  for (const PrecisionRow& row : result.rows) {
    for (double e : row.errors) {
      if (e > 0 && std::isfinite(e)) lowest = std::min(lowest, e), highest = std::max(highest, e);
    }
  }
  std::vector<viz::Panel> panels;
  for (double logit_std : c.logit_stds) {
    viz::Panel panel;
    panel.title = "logits with std " + number("%g", logit_std);
    panel.x_label = "sequence length m (keys)";
    panel.y_label = "relative RMS error of O";
    panel.log_x = panel.log_y = true;
    if (highest > 0) panel.y_min = lowest, panel.y_max = highest;
    for (std::int64_t length : c.lengths) panel.x_ticks.push_back(static_cast<double>(length));
    for (std::size_t i = 0; i < result.variants.size(); ++i) {
      const PrecisionVariant& v = result.variants[i];
      viz::Series series{v.name, {}, {}, kVariantColors[i % std::size(kVariantColors)], v.naive};
      for (const PrecisionRow& row : result.rows) {
        if (row.logit_std != logit_std) continue;
        series.x.push_back(static_cast<double>(row.length));
        series.y.push_back(row.errors[i]);
      }
      panel.series.push_back(std::move(series));
    }
    panels.push_back(std::move(panel));
  }
  return panels;
}

}  // namespace attnkit::lab
