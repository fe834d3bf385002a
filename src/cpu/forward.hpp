// The fast forward: plans the work, runs the active target's kernel over it in parallel, merges
// split-key partial results.
#pragma once

#include "core/problem.hpp"

namespace attnkit::cpu {

void fast_forward(const detail::Problem& p, const detail::ForwardOutputs& outputs);

}  // namespace attnkit::cpu
