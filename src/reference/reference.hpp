// The float64 reference: the specification every fast kernel is tested against. Plain loops that
// materialise the n×m logits per head and read like the formula; obviously right beats fast here.
// Both compute every head before writing any output: a call that fails changes nothing.
#pragma once

#include "core/memory.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

void reference_forward(const Problem& problem, const ForwardOutputs& outputs);
void reference_backward(const Problem& problem, const BackwardIO& io);

// The float64 matrices the reference holds at once for this problem (n×m logits and probabilities
// per (batch, head) in flight, one per thread; every head's results, kept until all are computed so
// that a failure writes nothing; the probabilities when `probs`), saturating: checked before the call.
ByteCount reference_scratch_bytes(const Problem& problem, bool probs);

}  // namespace attnkit::detail
