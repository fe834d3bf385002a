// What the benchmark prints: a readable table, or with --json one JSON object per line (a
// "ceilings" line first, then one line per case and per module case, then "peak_memory"). Each case is reported as
// ratios measured in the same run: a fraction of the machine's ceilings and a speed-up over the
// baselines; absolute times on a shared machine are noise (docs/performance.md).
#pragma once

#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/blas.hpp"
#include "bench/blas_attention.hpp"
#include "bench/case_runner.hpp"
#include "bench/ceilings.hpp"
#include "bench/module_runner.hpp"
#include "bench/peak_memory.hpp"
#include "bench/batch_decode_runner.hpp"
#include "bench/varlen_runner.hpp"

namespace attnkit::bench {

// About the run, printed with the ceilings.
struct RunInfo {
  std::string attnkit_version;
  std::string kernel;     // the kernel the cases run (the one requested, resolved)
  std::string fast_note;  // why Kernel::fast is not available; empty when it is
  int hardware_threads = 1;
  int repeats = 0;
  BlasInfo openblas;
  // The check of OpenBLAS's core (attnkit/blas.hpp), for the baseline and the module's projections
  // alike (one OpenBLAS per process): the baseline's when it is built, else the module's.
  std::string blas_core;
  BlasCoreVerdict blas_verdict;
  CpuVectorFeatures cpu;           // what the verdict was judged against
  std::vector<std::string> notes;  // warnings about the environment
};

// The ratios of one case, derived from its timings and the ceilings.
struct Figures {
  double gflops = 0;
  std::optional<double> fraction_of_peak;       // of the best f32 FMA rate at this thread count
  std::optional<double> fraction_of_bf16_peak;  // of the bf16 dot peak, bf16 cases on CPUs with one
  std::optional<double> fraction_of_amx_peak;   // of the AMX tile peak: bf16 cases on CPUs with tiles, f16 cases on f16 tiles
  std::optional<double> gbytes_per_s;           // decode: K and V bytes read per second
  std::optional<double> fraction_of_bandwidth;  // decode: of the copy bandwidth at this thread count
  std::optional<double> fraction_of_read_bandwidth;  // decode: of the read bandwidth at this thread count
  std::optional<double> speedup_vs_naive;
  std::optional<double> speedup_vs_openblas;
  std::optional<double> forward_gflops;  // backward: the forward's rate on the same case in this run
  std::optional<double> vs_forward;      // backward: gflops / forward_gflops
};

Figures figures_of(const CaseResult& result, const Ceilings& ceilings);

// The ratios of one module case.
struct ModuleFigures {
  double tokens_per_second = 0;                 // new tokens per second of the module's median call
  double gflops = 0;
  std::optional<double> fraction_of_peak;       // of the best f32 FMA rate at this thread count
  std::optional<double> gbytes_per_s;           // decode: weights and K and V bytes read per second
  std::optional<double> fraction_of_bandwidth;  // decode: of the copy bandwidth at this thread count
  std::optional<double> fraction_of_read_bandwidth;  // decode: of the read bandwidth at this thread count
  double attention_share = 0;                   // attnkit::attend alone over the module, both medians
};

ModuleFigures figures_of(const ModuleResult& result, const Ceilings& ceilings);

// The ratios of one packed variable-length case.
struct VarlenFigures {
  double gflops = 0;                       // of varlen_forward on the packed sequences
  std::optional<double> fraction_of_peak;  // of the best f32 FMA rate at this thread count
  double equal_gflops = 0;                 // of forward on the equal-length batch of the same work
  double rate_vs_equal = 0;                // gflops / equal_gflops (target: at least 0.90)
  double time_vs_padded = 0;               // packed seconds / key_lengths-padded seconds (target: at most 0.5)
  double work_vs_padded = 0;               // the same of the FLOPs each must do: the bound on time_vs_padded
  double time_vs_masked = 0;               // packed seconds / mask-padded seconds
  std::optional<double> vs_one_thread;     // the 1-thread packed seconds of this case over these, when run
};

// All but vs_one_thread, which needs the case's 1-thread row (the report keeps it).
VarlenFigures figures_of(const VarlenResult& result, const Ceilings& ceilings);

// The ratios of one batched decoding step.
struct BatchDecodeFigures {
  double gflops = 0;                                 // 4·d per query head and cached token, over the seconds
  std::optional<double> fraction_of_peak;            // of the best f32 FMA rate at this thread count
  double gbytes_per_s = 0;                           // bytes of K and V over the step's seconds
  std::optional<double> fraction_of_bandwidth;       // of the copy bandwidth at this thread count
  std::optional<double> fraction_of_read_bandwidth;  // of the read bandwidth at this thread count
  std::optional<double> speedup_vs_bf16;             // the bf16 cache's step seconds over these, when run
};

// All but speedup_vs_bf16, which needs the bf16 case's row (the report keeps it).
BatchDecodeFigures figures_of(const BatchDecodeResult& result, const Ceilings& ceilings);

class Report {
 public:
  Report(std::ostream& out, bool json) : out_(out), json_(json) {}
  void machine(const RunInfo& info, const Ceilings& ceilings);  // call first
  void result(const CaseResult& result);
  void module_result(const ModuleResult& result);
  void varlen_result(const VarlenResult& result);
  void batch_decode_result(const BatchDecodeResult& result);
  void peak_memory(const PeakMemoryResult& result);

 private:
  void text_machine(const RunInfo& info) const;
  void json_machine(const RunInfo& info) const;
  void text_result(const CaseResult& result, const Figures& f);
  void json_result(const CaseResult& result, const Figures& f) const;
  void text_module_result(const ModuleResult& result, const ModuleFigures& f);
  void json_module_result(const ModuleResult& result, const ModuleFigures& f) const;
  void text_varlen_result(const VarlenResult& result, const VarlenFigures& f);
  void json_varlen_result(const VarlenResult& result, const VarlenFigures& f) const;
  void text_batch_decode_result(const BatchDecodeResult& result, const BatchDecodeFigures& f);
  void json_batch_decode_result(const BatchDecodeResult& result, const BatchDecodeFigures& f) const;
  void section(const std::string& heading);  // prints the table's heading unless it was the last one

  std::ostream& out_;
  bool json_;
  Ceilings ceilings_;
  std::string section_;  // the heading of the table printed last
  std::map<std::string, double> one_thread_seconds_;  // varlen cases' 1-thread packed medians, by name
  std::map<std::string, double> bf16_step_seconds_;   // batched decoding's bf16 steps, by group and threads
};

}  // namespace attnkit::bench
