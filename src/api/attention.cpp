// The public entry points: validate once, then hand the problem to a kernel. No arithmetic here.
#include "attnkit/attention.hpp"

#include "api/validate.hpp"
#include "attnkit/error.hpp"
#include "reference/reference.hpp"

#ifndef ATTNKIT_VERSION
#define ATTNKIT_VERSION "0.0.0"
#endif

namespace attnkit {
namespace {

// Only the reference exists in this build. Asking for `fast` explicitly is an error, never a silent
// fallback; `automatic` picks the reference.
void require_kernel_available(Kernel kernel) {
  if (kernel == Kernel::fast) {
    throw Error(ErrorCode::unsupported,
                "kernel: the fast CPU kernel is not part of this build yet; use Kernel::automatic or Kernel::reference");
  }
}

}  // namespace

void forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out, const AttentionOptions& options,
             const ForwardExtras& extras) {
  detail::ForwardOutputs outputs;
  const detail::Problem problem = detail::validate_forward(q, k, v, out, options, extras, outputs);
  require_kernel_available(options.kernel);
  detail::reference_forward(problem, outputs);
}

void backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView d_out,
              ConstTensorView lse, TensorView dq, TensorView dk, TensorView dv, const AttentionOptions& options) {
  const detail::BackwardIO io{out, d_out, lse, dq, dk, dv};
  const detail::Problem problem = detail::validate_backward(q, k, v, io, options);
  require_kernel_available(options.kernel);
  detail::reference_backward(problem, io);
}

const char* version() noexcept { return ATTNKIT_VERSION; }

}  // namespace attnkit
