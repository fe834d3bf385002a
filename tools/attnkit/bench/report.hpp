// What the benchmark prints: a readable table, or with --json one JSON object per line (a
// "ceilings" line first, then one line per case, then "peak_memory"). Each case is reported as
// ratios measured in the same run: a fraction of the machine's ceilings and a speed-up over the
// baselines; absolute times on a shared machine are noise (shared/DESIGN.md).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "bench/blas_attention.hpp"
#include "bench/case_runner.hpp"
#include "bench/ceilings.hpp"
#include "bench/peak_memory.hpp"

namespace attnkit::bench {

// About the run, printed with the ceilings.
struct RunInfo {
  std::string attnkit_version;
  std::string kernel;     // the kernel the cases run (the one requested, resolved)
  std::string fast_note;  // why Kernel::fast is not available; empty when it is
  int hardware_threads = 1;
  int repeats = 0;
  BlasInfo openblas;
  std::vector<std::string> notes;  // warnings about the environment
};

// The ratios of one case, derived from its timings and the ceilings.
struct Figures {
  double gflops = 0;
  std::optional<double> fraction_of_peak;       // of the f32 FMA peak at this thread count
  std::optional<double> fraction_of_bf16_peak;  // of the bf16 dot peak, bf16 cases on CPUs with one
  std::optional<double> gbytes_per_s;           // decode: K and V bytes read per second
  std::optional<double> fraction_of_bandwidth;  // decode: of the copy bandwidth at this thread count
  std::optional<double> speedup_vs_naive;
  std::optional<double> speedup_vs_openblas;
  std::optional<double> forward_gflops;  // backward: the forward's rate on the same case in this run
  std::optional<double> vs_forward;      // backward: gflops / forward_gflops
};

Figures figures_of(const CaseResult& result, const Ceilings& ceilings);

class Report {
 public:
  Report(std::ostream& out, bool json) : out_(out), json_(json) {}
  void machine(const RunInfo& info, const Ceilings& ceilings);  // call first
  void result(const CaseResult& result);
  void peak_memory(const PeakMemoryResult& result);

 private:
  void text_machine(const RunInfo& info) const;
  void json_machine(const RunInfo& info) const;
  void text_result(const CaseResult& result, const Figures& f);
  void json_result(const CaseResult& result, const Figures& f) const;

  std::ostream& out_;
  bool json_;
  Ceilings ceilings_;
  std::optional<CaseKind> section_;  // the table whose header was printed last
};

}  // namespace attnkit::bench
