// The float64 reference: the specification every fast kernel is tested against. Plain loops that
// materialise the n×m logits per head and read like the formula; obviously right beats fast here.
#pragma once

#include "core/problem.hpp"

namespace attnkit::detail {

void reference_forward(const Problem& problem, const ForwardOutputs& outputs);
void reference_backward(const Problem& problem, const BackwardIO& io);

}  // namespace attnkit::detail
