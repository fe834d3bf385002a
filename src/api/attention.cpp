// The public entry points: validate once, then hand the problem to its backend (backends.hpp). No
// arithmetic here.
#include "attnkit/attention.hpp"

#include "dispatch/backends.hpp"
#include "dispatch/run_within_memory.hpp"
#include "api/validate.hpp"
#include "attnkit/error.hpp"

#ifndef ATTNKIT_VERSION
#define ATTNKIT_VERSION "0.0.0"
#endif

namespace attnkit {

Kernel resolve_kernel(Kernel requested, DType dtype) {
  if (requested == Kernel::reference) return Kernel::reference;
  if (dtype == DType::f64) {
    if (requested == Kernel::fast) {
      throw Error(ErrorCode::unsupported, "kernel: the fast kernel computes in float32 and takes f32, f16 or bf16; "
                                          "f64 inputs run on Kernel::reference (or automatic)");
    }
    return Kernel::reference;
  }
  return Kernel::fast;
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
  detail::reporting_out_of_memory("forward", [&] {
    detail::ForwardOutputs outputs;
    const detail::Problem problem = detail::validate_forward(q, k, v, out, options, extras, outputs);
    detail::run_forward("forward", problem, outputs);
  });
}

void backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView d_out,
              ConstTensorView lse, TensorView dq, TensorView dk, TensorView dv, const AttentionOptions& options,
              const BackwardExtras& extras) {
  detail::reporting_out_of_memory("backward", [&] {
    const detail::BackwardIO io{out, d_out, lse, dq, dk, dv, extras.d_sinks};
    const detail::Problem problem = detail::validate_backward(q, k, v, io, options);
    detail::run_backward("backward", problem, io);
  });
}

const char* version() noexcept { return ATTNKIT_VERSION; }

}  // namespace attnkit
