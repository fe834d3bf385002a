// All ceilings in one call, and lookups by thread count.
#include "bench/ceilings.hpp"

#include <algorithm>

namespace attnkit::bench {

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::optional<double> lookup(const std::vector<int>& threads, const std::vector<double>& values, int t) {
  const auto it = std::find(threads.begin(), threads.end(), t);
  if (it == threads.end()) return std::nullopt;
  const auto index = static_cast<std::size_t>(it - threads.begin());
  return index < values.size() ? std::optional<double>(values[index]) : std::nullopt;
}

}  // namespace

std::optional<double> Ceilings::fma_for(int t) const { return lookup(threads, fma_gflops, t); }
std::optional<double> Ceilings::bf16_for(int t) const {
  return bf16_gflops ? lookup(threads, *bf16_gflops, t) : std::nullopt;
}
std::optional<double> Ceilings::amx_for(int t) const {
  return amx_bf16_gflops ? lookup(threads, *amx_bf16_gflops, t) : std::nullopt;
}
std::optional<double> Ceilings::copy_for(int t) const { return lookup(threads, copy_gbytes_per_s, t); }
std::optional<double> Ceilings::read_for(int t) const { return lookup(threads, read_gbytes_per_s, t); }

Ceilings measure_ceilings(const CeilingPlan& plan) {
  Ceilings c;
  c.threads = plan.threads;
  c.fma_loops = measure_fma_peaks(plan.threads, plan.repeats);
  take_best_fma(c.fma_loops, plan.threads.size(), c.fma_gflops, c.fma_best_isa);
  std::vector<std::string> distinct;
  for (const std::string& isa : c.fma_best_isa) {
    if (!isa.empty() && std::find(distinct.begin(), distinct.end(), isa) == distinct.end()) distinct.push_back(isa);
  }
  for (const std::string& isa : distinct) c.fma_isa += (c.fma_isa.empty() ? "" : " / ") + isa;
  if (auto bf16 = measure_bf16_peak(plan.threads, plan.repeats, c.bf16_note)) c.bf16_gflops = bf16->gflops;
  if (auto amx = measure_amx_bf16_peak(plan.threads, plan.repeats, c.amx_bf16_note)) c.amx_bf16_gflops = amx->gflops;
  c.copy_bytes = plan.copy_mib * kMiB;
  c.copy_gbytes_per_s = measure_copy_bandwidth(plan.threads, plan.repeats, c.copy_bytes);
  c.read_gbytes_per_s = measure_read_bandwidth(plan.threads, plan.repeats, c.copy_bytes);
  return c;
}

}  // namespace attnkit::bench
