// `attnkit bench`: times attnkit::forward on the prefill and decode cases, attnkit::backward on the
// prefill shapes and one MultiHeadAttention layer's prefill and decode step through a KV cache,
// and reports each as ratios measured in the same run: a fraction of this machine's
// ceilings (FMA peak, copy bandwidth), a speed-up over two f32 forward baselines (a naive kernel and
// an OpenBLAS composition), for the backward its rate over the forward's, and for the module the
// share of its time spent in attention. The pieces live in bench/.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "attention_flags.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/blas.hpp"
#include "attnkit/error.hpp"
#include "bench/blas_attention.hpp"
#include "bench/case_runner.hpp"
#include "bench/cases.hpp"
#include "bench/ceilings.hpp"
#include "bench/module_cases.hpp"
#include "bench/module_runner.hpp"
#include "bench/peak_memory.hpp"
#include "bench/report.hpp"
#include "bench/batch_decode_cases.hpp"
#include "bench/batch_decode_runner.hpp"
#include "bench/varlen_cases.hpp"
#include "bench/varlen_runner.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "soak/soak.hpp"

namespace attnkit::cli {

namespace {

using bench::BenchCase;

constexpr int kFullRepeats = 5;
constexpr int kQuickRepeats = 3;
// A measurement stops adding timed calls after this long (with at least one), so slow baselines at
// n = 8192 do not run for an hour; --quick keeps every measurement short.
constexpr double kFullBudgetSeconds = 30;
constexpr double kQuickBudgetSeconds = 2;
constexpr std::size_t kDefaultCopyMiB = 256;  // per buffer: beyond the last-level cache of most CPUs

constexpr std::string_view kAbout = R"(Usage: attnkit bench [--quick] [--json] [--filter TEXT] [options]

Times attnkit::forward, attnkit::backward and the MultiHeadAttention module, and reports every
case as ratios measured in the same run, since absolute times on a shared machine are noise:
  - the machine's ceilings, measured first: the f32 FMA rate of each x86 target's register-only
    loop (AVX2+FMA, and AVX-512F where the CPU has it; on 1 and all threads; each loop's fastest
    timed run) and the best of them, the "FMA peak" every "of peak" is a share of; peak bf16
    dot-product rate (vdpbf16ps, only on CPUs with avx512_bf16); the AMX bf16 tile rate
    (tdpbf16ps, on CPUs with AMX-BF16: the ceiling of the amx_bf16 target, which runs bf16
    forwards on the tiles; every "of AMX" is a share of it) and memory bandwidth (a 2 x 256 MiB
    copy, read + write bytes);
  - two f32 forward baselines on the same shapes and threads: a naive kernel (scores materialised,
    plain loops) and the hand-written OpenBLAS composition sgemm(Q·Kᵀ) -> softmax -> sgemm(P·V).
Cases: forward (fwd_*), batch 1, 8 heads, n = m in {512, 1024, 2048, 8192}, d in {64, 128}, causal
and not, f32, bf16 and f16 (f16 not in --quick); backward (bwd_*) on the same shapes in f32 and
bf16, timing attnkit::backward alone (one forward call before it gives out and lse); decode, 1
query, 32 query heads over 8 KV heads, m in {4096, 32768}, d = 128, caches of f32, bf16 and f16
(attnkit::forward), and int8, int4, fp8_e4m3 and fp8_e5m2 (quantized: a KVCache read by
attnkit::attend; GB/s counts the rows' bytes). Module cases (mha_*): one
MultiHeadAttention layer through forward_cached and a KVCache, as an inference engine runs it, with
E = 4096, 32 heads over 8 KV heads, d = 128, f32 weights, no bias, RoPE (Llama-like):
  mha_prefill_f32_n2048_e4096                    2048 new tokens into an empty sequence
                                                 (contiguous cache), each timed call on a fresh one
  mha_decode_f32_m{4096,32768}_e4096_paged       one new token after m cached tokens (paged:
  mha_decode_f32_m{4096,32768}_e4096_contiguous  blocks of 16), the caches flushed before each step
  mha_decode_{int8,int4}_m{4096,32768}_e4096_paged  the same over an int8 or int4 cache (not in --quick)
each also timing attnkit::attend alone on the same cache, shapes and threads. Packed variable-length
cases (varlen_*): 16 sequences of mixed lengths (queries = keys, drawn from 64 to 4096 with a fixed
seed, printed), 8 heads, d = 128, causal and not, in one attnkit::varlen_forward call, also timing
attnkit::forward on an equal-length batch of the same work and on the sequences padded to the
longest, masked by key_lengths and by a bool key-padding mask. Batched decoding cases
(decode_batch_*): one decode step of 32 sequences of mixed lengths (drawn from 512 to 32768 with a
fixed seed, printed) in a paged cache (blocks of 16), one query token each, 32 query heads over 8 KV
heads, d = 128, through one attnkit::attend call, for each cache dtype (bf16 first, f32, f16, int8,
int4, fp8_e4m3, fp8_e5m2; float caches take queries of their dtype, quantized ones f32 queries), the caches
flushed before each step. Every case runs on 1 thread and on all. Last, the extra memory of one
n = m = 65536, d = 64 call with the fast kernel.

Columns: seconds (median), GFLOP/s (4·n·m·d per head, halved for causal; backward 2.5 times the
forward's), of peak (share of the best f32 FMA rate at that thread count), of AMX (only on CPUs with
AMX tiles: a bf16 case's share of the tile rate, "-" for other dtypes), GB/s, of bandw. and of read
(decode: K and V bytes over the copy bandwidth, and over the read bandwidth, a read of one buffer, the
faster of plain loads and loads with lines requested 2 KiB ahead: decoding only reads, and one core
may read slower than a copy moves bytes; the caches are flushed before each decode call), vs fwd (backward:
its GFLOP/s over the forward's on the same case and threads, measured in this run; the forward is
timed for it when --filter left it out), vs naive and vs BLAS (speed-up over each baseline; bf16
and f16 cases against the f32 baselines; "-" for the backward, the baselines are forward-only), kernel
and target (the kernel attnkit ran and the SIMD target the call ran on, e.g. avx2; "-" for the
reference; amx_bf16 runs only bf16 forwards on its tiles, so its other rows name avx512).

Varlen columns: seconds, GFLOP/s and of peak (of varlen_forward; 4·n·m·d per head and sequence,
halved for causal), rate/equal (its GFLOP/s over the equal-length batch's), time/padded (its seconds
over the key_lengths-padded batch's), work/padded (the same of the FLOPs each must do: attnkit skips
keys past key_lengths but not padded queries, so this bounds time/padded), time/masked (its seconds
over the mask-padded batch's), x 1 thread (the 1-thread seconds of the case over these).

Batched decoding columns: seconds (median step), GB/s, of bandw. and of read (every sequence's K and V
bytes over the step, over the copy and the read bandwidth), vs bf16 (the bf16 cache's step seconds
over these, same sequences and threads), kernel and target.

Module columns: seconds (median call), tokens/s (new tokens per second: n / seconds for a prefill,
1 / seconds for a decode step), GFLOP/s and of peak (prefill: the projections
2·n·E·(H + 2·Hkv)·d + 2·n·H·d·E plus causal attention 2·n²·d per query head, over the FMA peak),
GB/s and of bandw. (decode: the f32 weights E·(H + 2·Hkv)·d + H·d·E plus K and V of the m cached
tokens, 2·m·Hkv·d, read once, over the copy bandwidth and over the read bandwidth), attn share (attnkit::attend alone over the
module's time, both medians of this run: n queries over the n cached tokens for a prefill, 1 query
over the m cached tokens for a decode step; the rest, 1 - share, is the projections, RoPE, appending
to the cache and the module's copies), kernel and target.

)";

constexpr std::string_view kFooter = R"(OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE; a forced core can halve its speed, so run
the bench with them unset (the core in use is printed):
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE attnkit bench
unless OpenBLAS's own choice is a generic core: an OpenBLAS older than the CPU does not know it and
runs SSE3 kernels (OpenBLAS 0.3.21 on a 2023 Xeon: 'Prescott', about 10x slower). The bench then
prints a WARNING line (JSON: "blas_core_generic": true) naming the core to force: Haswell on CPUs
with AVX2, SkylakeX on CPUs with AVX-512:
  env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX attnkit bench

Examples:
  attnkit bench --quick
  attnkit bench --json --filter fwd_f32_n8192 > bench.jsonl
  attnkit bench --filter bwd_f32_n1024 --threads 1 --no-naive
  attnkit bench --sizes 4096 --dims 128 --threads 2 --no-naive
  attnkit bench --filter mha_ --no-naive --no-openblas
  attnkit bench --filter varlen --no-naive --no-openblas
  attnkit bench --filter decode_batch --threads 1
  attnkit bench --soak 60

Exit codes: 0 success, 1 a library error, 2 bad usage (including a filter that matches nothing).)";

struct Request {
  bench::CaseSelection selection;
  bool json = false;
  std::optional<int> repeat;            // default kFullRepeats, or kQuickRepeats with --quick
  std::optional<std::string> threads;   // a list for the timings, one count for --soak
  std::size_t copy_mib = kDefaultCopyMiB;
  Kernel kernel = Kernel::automatic;
  bool no_naive = false;
  bool no_openblas = false;
  std::optional<double> soak_seconds;   // --soak: the soak run instead of the timings
  std::optional<std::uint64_t> seed;    // the soak's

  int repeats() const { return repeat.value_or(selection.quick ? kQuickRepeats : kFullRepeats); }
  double budget_seconds() const { return selection.quick ? kQuickBudgetSeconds : kFullBudgetSeconds; }
};

int hardware_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// Limits that keep every count in an int and catch typos (a repeat count of 10^9); thread counts
// go up to attnkit::kMaxThreads.
constexpr std::int64_t kMaxRepeats = 10000;
constexpr std::int64_t kNoLimit = std::numeric_limits<std::int64_t>::max();
constexpr double kMaxSoakSeconds = 7 * 24 * 3600;  // a week

// Integers in [1, max] from "a,b,c", naming the flag when one is not.
std::vector<std::int64_t> positive_list(std::string_view text, std::string_view flag, std::int64_t max = kNoLimit) {
  std::vector<std::int64_t> values = parse_integer_list(text, flag);
  for (std::int64_t v : values) {
    if (v < 1 || v > max) {
      throw UsageError(std::string(flag) + ": every value must be at least 1" +
                       (max == kNoLimit ? std::string() : " and at most " + std::to_string(max)) + ", got " +
                       std::to_string(v));
    }
  }
  return values;
}

std::int64_t positive(std::string_view text, std::string_view flag, std::int64_t max = kNoLimit) {
  const std::vector<std::int64_t> values = positive_list(text, flag, max);
  if (values.size() != 1) {
    throw UsageError(std::string(flag) + ": expected one integer, got '" + std::string(text) + "'");
  }
  return values.front();
}

// Parsers for CommandLine::value.
auto positive_in(int max) {
  return [max](std::string_view text, std::string_view flag) { return static_cast<int>(positive(text, flag, max)); };
}
auto positive_list_in(std::int64_t max) {
  return [max](std::string_view text, std::string_view flag) { return positive_list(text, flag, max); };
}

double parse_soak_seconds(std::string_view text, std::string_view flag) {
  const double seconds = parse_number(text, flag);
  if (!(seconds > 0 && seconds <= kMaxSoakSeconds)) {
    throw UsageError(std::string(flag) + ": the duration must be more than 0 and at most a week of seconds, got " +
                     std::string(text));
  }
  return seconds;
}

// The flags, each filling its field of `r` as the command line is parsed.
void add_flags(CommandLine& c, Request& r) {
  c.flag("--quick", r.selection.quick,
         "a ~30-second subset: n = m in {256, 512}, d = 64, one backward case\n"
          "(bwd_f32_n256_d64), decode m = 4096, 3 repeats; module cases on a smaller\n"
          "layer (E = 1024, 8 heads over 2 KV heads, d = 128): mha_prefill_f32_n256_e1024\n"
          "and mha_decode_f32_m1024_e1024_{paged,contiguous}; varlen lengths from 64 to\n"
          "1024 (varlen_f32_b16_short_d128); batched decoding lengths from 64 to 1024\n"
          "(decode_batch_*_b32_short_d128)");
  c.flag("--json", r.json,
         "one JSON object per line: \"ceilings\" (with \"fma_avx2_gflops\" and\n"
          "\"fma_avx512_gflops\", null with a \"_note\" when not measured, \"fma_best_isa\",\n"
          "\"amx_bf16_gflops\" (null with \"amx_bf16_note\" without AMX tiles),\n"
          "\"blas_core_generic\", \"blas_coretype_advice\", \"copy_gbytes_per_s\" and\n"
          "\"read_gbytes_per_s\"), then one per case (with \"direction\":\n"
          "\"forward\" or \"backward\", \"vs_forward\" for the backward, and for bf16\n"
          "cases \"fraction_of_bf16_peak\" and \"fraction_of_amx_peak\" where those\n"
          "ceilings were measured), then one per module case (\"kind\": \"mha_prefill\" or\n"
          "\"mha_decode\", with \"embed_dim\", \"layout\", \"tokens_per_second\",\n"
          "\"attention_seconds\" and \"attention_share\"; decode also\n"
          "\"bytes\", \"gbytes_per_s\", \"fraction_of_bandwidth\" and\n"
          "\"fraction_of_read_bandwidth\"), then one per varlen case\n"
          "(\"kind\": \"varlen\", with \"lengths\", \"rate_vs_equal\", \"time_vs_padded\",\n"
          "\"work_vs_padded\", \"time_vs_masked\" and \"speedup_vs_one_thread\"), then one per\n"
          "batched decoding case (\"kind\": \"decode_batch\", with \"lengths\", \"block_size\",\n"
          "\"tokens\", \"kv_bytes\", \"gbytes_per_s\", \"fraction_of_bandwidth\",\n"
          "\"fraction_of_read_bandwidth\" and \"speedup_vs_bf16\"), then \"peak_memory\"");
  c.text("--filter", r.selection.filter, "TEXT",
         "only cases whose name contains TEXT (e.g. fwd_f32_n1024, bwd, causal, decode,\n"
          "mha_, mha_decode, paged, varlen, decode_batch)");
  c.value("--repeat", r.repeat, positive_in(kMaxRepeats), "N", "timed calls per measurement after the warm-up (default 5, --quick 3)");
  c.text("--threads", r.threads, "LIST", "thread counts, e.g. 1,2 (default: 1 and all hardware threads)");
  c.value("--sizes", r.selection.sizes, positive_list_in(kNoLimit), "LIST",
          "sequence lengths instead of the defaults: n = m for forward cases, m for decode,\n"
          "n for mha_prefill and m for mha_decode; varlen_ and decode_batch_ cases draw their\n"
          "lengths from L/64 to the largest L given");
  c.value("--dims", r.selection.dims, positive_list_in(kNoLimit), "LIST",
          "head dimensions d instead of the defaults (also of varlen_ and decode_batch_ cases;\n"
          "not for mha_ cases: d is the layer's)");
  c.value("--copy-mib", r.copy_mib, [](std::string_view text, std::string_view flag) {
    return static_cast<std::size_t>(positive(text, flag));
  }, "N",
          "size of each bandwidth buffer (copy and read) in MiB (default 256; keep it far\n"
          "beyond the caches)");
  c.value("--kernel", r.kernel, parse_kernel, "K", "the kernel to time: auto (default), fast or reference (the float64 oracle)");
  c.flag("--no-naive", r.no_naive, "skip the naive baseline (it takes minutes per case at n = 8192)");
  c.flag("--no-openblas", r.no_openblas, "skip the OpenBLAS baseline");
  c.value("--soak", r.soak_seconds, parse_soak_seconds, "SECONDS",
          "instead of timing: random calls for SECONDS (forward, backward, decoding\n"
          "through a KV cache, and broken calls that must be refused) across shapes,\n"
          "dtypes, layouts and options, one valid call in 3 checked against the float64\n"
          "reference; reports calls, failures, the largest error per dtype against its\n"
          "bound and the memory growth after warm-up. Exit 1 on any failure or growth.\n"
          "Takes --seed N (default: from the clock, printed), --threads N and --json");
  c.value("--seed", r.seed, parse_unsigned, "N", "the soak's seed (default: from the clock, printed)");
}

std::vector<int> thread_counts(const Request& r) {
  std::vector<int> threads;
  if (r.threads) {
    for (std::int64_t t : positive_list(*r.threads, "--threads", kMaxThreads)) threads.push_back(static_cast<int>(t));
  } else {
    threads = {1, hardware_threads()};
  }
  std::sort(threads.begin(), threads.end());
  threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
  return threads;
}

// Why Kernel::fast cannot run in this build; empty when it can.
std::string fast_kernel_note() {
  try {
    resolve_kernel(Kernel::fast);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::vector<std::string> environment_notes() {
  std::vector<std::string> notes;
  if (const char* value = std::getenv("OPENBLAS_CORETYPE")) {
    notes.push_back(std::string("OPENBLAS_CORETYPE=") + value +
                    " is set: OpenBLAS runs that core instead of the one it detects, and a wrong one can halve its "
                    "speed; unset it ('env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE attnkit bench') unless OpenBLAS's "
                    "own choice is a generic core (the OpenBLAS core line says)");
  }
  if (const char* value = std::getenv("OPENBLAS_L2_SIZE")) {
    notes.push_back(std::string("OPENBLAS_L2_SIZE=") + value +
                    " is set: OpenBLAS sizes its blocks for that cache instead of the one it detects; unset it for a "
                    "fair baseline");
  }
  return notes;
}

bench::RunInfo run_info(const Request& r) {
  bench::RunInfo info;
  info.attnkit_version = version();
  info.kernel = kernel_name(resolve_kernel(r.kernel));  // raises unsupported for an absent kernel
  info.fast_note = fast_kernel_note();
  info.hardware_threads = hardware_threads();
  info.repeats = r.repeats();
  info.openblas = bench::BlasAttention::info();
  info.cpu = cpu_vector_features();
  if (info.openblas.available) {
    info.blas_core = info.openblas.core;
    info.blas_verdict = info.openblas.verdict;
  } else {  // the module's projections still run on OpenBLAS
    const ProjectionBlas module_blas = projection_blas();
    info.blas_core = module_blas.core;
    info.blas_verdict = module_blas.verdict;
  }
  if (r.no_openblas) info.openblas.description = "skipped (--no-openblas)";
  info.notes = environment_notes();
  return info;
}

// The long-sequence memory case: runs only with the fast kernel, outside --quick, when selected.
std::optional<bench::PeakMemoryResult> peak_memory(const Request& r, const bench::RunInfo& info) {
  const int threads = r.selection.threads.back();
  const bench::PeakMemoryResult identity = bench::peak_memory_case(threads);
  if (!bench::matches_filter(identity.name, r.selection.filter)) return std::nullopt;
  std::optional<std::string> skip;
  if (!info.fast_note.empty()) {
    skip = "the fast kernel is not in this build; the reference would take hours and hold the n×m scores";
  } else if (r.kernel == Kernel::reference) {
    skip = "--kernel reference: it would take hours and hold the n×m scores";
  } else if (r.selection.quick) {
    skip = "--quick (one call is ~10^12 FLOP)";
  }
  return bench::measure_peak_memory(threads, skip);
}

// --soak SECONDS: the soak run (soak/soak.hpp) instead of the timings.
int soak_main(const CommandLine& c, const Request& r, std::ostream& out, std::ostream& err) {
  for (const char* timing_only : {"--quick", "--filter", "--repeat", "--sizes", "--dims", "--copy-mib", "--kernel", "--no-naive", "--no-openblas"}) {
    if (c.given(timing_only)) throw UsageError(std::string(timing_only) + " is a timing flag; --soak takes --seed, --threads and --json");
  }
  soak::SoakOptions options;
  options.seconds = *r.soak_seconds;
  options.seed = r.seed.value_or(static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  if (r.threads) set_num_threads(static_cast<int>(positive(*r.threads, "--threads", kMaxThreads)));
  const bool json = r.json;
  if (!json) {
    out << "soak: " << options.seconds << " s of random calls, seed " << options.seed << " (replay with --seed "
        << options.seed << "), " << num_threads() << " threads\n" << std::flush;
    options.on_progress = [&err](double elapsed, std::int64_t calls, std::int64_t failures) {
      err << "soak: " << static_cast<int>(elapsed) << " s, " << calls << " calls, " << failures << " failures\n" << std::flush;
    };
  }
  const soak::SoakReport report = soak::run_soak(options);
  out << (json ? soak::format_report_json(report) : soak::format_report(report));
  return report.passed() ? kExitOk : kExitError;
}

int bench_main(const CommandArgs& words, std::ostream& out, std::ostream& err) {
  Request r;
  CommandLine command_line(kAbout, kFooter);
  add_flags(command_line, r);
  if (!command_line.parse(words, out)) return kExitOk;  // --help
  if (r.soak_seconds) return soak_main(command_line, r, out, err);
  if (r.seed) throw UsageError("--seed goes with --soak");
  r.selection.threads = thread_counts(r);
  const std::vector<BenchCase> cases = bench::select_cases(r.selection);
  const std::vector<bench::ModuleCase> module_cases = bench::select_module_cases(r.selection);
  const std::vector<bench::VarlenCase> varlen_cases = bench::select_varlen_cases(r.selection);
  const std::vector<bench::BatchDecodeCase> batch_cases = bench::select_batch_decode_cases(r.selection);
  const bench::RunInfo info = run_info(r);
  const bool memory_selected = bench::matches_filter(bench::peak_memory_case(1).name, r.selection.filter);
  if (cases.empty() && module_cases.empty() && varlen_cases.empty() && batch_cases.empty() && !memory_selected) {
    throw UsageError("--filter '" + r.selection.filter + "' matches no case (names look like fwd_f32_n1024_d64_causal, "
                     "bwd_bf16_n1024_d64, decode_bf16_m4096_d128, mha_prefill_f32_n2048_e4096, "
                     "mha_decode_f32_m4096_e4096_paged, varlen_f32_b16_mixed_d128, decode_batch_int4_b32_mixed_d128, "
                     "peak_memory_n65536_d64)");
  }

  bench::Report report(out, r.json);
  // A bar on the terminal's stderr when the report goes elsewhere (a file, a pipe); on a terminal
  // the report's own rows, one per case, show the progress, and a bar would interleave with them.
  std::optional<ProgressBar> bar;
  if (!is_terminal(out)) {
    bar.emplace(err, "attnkit bench",
                static_cast<double>(cases.size() + module_cases.size() + varlen_cases.size() + batch_cases.size() + 1));
  }
  const auto advance = [&] {
    if (bar) bar->advance(1);
  };
  report.machine(info, bench::measure_ceilings({r.selection.threads, r.repeats(), r.copy_mib}));
  advance();
  {
    bench::CaseRunner runner({{r.repeats(), r.budget_seconds()}, r.kernel, !r.no_naive, !r.no_openblas});
    for (const BenchCase& c : cases) {
      report.result(runner.run(c));
      advance();
    }
  }  // the runner's cache evictor is freed before the module runner makes its own
  bench::ModuleRunner modules({{r.repeats(), r.budget_seconds()}, r.kernel});
  for (const bench::ModuleCase& c : module_cases) {
    report.module_result(modules.run(c));
    advance();
  }
  for (const bench::VarlenCase& c : varlen_cases) {
    report.varlen_result(bench::run_varlen_case(c, {r.repeats(), r.budget_seconds()}, r.kernel));
    advance();
  }
  {
    bench::BatchDecodeRunner batches({r.repeats(), r.budget_seconds()}, r.kernel);
    for (const bench::BatchDecodeCase& c : batch_cases) {
      report.batch_decode_result(batches.run(c));
      advance();
    }
  }
  if (bar) bar->finish();
  if (auto memory = peak_memory(r, info)) report.peak_memory(*memory);
  return kExitOk;
}

}  // namespace

int bench_command(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  return guarded("bench", err, [&] { return bench_main(args, out, err); });
}

}  // namespace attnkit::cli
