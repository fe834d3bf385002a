#include "dispatch/backends.hpp"

#include <string>

#include "dispatch/run_within_memory.hpp"
#include "attnkit/error.hpp"
#include "core/option_checks.hpp"
#include "cpu/backward.hpp"
#include "cpu/forward.hpp"
#include "reference/reference.hpp"

namespace attnkit::detail {
namespace {

constexpr Backend kBackends[] = {
    {Kernel::reference, reference_scratch_bytes, [](const Problem& p) { return reference_scratch_bytes(p, false); },
     reference_forward, reference_backward, true},
    {Kernel::fast, cpu::fast_forward_scratch_bytes, cpu::fast_backward_scratch_bytes, cpu::fast_forward,
     cpu::fast_backward, true},
};

}  // namespace

const Backend& backend_for(Kernel kernel) {
  for (const Backend& backend : kBackends) {
    if (backend.kernel == kernel) return backend;
  }
  throw Error(ErrorCode::unsupported, std::string("kernel: no backend runs ") + kernel_name(kernel) + " problems");
}

Problem trusted_problem(ConstTensorView q, ConstTensorView k, ConstTensorView v, const AttentionOptions& options) {
  Problem p;
  p.sizes = Sizes{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  p.kernel = resolve_kernel(options.kernel, q.dtype());
  if (p.kernel == Kernel::fast) p.target = active_target();
  p.q = q;
  p.k = k;
  p.v = v;
  p.scale = resolve_scale(options, p.sizes);  // the caller checked the options: this only resolves
  p.take_options(options);
  return p;
}

void run_forward(const char* call, const Problem& problem, const ForwardOutputs& outputs) {
  const Backend& backend = backend_for(problem.kernel);
  if (problem.cached != nullptr && !backend.reads_cached_keys) {
    throw Error(ErrorCode::unsupported, std::string(call) + ": the " + kernel_name(problem.kernel) +
                                            " kernel cannot read a KV cache");
  }
  run_within_memory(call, problem.kernel, problem, backend.forward_scratch(problem, outputs.probs.has_value()),
                    [&] { backend.forward(problem, outputs); });
}

void run_backward(const char* call, const Problem& problem, const BackwardIO& io) {
  const Backend& backend = backend_for(problem.kernel);
  run_within_memory(call, problem.kernel, problem, backend.backward_scratch(problem), [&] { backend.backward(problem, io); });
}

}  // namespace attnkit::detail
