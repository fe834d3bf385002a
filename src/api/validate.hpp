// Argument checking at the API edge. Everything a kernel may assume is established here, once, and
// every failure is an attnkit::Error that names the argument, the shapes and what was expected.
#pragma once

#include "core/problem.hpp"

namespace attnkit::detail {

Problem validate_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         const AttentionOptions& options, const ForwardExtras& extras, ForwardOutputs& outputs);

Problem validate_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const BackwardIO& io,
                          const AttentionOptions& options);

}  // namespace attnkit::detail
