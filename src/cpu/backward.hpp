// The fast backward: prepares the rows (float32 Q and dO, LSE, D = rowsum(dO ∘ O)), runs the active
// target's kernel over (batch, KV head, key chunk) items in parallel, then sums the chunks' dQ.
#pragma once

#include "core/memory.hpp"
#include "core/problem.hpp"

namespace attnkit::cpu {

void fast_backward(const detail::Problem& p, const detail::BackwardIO& io);

// The memory fast_backward may allocate for this problem (float32 rows of Q and dO, the chunks' dQ
// partials, per-thread workspaces), an upper bound that saturates: checked before the call.
detail::ByteCount fast_backward_scratch_bytes(const detail::Problem& p);

}  // namespace attnkit::cpu
