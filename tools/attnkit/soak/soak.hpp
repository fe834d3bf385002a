// `attnkit bench --soak SECONDS`: random calls across shapes, dtypes, layouts and options for a fixed
// time — forward, backward, decoding through a KV cache, and calls that must be refused — each
// sampled call checked against the float64 reference, with the process's memory compared after
// warm-up and at the end. A long run of this is how "never crashes, never drifts, never leaks" is
// checked beyond the unit tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/targets.hpp"
#include "soak/memory_usage.hpp"

namespace attnkit::cli::soak {

struct SoakOptions {
  double seconds = 60;
  std::int64_t max_calls = 0;      // also stop after this many calls (0: no limit); a fixed seed and
                                   // a call count give the same calls on every machine
  std::uint64_t seed = 0;
  int check_every = 3;             // one valid call in this many is checked against the reference
  double warmup_fraction = 0.25;   // memory after this share of the time (or of max_calls) is the baseline
  double progress_seconds = 10;    // on_progress is called about this often
  std::function<void(double elapsed, std::int64_t calls, std::int64_t failures)> on_progress;
};

// The largest error of one kind, and the largest share of its call's bound any error used.
struct ErrorStat {
  double largest = 0, share = 0;
};

// Errors of the checked calls of one dtype, each normalised so that one bound holds for every shape:
// out and probabilities over max|V| (divided by 1 − dropout), gradients over the largest magnitude
// of the three reference gradients (with a floor), LSE absolute over max(1, |LSE|). A call's bound
// is the dtype's base bound plus kLogitRounding · L, L the largest |logit| the call can have
// (Cauchy–Schwarz: scale · max‖q_i‖ · max‖k_j‖, or the softcap, plus ALiBi and the additive mask):
// float32 rounds each logit to 2^-24 · |s|, and exp turns that into a relative error of the weight.
struct DTypeErrors {
  DType dtype = DType::f32;
  std::int64_t checked = 0;
  double forward_bound = 0, lse_bound = 0, backward_bound = 0;  // the base bounds
  ErrorStat forward;   // out, probabilities, KV-cache attention
  ErrorStat lse;
  ErrorStat backward;  // dq, dk, dv
};
inline constexpr double kLogitRounding = 4.0 / (1 << 24);

struct SoakReport {
  std::uint64_t seed = 0;
  double seconds = 0;
  std::int64_t calls = 0, forward_calls = 0, backward_calls = 0, attend_calls = 0, refused_calls = 0;
  std::int64_t checked = 0, failures = 0;
  std::vector<std::string> first_failures;  // up to kMaxReportedFailures, each naming the call
  MemoryUsage after_warmup, at_end;
  std::vector<DTypeErrors> errors;          // f32, bf16, f16, then f64 (the reference against itself is not run)
  std::vector<Target> targets;              // the SIMD targets the calls were drawn over

  std::int64_t resident_growth() const { return at_end.resident_bytes - after_warmup.resident_bytes; }
  std::int64_t heap_growth() const { return at_end.heap_bytes - after_warmup.heap_bytes; }
  bool memory_judged() const { return after_warmup.heap_known && at_end.heap_known; }
  bool memory_flat() const;  // true when not judged
  bool passed() const { return failures == 0 && memory_flat() && calls > 0; }
};

inline constexpr std::size_t kMaxReportedFailures = 10;
// "Flat": after warm-up, the heap grows by less than this (a leak of one small object per call
// would pass it within seconds) and the resident set by less than kResidentSlack (the allocator
// keeps freed pages for reuse, and the largest shapes may come late).
inline constexpr std::int64_t kHeapSlack = std::int64_t{4} << 20;
inline constexpr std::int64_t kResidentSlack = std::int64_t{64} << 20;

SoakReport run_soak(const SoakOptions& options);

// The report as text lines (one summary, one per dtype, memory, failures) or one JSON object.
std::string format_report(const SoakReport& report);
std::string format_report_json(const SoakReport& report);

}  // namespace attnkit::cli::soak
