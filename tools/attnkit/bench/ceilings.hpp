// The machine's own ceilings, measured in the same run as the kernels so that every figure can be
// read as a fraction of what this machine, at this moment, can do (docs/performance.md):
// the f32 FMA rate of each x86 target's loop (AVX2 + FMA, AVX-512F) and the best of them,
// the bf16 dot-product rate where the CPU has one, the AMX bf16 tile rate where it has tiles, the
// copy bandwidth and the read bandwidth.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::bench {

struct CeilingPlan {
  std::vector<int> threads;   // thread counts to measure, e.g. {1, 2}
  int repeats = 5;            // timed repetitions per figure; the median is reported
  std::size_t copy_mib = 256; // size of each of the two copy buffers
};

// One f32 FMA loop: a target's, measured when the CPU has its instructions.
struct FmaLoopPeak {
  std::string key;   // the JSON name: "avx2", "avx512" (fma_<key>_gflops), "generic"
  std::string isa;   // what the loop runs: "avx2+fma", "avx512f", or the generic floor
  std::optional<std::vector<double>> gflops;  // one per thread count; absent when not measured
  std::string note;  // why gflops is absent
};

struct Ceilings {
  std::vector<int> threads;             // the thread counts, in plan order
  // Every x86 target's loop, AVX2 + FMA then AVX-512F, measured or with the reason it was not; on a
  // CPU with neither (or off x86), the generic 128-bit floor alone.
  std::vector<FmaLoopPeak> fma_loops;
  std::vector<double> fma_gflops;       // one per thread count: the best of the measured loops
  std::vector<std::string> fma_best_isa;  // one per thread count: the loop that gave it
  std::string fma_isa;                  // fma_best_isa's names, " / "-joined when they differ
  std::optional<std::vector<double>> bf16_gflops;  // vdpbf16ps rate, when the CPU has avx512_bf16
  std::string bf16_note;                // why bf16_gflops is absent
  // AMX tdpbf16ps rate, when the CPU has AMX-BF16 and the OS grants the tiles: the ceiling of the
  // amx_bf16 target's bf16 forwards, which run their products on the tiles.
  std::optional<std::vector<double>> amx_bf16_gflops;
  std::string amx_bf16_note;            // why amx_bf16_gflops is absent
  std::size_t copy_bytes = 0;           // per buffer
  std::vector<double> copy_gbytes_per_s;  // read + write bytes per second, one per thread count
  std::vector<double> read_gbytes_per_s;  // bytes read per second from one buffer of copy_bytes, one per thread count

  // The figures for `threads`; nullopt when that count was not measured. fma_for is the best f32
  // rate: the denominator of every fraction_of_peak.
  std::optional<double> fma_for(int threads) const;
  std::optional<double> bf16_for(int threads) const;
  std::optional<double> amx_for(int threads) const;
  std::optional<double> copy_for(int threads) const;
  std::optional<double> read_for(int threads) const;
};

Ceilings measure_ceilings(const CeilingPlan& plan);

// Parts of measure_ceilings, usable alone.
struct ComputePeak {
  std::string isa;
  std::vector<double> gflops;  // one per thread count
};
std::vector<FmaLoopPeak> measure_fma_peaks(const std::vector<int>& threads, int repeats);
std::optional<ComputePeak> measure_bf16_peak(const std::vector<int>& threads, int repeats, std::string& why_not);
std::optional<ComputePeak> measure_amx_bf16_peak(const std::vector<int>& threads, int repeats, std::string& why_not);
std::vector<double> measure_copy_bandwidth(const std::vector<int>& threads, int repeats, std::size_t bytes);
std::vector<double> measure_read_bandwidth(const std::vector<int>& threads, int repeats, std::size_t bytes);

// The best rate per thread count over the measured loops, and which loop gave it (the first listed
// wins a tie). Loops without figures are skipped; a count no loop measured gets 0 and "".
void take_best_fma(const std::vector<FmaLoopPeak>& loops, std::size_t counts, std::vector<double>& gflops,
                   std::vector<std::string>& isa);

}  // namespace attnkit::bench
