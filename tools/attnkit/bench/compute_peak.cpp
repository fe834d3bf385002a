// Peak arithmetic rates: the widest register-only loop this CPU runs, on 1..N threads at once.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/ceilings.hpp"
#include "bench/peak_loops.hpp"
#include "bench/thread_team.hpp"
#include "bench/timing.hpp"

namespace attnkit::bench {

namespace {

using Loop = double (*)(std::int64_t iterations);

struct PeakLoop {
  std::string isa;
  Loop run;
};

// Each timed run lasts about this long: long enough that starting threads (~50 µs) and timer
// resolution are below 0.1%, short enough that the ceilings cost about a second.
constexpr double kSampleSeconds = 0.05;
constexpr std::int64_t kCalibrationIterations = 1 << 16;
constexpr double kGiga = 1e9;

#if defined(ATTNKIT_BENCH_X86)
// __builtin_cpu_supports also checks that the OS saves the wider registers, and takes literals only.
bool has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool has_avx512f() { return __builtin_cpu_supports("avx512f"); }
bool has_avx512_bf16() { return has_avx512f() && __builtin_cpu_supports("avx512bf16"); }
#endif

PeakLoop widest_fma_loop() {
#if defined(ATTNKIT_BENCH_X86)
  if (has_avx512f()) return {"avx512f", fma_loop_avx512};
  if (has_avx2_fma()) return {"avx2+fma", fma_loop_avx2};
#endif
  return {"generic 128-bit mul+add (no AVX2+FMA: a floor, not the peak)", fma_loop_generic};
}

// Iterations that take about kSampleSeconds on one thread.
std::int64_t calibrate(Loop loop) {
  std::int64_t iterations = kCalibrationIterations;
  for (;;) {
    const double seconds = seconds_of([&] { loop(iterations); });
    if (seconds >= kSampleSeconds / 4) {
      return static_cast<std::int64_t>(static_cast<double>(iterations) * kSampleSeconds / seconds) + 1;
    }
    iterations *= 4;
  }
}

// GFLOP/s of `loop` run by `threads` threads at once, each doing `iterations`.
double rate(Loop loop, std::int64_t iterations, int threads, int repeats) {
  std::vector<double> flops(static_cast<std::size_t>(threads));
  const Timing t = time_calls({.repeats = repeats}, [&] {
    run_on_threads(threads, [&](int thread) { flops[static_cast<std::size_t>(thread)] = loop(iterations); });
  });
  double total = 0;
  for (double f : flops) total += f;
  return total / t.median_seconds / kGiga;
}

ComputePeak measure(const PeakLoop& loop, const std::vector<int>& threads, int repeats) {
  ComputePeak peak{loop.isa, {}};
  const std::int64_t iterations = calibrate(loop.run);
  for (int t : threads) peak.gflops.push_back(rate(loop.run, iterations, t, repeats));
  return peak;
}

}  // namespace

ComputePeak measure_fma_peak(const std::vector<int>& threads, int repeats) {
  return measure(widest_fma_loop(), threads, repeats);
}

std::optional<ComputePeak> measure_bf16_peak(const std::vector<int>& threads, int repeats, std::string& why_not) {
#if defined(ATTNKIT_BENCH_X86)
  if (has_avx512_bf16()) {
    return measure({"avx512_bf16 (vdpbf16ps)", bf16_dot_loop_avx512}, threads, repeats);
  }
  why_not = "this CPU has no avx512_bf16 (no vdpbf16ps instruction); bf16 cases are compared with the f32 peak";
#else
  why_not = "the bf16 dot-product loop exists for x86-64 (vdpbf16ps) only";
#endif
  (void)threads;
  (void)repeats;
  return std::nullopt;
}

}  // namespace attnkit::bench
