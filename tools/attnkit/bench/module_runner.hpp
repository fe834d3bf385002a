// Runs one module case: MultiHeadAttention::forward_cached on the case's thread count, as an inference
// engine calls it, and attnkit::attend alone on the same cache with the same shapes and threads, so
// that the report can give attention's share of the layer's time (the rest is the projections,
// RoPE, appending to the cache and the module's copies).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "attnkit/mha.hpp"
#include "attnkit/options.hpp"
#include "bench/cache_evictor.hpp"
#include "bench/module_cases.hpp"
#include "bench/timing.hpp"

namespace attnkit::bench {

struct ModuleResult {
  ModuleCase module_case;
  std::string kernel;  // the kernel attnkit ran: kernel_name(resolve_kernel(requested))
  std::optional<std::string> target;  // the SIMD target it ran on (kernel_target.hpp); none for the reference
  Timing timing;       // MultiHeadAttention::forward_cached
  Timing attention;    // attnkit::attend alone: the same queries' shape over the same cache
};

struct ModuleRunnerOptions {
  TimingPlan timing;
  Kernel kernel = Kernel::automatic;  // asked of forward_cached and attend
};

class ModuleRunner {
 public:
  explicit ModuleRunner(ModuleRunnerOptions options) : options_(options) {}
  ModuleResult run(const ModuleCase& c);

 private:
  const MultiHeadAttention& module_for(const ModuleLayer& layer);
  void time_prefill(const ModuleCase& c, ModuleResult& r);
  void time_decode(const ModuleCase& c, ModuleResult& r);
  std::function<void()> evict();  // made at the first decode case

  ModuleRunnerOptions options_;
  // Kept across cases of the same layer: making E = 4096's 40 M weights takes most of a second.
  std::unique_ptr<MultiHeadAttention> module_;
  ModuleLayer module_layer_;
  std::unique_ptr<CacheEvictor> evictor_;
};

}  // namespace attnkit::bench
