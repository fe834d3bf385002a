// The precision experiment's outputs: a table per logit std, JSON Lines, and the panels of its plot.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "lab/precision.hpp"
#include "attnkit_viz/plot.hpp"

namespace attnkit::lab {

void print_precision_table(std::ostream& out, const PrecisionConfig& config, const PrecisionResult& result);
// One object per (variant, logit std, length).
void print_precision_json(std::ostream& out, const PrecisionConfig& config, const PrecisionResult& result);
// One panel per logit std: error against length, log-log, one line per variant.
std::vector<viz::Panel> precision_panels(const PrecisionConfig& config, const PrecisionResult& result);
std::string precision_title(const PrecisionConfig& config);

}  // namespace attnkit::lab
