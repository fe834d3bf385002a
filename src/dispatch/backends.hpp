// The one place a backend is chosen. A validated Problem names its kernel; this table maps each
// kernel to its entry points and scratch estimates, and run_forward / run_backward run a problem on
// it within the memory budget. Adding a backend is adding one entry to the table (backends.cpp).
#pragma once

#include "core/memory.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

struct Backend {
  Kernel kernel;
  // The scratch a call allocates, saturating, checked against the budget before it runs.
  ByteCount (*forward_scratch)(const Problem& problem, bool probs);
  ByteCount (*backward_scratch)(const Problem& problem);
  void (*forward)(const Problem& problem, const ForwardOutputs& outputs);
  void (*backward)(const Problem& problem, const BackwardIO& io);
  bool reads_cached_keys;  // takes problems over a KV cache (Problem::cached)
};

// The backend of a resolved kernel (reference or fast).
const Backend& backend_for(Kernel kernel);

// Runs a validated problem on its backend: the memory check, then the kernel; a failed allocation
// raises Error(out_of_memory) naming `call` and the shapes, with every output untouched.
void run_forward(const char* call, const Problem& problem, const ForwardOutputs& outputs);
void run_backward(const char* call, const Problem& problem, const BackwardIO& io);

}  // namespace attnkit::detail
