// Runs one benchmark case: attnkit::forward (or attnkit::backward) on the case's dtype and thread
// count, and for forward and decode cases the two f32 baselines (naive, OpenBLAS composition) on
// the same shape and threads, each timed the same way. Decode cases evict the caches before every
// call, so K and V come from memory as in generation. A backward case also carries the timing of
// its forward in this run, so that the report can give the backward's rate as a ratio to it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "attnkit/options.hpp"
#include "bench/cache_evictor.hpp"
#include "bench/cases.hpp"
#include "bench/timing.hpp"

namespace attnkit::bench {

struct CaseResult {
  BenchCase bench_case;
  std::string kernel;                 // the kernel attnkit ran: kernel_name(resolve_kernel(requested, dtype))
  std::optional<std::string> target;  // the SIMD target it ran on (kernel_target.hpp); none for the reference
  Timing timing;                      // attnkit::forward, or attnkit::backward for a backward case
  std::optional<Timing> naive;        // naive f32 baseline, same shape and threads (forward-only)
  std::optional<Timing> openblas;     // OpenBLAS composition, same shape and threads (forward-only)
  std::string openblas_note;          // why `openblas` is absent
  std::optional<Timing> forward;      // backward cases: the forward of the same case, timed in this run
};

struct RunnerOptions {
  TimingPlan timing;
  Kernel kernel = Kernel::automatic;  // the kernel asked of attnkit::forward and attnkit::backward
  bool naive = true;
  bool openblas = true;
};

class CaseRunner {
 public:
  explicit CaseRunner(RunnerOptions options) : options_(options) {}
  CaseResult run(const BenchCase& c);

 private:
  struct Baselines {
    std::optional<Timing> naive, openblas;
    std::string openblas_note;
  };
  struct Inputs;
  const Baselines& baselines(const BenchCase& c, const Inputs& in);
  std::function<void()> before_each_call(const BenchCase& c);  // empty, or the cache eviction
  Timing time_forward(const BenchCase& c, const Inputs& in);
  Timing time_quantized_decode(const BenchCase& c, const Inputs& in);
  Timing time_backward(const BenchCase& c, const Inputs& in);
  const Timing& forward_timing(const BenchCase& backward_case, const Inputs& in);  // timed now if not yet

  RunnerOptions options_;
  std::map<std::string, Baselines> cache_;  // by BenchCase::baseline_key(): bf16 cases reuse f32 timings
  std::map<std::string, Timing> forward_timings_;  // forward cases by name and threads, for vs_forward
  std::unique_ptr<CacheEvictor> evictor_;   // made at the first decode case
};

}  // namespace attnkit::bench
