// The fast backward: prepares the rows (float32 Q and dO, LSE, D = rowsum(dO ∘ O)), runs the active
// target's kernel over (batch, KV head, key chunk) items in parallel, then sums the chunks' dQ.
#pragma once

#include "core/problem.hpp"

namespace attnkit::cpu {

void fast_backward(const detail::Problem& p, const detail::BackwardIO& io);

}  // namespace attnkit::cpu
