// The public entry points: validate once, then hand the problem to a kernel. No arithmetic here.
#include "attnkit/attention.hpp"

#include "api/validate.hpp"
#include "attnkit/error.hpp"
#include "reference/reference.hpp"

#ifndef ATTNKIT_VERSION
#define ATTNKIT_VERSION "0.0.0"
#endif

namespace attnkit {

// Only the reference exists in this build. Asking for `fast` by name is an error, never a silent
// fallback; `automatic` picks the reference.
Kernel resolve_kernel(Kernel requested) {
  if (requested == Kernel::fast) {
    throw Error(ErrorCode::unsupported,
                "kernel: the fast CPU kernel is not part of this build yet; use Kernel::automatic or Kernel::reference");
  }
  return Kernel::reference;
}

const char* kernel_name(Kernel kernel) noexcept {
  switch (kernel) {
    case Kernel::automatic: return "automatic";
    case Kernel::reference: return "reference";
    case Kernel::fast: return "fast";
  }
  return "unknown";
}

void forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out, const AttentionOptions& options,
             const ForwardExtras& extras) {
  detail::ForwardOutputs outputs;
  const detail::Problem problem = detail::validate_forward(q, k, v, out, options, extras, outputs);
  resolve_kernel(options.kernel);
  detail::reference_forward(problem, outputs);
}

void backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView d_out,
              ConstTensorView lse, TensorView dq, TensorView dk, TensorView dv, const AttentionOptions& options) {
  const detail::BackwardIO io{out, d_out, lse, dq, dk, dv};
  const detail::Problem problem = detail::validate_backward(q, k, v, io, options);
  resolve_kernel(options.kernel);
  detail::reference_backward(problem, io);
}

const char* version() noexcept { return ATTNKIT_VERSION; }

}  // namespace attnkit
