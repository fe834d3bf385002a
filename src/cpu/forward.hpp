// The fast forward: plans the work, runs the active target's kernel over it in parallel, merges
// split-key partial results.
#pragma once

#include "core/memory.hpp"
#include "core/problem.hpp"

namespace attnkit::cpu {

void fast_forward(const detail::Problem& p, const detail::ForwardOutputs& outputs);

// The memory fast_forward may allocate for this problem (per-thread workspaces and the call's
// partial results), an upper bound that saturates instead of wrapping: checked before the call.
detail::ByteCount fast_forward_scratch_bytes(const detail::Problem& p, bool probs);

}  // namespace attnkit::cpu
