// The machine's own ceilings, measured in the same run as the kernels so that every figure can be
// read as a fraction of what this machine, at this moment, can do (shared/DESIGN.md, "Performance
// method"): peak f32 FMA rate, peak bf16 dot-product rate where the CPU has one, copy bandwidth.
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

struct Ceilings {
  std::vector<int> threads;             // the thread counts, in plan order
  std::string fma_isa;                  // the loop that ran: "avx512f", "avx2+fma" or the generic floor
  std::vector<double> fma_gflops;       // one per thread count
  std::optional<std::vector<double>> bf16_gflops;  // vdpbf16ps rate, when the CPU has avx512_bf16
  std::string bf16_note;                // why bf16_gflops is absent
  std::size_t copy_bytes = 0;           // per buffer
  std::vector<double> copy_gbytes_per_s;  // read + write bytes per second, one per thread count

  // The figures for `threads`; nullopt when that count was not measured.
  std::optional<double> fma_for(int threads) const;
  std::optional<double> bf16_for(int threads) const;
  std::optional<double> copy_for(int threads) const;
};

Ceilings measure_ceilings(const CeilingPlan& plan);

// Parts of measure_ceilings, usable alone.
struct ComputePeak {
  std::string isa;
  std::vector<double> gflops;  // one per thread count
};
ComputePeak measure_fma_peak(const std::vector<int>& threads, int repeats);
std::optional<ComputePeak> measure_bf16_peak(const std::vector<int>& threads, int repeats, std::string& why_not);
std::vector<double> measure_copy_bandwidth(const std::vector<int>& threads, int repeats, std::size_t bytes);

}  // namespace attnkit::bench
