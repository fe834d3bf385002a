// Runs one benchmark case: attnkit::forward on the case's dtype and thread count, and the two f32
// baselines (naive, OpenBLAS composition) on the same shape and threads, each timed the same way.
// Decode cases evict the caches before every call, so K and V come from memory as in generation.
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
  std::string kernel;                 // the kernel attnkit ran: kernel_name(resolve_kernel(requested))
  Timing timing;                      // attnkit::forward
  std::optional<Timing> naive;        // naive f32 baseline, same shape and threads
  std::optional<Timing> openblas;     // OpenBLAS composition, same shape and threads
  std::string openblas_note;          // why `openblas` is absent
};

struct RunnerOptions {
  TimingPlan timing;
  Kernel kernel = Kernel::automatic;  // the kernel asked of attnkit::forward
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

  RunnerOptions options_;
  std::map<std::string, Baselines> cache_;  // by BenchCase::baseline_key(): bf16 cases reuse f32 timings
  std::unique_ptr<CacheEvictor> evictor_;   // made at the first decode case
};

}  // namespace attnkit::bench
