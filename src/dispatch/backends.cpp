#include "dispatch/backends.hpp"

#include <string>

#include "dispatch/run_within_memory.hpp"
#include "attnkit/error.hpp"
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
