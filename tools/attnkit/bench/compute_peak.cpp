// Peak arithmetic rates: each x86 target's register-only FMA loop this CPU runs (and the bf16 dot
// loop), on 1..N threads at once.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

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
// resolution are below 0.1%, short enough that the ceilings cost a second or two.
constexpr double kSampleSeconds = 0.05;
constexpr std::int64_t kCalibrationIterations = 1 << 16;
constexpr double kGiga = 1e9;

#if defined(ATTNKIT_BENCH_X86)
// __builtin_cpu_supports also checks that the OS saves the wider registers, and takes literals only.
bool has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool has_avx512f() { return __builtin_cpu_supports("avx512f"); }
bool has_avx512_bf16() { return has_avx512f() && __builtin_cpu_supports("avx512bf16"); }
bool has_amx_bf16() { return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16"); }

// Linux gives a process the AMX tile data (8 KiB of register state) only on request, once for all its
// threads; without it the first tile instruction faults. True when granted; else `why` says why not.
bool amx_tiles_permitted(std::string& why) {
#if defined(__linux__)
  constexpr int kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM (asm/prctl.h, Linux 5.16)
  constexpr int kTileData = 18;               // XFEATURE_XTILEDATA
  if (syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0) return true;
  why = std::string("the kernel did not grant the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
        std::strerror(errno) + ")";
#else
  why = "AMX tiles are requested from Linux only (arch_prctl)";
#endif
  return false;
}
#endif

constexpr const char* kGenericIsa = "generic 128-bit mul+add (no AVX2+FMA: a floor, not the peak)";

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

// GFLOP/s of `loop` run by `threads` threads at once, each doing `iterations`: the fastest timed run.
// A ceiling is what the machine can do; on a shared VM a run whose core another tenant took for a
// while only hides it, and the median of a few such runs put a 2-thread peak at 342 GFLOP/s where
// the next bench run measured 519 (an AVX-512 Zen 5), every 2-thread case then above "100%".
double rate(Loop loop, std::int64_t iterations, int threads, int repeats) {
  std::vector<double> flops(static_cast<std::size_t>(threads));
  const Timing t = time_calls({.repeats = repeats}, [&] {
    run_on_threads(threads, [&](int thread) { flops[static_cast<std::size_t>(thread)] = loop(iterations); });
  });
  double total = 0;
  for (double f : flops) total += f;
  return total / *std::min_element(t.samples.begin(), t.samples.end()) / kGiga;
}

ComputePeak measure(const PeakLoop& loop, const std::vector<int>& threads, int repeats) {
  ComputePeak peak{loop.isa, {}};
  const std::int64_t iterations = calibrate(loop.run);
  for (int t : threads) peak.gflops.push_back(rate(loop.run, iterations, t, repeats));
  return peak;
}

}  // namespace

std::vector<FmaLoopPeak> measure_fma_peaks(const std::vector<int>& threads, int repeats) {
  const auto loop_peak = [&](const char* key, const PeakLoop& loop) {
    return FmaLoopPeak{key, loop.isa, measure(loop, threads, repeats).gflops, ""};
  };
  std::vector<FmaLoopPeak> loops;
#if defined(ATTNKIT_BENCH_X86)
  const PeakLoop avx2{"avx2+fma", fma_loop_avx2}, avx512{"avx512f", fma_loop_avx512};
  loops.push_back(has_avx2_fma() ? loop_peak("avx2", avx2)
                                 : FmaLoopPeak{"avx2", avx2.isa, std::nullopt, "this CPU has no avx2 and fma"});
  loops.push_back(has_avx512f() ? loop_peak("avx512", avx512)
                                : FmaLoopPeak{"avx512", avx512.isa, std::nullopt, "this CPU has no avx512f"});
  if (has_avx2_fma() || has_avx512f()) return loops;
#else
  const char* why = "the target's loops exist for x86-64 only";
  loops.push_back({"avx2", "avx2+fma", std::nullopt, why});
  loops.push_back({"avx512", "avx512f", std::nullopt, why});
#endif
  loops.push_back(loop_peak("generic", {kGenericIsa, fma_loop_generic}));
  return loops;
}

void take_best_fma(const std::vector<FmaLoopPeak>& loops, std::size_t counts, std::vector<double>& gflops,
                   std::vector<std::string>& isa) {
  gflops.assign(counts, 0.0);
  isa.assign(counts, "");
  for (const FmaLoopPeak& loop : loops) {
    if (!loop.gflops) continue;
    for (std::size_t i = 0; i < counts && i < loop.gflops->size(); ++i) {
      if ((*loop.gflops)[i] > gflops[i]) {
        gflops[i] = (*loop.gflops)[i];
        isa[i] = loop.isa;
      }
    }
  }
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

std::optional<ComputePeak> measure_amx_bf16_peak(const std::vector<int>& threads, int repeats, std::string& why_not) {
#if defined(ATTNKIT_BENCH_X86)
  if (!has_amx_bf16()) {
    why_not = "this CPU has no AMX-BF16 tiles (amx-tile, amx-bf16)";
  } else if (amx_tiles_permitted(why_not)) {
    return measure({"amx_bf16 (tdpbf16ps)", amx_bf16_loop}, threads, repeats);
  }
#else
  why_not = "the AMX tile loop exists for x86-64 only";
#endif
  (void)threads;
  (void)repeats;
  return std::nullopt;
}

}  // namespace attnkit::bench
