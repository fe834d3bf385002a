// The scaling experiment's outputs: a table, JSON Lines, and the panels of its plot.
#pragma once

#include <iosfwd>
#include <vector>

#include "lab/scaling.hpp"
#include "attnkit_viz/plot.hpp"

namespace attnkit::lab {

void print_scaling_table(std::ostream& out, const ScalingConfig& config, const std::vector<ScalingRow>& rows);
// One object per d_k: the configuration, then each figure with suffix _unscaled and _scaled.
void print_scaling_json(std::ostream& out, const ScalingConfig& config, const std::vector<ScalingRow>& rows);
// Four panels (logit variance, max weight, entropy, Jacobian norm) against d_k on a log axis, each
// with one line per scale choice.
std::vector<viz::Panel> scaling_panels(const ScalingConfig& config, const std::vector<ScalingRow>& rows);
std::string scaling_title(const ScalingConfig& config);

}  // namespace attnkit::lab
