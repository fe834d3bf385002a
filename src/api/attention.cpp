// The public entry points: validate once, then hand the problem to a kernel. No arithmetic here.
#include "attnkit/attention.hpp"

#include "api/run_within_memory.hpp"
#include "api/validate.hpp"
#include "attnkit/error.hpp"
#include "cpu/backward.hpp"
#include "cpu/forward.hpp"
#include "reference/reference.hpp"

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
    const Kernel kernel = resolve_kernel(options.kernel, q.dtype());
    if (kernel == Kernel::fast) {
      detail::run_within_memory("forward", kernel, problem, cpu::fast_forward_scratch_bytes(problem, outputs.probs.has_value()),
                                [&] { cpu::fast_forward(problem, outputs); });
    } else {
      detail::run_within_memory("forward", kernel, problem, detail::reference_scratch_bytes(problem, outputs.probs.has_value()),
                                [&] { detail::reference_forward(problem, outputs); });
    }
  });
}

void backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView d_out,
              ConstTensorView lse, TensorView dq, TensorView dk, TensorView dv, const AttentionOptions& options) {
  detail::reporting_out_of_memory("backward", [&] {
    const detail::BackwardIO io{out, d_out, lse, dq, dk, dv};
    const detail::Problem problem = detail::validate_backward(q, k, v, io, options);
    const Kernel kernel = resolve_kernel(options.kernel, q.dtype());
    if (kernel == Kernel::fast) {
      detail::run_within_memory("backward", kernel, problem, cpu::fast_backward_scratch_bytes(problem),
                                [&] { cpu::fast_backward(problem, io); });
    } else {
      detail::run_within_memory("backward", kernel, problem, detail::reference_scratch_bytes(problem, false),
                                [&] { detail::reference_backward(problem, io); });
    }
  });
}

const char* version() noexcept { return ATTNKIT_VERSION; }

}  // namespace attnkit
