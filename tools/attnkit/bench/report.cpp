// Table and JSON Lines output of the benchmark.
#include "bench/report.hpp"

#include <cstdio>
#include <ostream>

#include "attnkit/targets.hpp"
#include "bench/json_line.hpp"

namespace attnkit::bench {

namespace {

constexpr double kGiga = 1e9;
constexpr double kPercent = 100.0;
constexpr double kMiB = 1024.0 * 1024.0;

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

// A table cell: the figure in `pattern`, or "-" when it was not measured.
std::string cell(const std::optional<double>& value, const char* pattern) {
  return value ? format(pattern, *value) : "-";
}

std::string pad_left(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}
std::string pad_right(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::optional<double> ratio(const std::optional<double>& numerator, const std::optional<double>& denominator) {
  if (!numerator || !denominator || *denominator <= 0) return std::nullopt;
  return *numerator / *denominator;
}

std::optional<double> percent(const std::optional<double>& fraction) {
  return fraction ? std::optional<double>(*fraction * kPercent) : std::nullopt;
}

std::optional<double> median_of(const std::optional<Timing>& t) {
  return t ? std::optional<double>(t->median_seconds) : std::nullopt;
}

// Column widths of the case tables.
constexpr std::size_t kNameWidth = 26;
constexpr std::size_t kNumberWidth = 10;
constexpr std::size_t kThreadsWidth = 8;

// The heading of a case table.
std::string section_title(CaseKind kind) {
  switch (kind) {
    case CaseKind::forward:
      return "forward: batch 1, 8 heads, n = m; GFLOP/s counts 4·n·m·d per head, halved for causal\n";
    case CaseKind::backward:
      return "backward: the forward's shapes; GFLOP/s counts 2.5 × the forward's FLOPs; vs fwd is its GFLOP/s over\n"
             "the forward's on the same case in this run; the baselines are forward-only\n";
    case CaseKind::decode:
      return "decode: 1 query per head, 32 query heads over 8 KV heads; GB/s counts K and V bytes read once\n";
  }
  return "";
}

// Column widths of the module tables: decode names carry the cache layout.
constexpr std::size_t kModuleNameWidth = 40;
constexpr std::size_t kShareWidth = 12;

std::string layer_text(const ModuleLayer& l) {
  return "layer: E = " + std::to_string(l.embed_dim) + ", " + std::to_string(l.num_heads) + " heads over " +
         std::to_string(l.num_kv_heads) + " KV heads, d = " + std::to_string(l.head_dim) +
         ", f32 weights, no bias, RoPE\n";
}

// The heading of a module table: the layer's sizes, what the figures count and what attn share is.
std::string module_title(const ModuleCase& c) {
  if (c.kind == ModuleKind::prefill) {
    return "module prefill: MultiHeadAttention::forward_cached of n tokens into an empty sequence "
           "(contiguous cache)\n" +
           layer_text(c.layer) +
           "GFLOP/s counts the projections 2·n·E·(H + 2·Hkv)·d + 2·n·H·d·E and causal attention 2·n²·d "
           "per head;\nattn share: attnkit::attend alone (n queries over the n cached tokens) over the module's "
           "time\n";
  }
  return "module decode: one token per MultiHeadAttention::forward_cached step after m cached tokens (paged:\n"
         "blocks of " + std::to_string(kPagedBlockSize) + " tokens), the caches flushed before each step\n" +
         layer_text(c.layer) +
         "GB/s counts the weights, E·(H + 2·Hkv)·d + H·d·E, and K and V of the m tokens, f32, read once;\n"
         "attn share: attnkit::attend alone (1 query over the m cached tokens) over the step's time\n";
}

// The JSON "kind" of a case line.
const char* kind_name(CaseKind kind) {
  switch (kind) {
    case CaseKind::forward: return "forward";
    case CaseKind::backward: return "backward";
    case CaseKind::decode: return "decode";
  }
  return "";
}

// `key`: the value, or null when it was not measured.
void optional_number(JsonLine& line, std::string_view key, const std::optional<double>& value) {
  if (value) {
    line.number(key, *value);
  } else {
    line.null(key);
  }
}

// `key`: the text, or null when there is none.
void optional_text(JsonLine& line, std::string_view key, const std::optional<std::string>& value) {
  if (value) {
    line.text(key, *value);
  } else {
    line.null(key);
  }
}

std::string cpu_text(const CpuVectorFeatures& cpu) {
  return std::string(cpu.avx2_fma ? "AVX2+FMA" : "no AVX2+FMA") + (cpu.avx512f ? ", AVX-512F" : ", no AVX-512F");
}

std::string per_thread_count(const std::vector<int>& threads, const std::vector<double>& values, const char* unit) {
  std::string text;
  for (std::size_t i = 0; i < threads.size() && i < values.size(); ++i) {
    text += "  " + std::to_string(threads[i]) + (threads[i] == 1 ? " thread " : " threads ") +
            format("%.1f ", values[i]) + unit;
  }
  return text;
}

// The decode columns of both tables: GB/s and its fractions of the copy and read bandwidths.
std::string bandwidth_headings() {
  return pad_left("GB/s", kNumberWidth) + pad_left("of bandw.", kNumberWidth) + pad_left("of read", kNumberWidth);
}
std::string bandwidth_cells(const std::optional<double>& gbytes_per_s, const std::optional<double>& of_copy,
                            const std::optional<double>& of_read) {
  return pad_left(cell(gbytes_per_s, "%.1f"), kNumberWidth) + pad_left(cell(percent(of_copy), "%.1f%%"), kNumberWidth) +
         pad_left(cell(percent(of_read), "%.1f%%"), kNumberWidth);
}

}  // namespace

Figures figures_of(const CaseResult& r, const Ceilings& ceilings) {
  const BenchCase& c = r.bench_case;
  const double seconds = r.timing.median_seconds;
  Figures f;
  f.gflops = c.flops() / seconds / kGiga;
  f.fraction_of_peak = ratio(f.gflops, ceilings.fma_for(c.threads));
  if (c.dtype == DType::bf16) {
    f.fraction_of_bf16_peak = ratio(f.gflops, ceilings.bf16_for(c.threads));
    f.fraction_of_amx_peak = ratio(f.gflops, ceilings.amx_for(c.threads));
  }
  // f16 rows that ran on f16 tiles (amx_fp16): of the same tile rate, which the ceilings time with
  // tdpbf16ps only.
  const std::optional<Target> target = r.target ? target_from_name(*r.target) : std::nullopt;
  if (c.dtype == DType::f16 && target && target_uses_f16_tiles(*target)) {
    f.fraction_of_amx_peak = ratio(f.gflops, ceilings.amx_for(c.threads));
  }
  if (c.kind == CaseKind::decode) {
    f.gbytes_per_s = c.kv_bytes() / seconds / kGiga;
    f.fraction_of_bandwidth = ratio(f.gbytes_per_s, ceilings.copy_for(c.threads));
    f.fraction_of_read_bandwidth = ratio(f.gbytes_per_s, ceilings.read_for(c.threads));
  }
  f.speedup_vs_naive = ratio(median_of(r.naive), seconds);
  f.speedup_vs_openblas = ratio(median_of(r.openblas), seconds);
  if (r.forward && r.forward->median_seconds > 0) {
    f.forward_gflops = c.forward_counterpart().flops() / r.forward->median_seconds / kGiga;
    f.vs_forward = ratio(f.gflops, f.forward_gflops);
  }
  return f;
}

ModuleFigures figures_of(const ModuleResult& r, const Ceilings& ceilings) {
  const ModuleCase& c = r.module_case;
  const double seconds = r.timing.median_seconds;
  ModuleFigures f;
  f.tokens_per_second = static_cast<double>(c.tokens) / seconds;
  f.gflops = c.flops() / seconds / kGiga;
  f.fraction_of_peak = ratio(f.gflops, ceilings.fma_for(c.threads));
  if (c.kind == ModuleKind::decode) {
    f.gbytes_per_s = c.bytes() / seconds / kGiga;
    f.fraction_of_bandwidth = ratio(f.gbytes_per_s, ceilings.copy_for(c.threads));
    f.fraction_of_read_bandwidth = ratio(f.gbytes_per_s, ceilings.read_for(c.threads));
  }
  f.attention_share = r.attention.median_seconds / seconds;
  return f;
}

void Report::machine(const RunInfo& info, const Ceilings& ceilings) {
  ceilings_ = ceilings;
  if (json_) {
    json_machine(info);
  } else {
    text_machine(info);
  }
  out_.flush();
}

void Report::text_machine(const RunInfo& info) const {
  const Ceilings& c = ceilings_;
  out_ << "attnkit bench (attnkit " << info.attnkit_version << "): timing the " << info.kernel << " kernel\n";
  if (!info.fast_note.empty()) out_ << "  Kernel::fast is unavailable (\"" << info.fast_note << "\")\n";
  out_ << "  hardware threads: " << info.hardware_threads << "; each time is the median of up to " << info.repeats
       << " timed calls after a warm-up\n\n";
  out_ << "machine ceilings, measured now\n";
  out_ << "  f32 FMA peak (the best loop below; \"of peak\" is of it):";
  for (std::size_t i = 0; i < c.threads.size() && i < c.fma_gflops.size(); ++i) {
    out_ << "  " << c.threads[i] << (c.threads[i] == 1 ? " thread " : " threads ") << format("%.1f", c.fma_gflops[i])
         << " GFLOP/s" << (i < c.fma_best_isa.size() ? " (" + c.fma_best_isa[i] + ")" : "");
  }
  out_ << '\n';
  for (const FmaLoopPeak& loop : c.fma_loops) {
    out_ << "    " << loop.isa << " loop:";
    if (loop.gflops) {
      out_ << per_thread_count(c.threads, *loop.gflops, "GFLOP/s") << '\n';
    } else {
      out_ << " not measured: " << loop.note << '\n';
    }
  }
  if (c.bf16_gflops) {
    out_ << "  bf16 dot peak (vdpbf16ps):" << per_thread_count(c.threads, *c.bf16_gflops, "GFLOP/s") << '\n';
  } else {
    out_ << "  bf16 dot peak: not available: " << c.bf16_note << '\n';
  }
  if (c.amx_bf16_gflops) {
    out_ << "  bf16 tile peak (AMX tdpbf16ps; \"of AMX\" of bf16 cases is of it, and of f16 cases on f16 tiles):"
         << per_thread_count(c.threads, *c.amx_bf16_gflops, "GFLOP/s") << '\n';
  } else {
    out_ << "  bf16 tile peak (AMX): not available: " << c.amx_bf16_note << '\n';
  }
  out_ << "  copy bandwidth (2 x " << format("%.0f", static_cast<double>(c.copy_bytes) / kMiB)
       << " MiB, read + write bytes):" << per_thread_count(c.threads, c.copy_gbytes_per_s, "GB/s") << '\n';
  out_ << "  read bandwidth (" << format("%.0f", static_cast<double>(c.copy_bytes) / kMiB)
       << " MiB, bytes read):" << per_thread_count(c.threads, c.read_gbytes_per_s, "GB/s") << '\n';
  out_ << "  OpenBLAS: " << info.openblas.description << '\n';
  const BlasCoreVerdict& v = info.blas_verdict;
  out_ << "  OpenBLAS core: " << (info.blas_core.empty() ? "(unnamed)" : info.blas_core) << " ("
       << blas_core_kind_name(v.kind) << " kernels) on a CPU with " << cpu_text(info.cpu) << ": "
       << (v.generic ? "a GENERIC core" : "not a generic core") << '\n';
  if (v.generic) {
    out_ << "  WARNING: " << v.message << ". The OpenBLAS baseline (vs BLAS) and the module's projections (mha_ "
         << "cases) are slowed by it; measure with  env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=" << v.coretype
         << " attnkit bench\n";
  }
  for (const std::string& note : info.notes) out_ << "  note: " << note << '\n';
}

void Report::json_machine(const RunInfo& info) const {
  const Ceilings& c = ceilings_;
  JsonLine line;
  line.text("kind", "ceilings").text("name", "ceilings").text("attnkit_version", info.attnkit_version);
  line.text("kernel", info.kernel).text("fast_kernel_note", info.fast_note);
  line.integer("hardware_threads", info.hardware_threads).integers("threads", c.threads);
  line.text("fma_isa", c.fma_isa).numbers("fma_gflops", c.fma_gflops).texts("fma_best_isa", c.fma_best_isa);
  for (const FmaLoopPeak& loop : c.fma_loops) {
    const std::string key = "fma_" + loop.key + "_gflops";
    if (loop.gflops) {
      line.numbers(key, *loop.gflops);
    } else {
      line.null(key).text("fma_" + loop.key + "_note", loop.note);
    }
  }
  if (c.bf16_gflops) {
    line.numbers("bf16_gflops", *c.bf16_gflops);
  } else {
    line.null("bf16_gflops").text("bf16_note", c.bf16_note);
  }
  if (c.amx_bf16_gflops) {
    line.numbers("amx_bf16_gflops", *c.amx_bf16_gflops);
  } else {
    line.null("amx_bf16_gflops").text("amx_bf16_note", c.amx_bf16_note);
  }
  line.integer("copy_bytes", static_cast<std::int64_t>(c.copy_bytes)).numbers("copy_gbytes_per_s", c.copy_gbytes_per_s);
  line.numbers("read_gbytes_per_s", c.read_gbytes_per_s);
  line.boolean("openblas", info.openblas.available).text("openblas_info", info.openblas.description);
  line.text("openblas_core", info.openblas.core);
  line.boolean("cpu_avx2_fma", info.cpu.avx2_fma).boolean("cpu_avx512f", info.cpu.avx512f);
  line.text("blas_core", info.blas_core).text("blas_core_kind", blas_core_kind_name(info.blas_verdict.kind));
  line.boolean("blas_core_generic", info.blas_verdict.generic);
  if (info.blas_verdict.generic) {
    line.text("blas_coretype_advice", info.blas_verdict.coretype).text("blas_core_warning", info.blas_verdict.message);
  } else {
    line.null("blas_coretype_advice").null("blas_core_warning");
  }
  out_ << line.str() << '\n';
}

void Report::result(const CaseResult& r) {
  const Figures f = figures_of(r, ceilings_);
  if (json_) {
    json_result(r, f);
  } else {
    text_result(r, f);
  }
  out_.flush();
}

void Report::text_result(const CaseResult& r, const Figures& f) {
  const BenchCase& c = r.bench_case;
  const bool decode = c.kind == CaseKind::decode;
  const bool backward = c.kind == CaseKind::backward;
  // Only where the CPU has tiles, so that the tables elsewhere keep their width.
  const bool amx = ceilings_.amx_bf16_gflops.has_value();
  section(section_title(c.kind) + pad_right("case", kNameWidth) + pad_left("threads", kThreadsWidth) +
          pad_left("seconds", kNumberWidth) + pad_left("GFLOP/s", kNumberWidth) + pad_left("of peak", kNumberWidth) +
          (amx ? pad_left("of AMX", kNumberWidth) : "") + (decode ? bandwidth_headings() : "") +
          (backward ? pad_left("vs fwd", kNumberWidth) : "") + pad_left("vs naive", kNumberWidth) +
          pad_left("vs BLAS", kNumberWidth) + "  kernel  target\n");
  out_ << pad_right(c.name, kNameWidth) << pad_left(std::to_string(c.threads), kThreadsWidth)
       << pad_left(format("%.4g", r.timing.median_seconds), kNumberWidth)
       << pad_left(format("%.1f", f.gflops), kNumberWidth)
       << pad_left(cell(percent(f.fraction_of_peak), "%.1f%%"), kNumberWidth);
  if (amx) out_ << pad_left(cell(percent(f.fraction_of_amx_peak), "%.1f%%"), kNumberWidth);
  if (decode) {
    out_ << bandwidth_cells(f.gbytes_per_s, f.fraction_of_bandwidth, f.fraction_of_read_bandwidth);
  }
  if (backward) out_ << pad_left(cell(f.vs_forward, "%.2f"), kNumberWidth);
  out_ << pad_left(cell(f.speedup_vs_naive, "%.2fx"), kNumberWidth)
       << pad_left(cell(f.speedup_vs_openblas, "%.2fx"), kNumberWidth) << "  " << r.kernel << "  "
       << r.target.value_or("-") << '\n';
}

void Report::json_result(const CaseResult& r, const Figures& f) const {
  const BenchCase& c = r.bench_case;
  const AttentionShape& s = c.shape;
  const bool backward = c.kind == CaseKind::backward;
  JsonLine line;
  line.text("kind", kind_name(c.kind)).text("direction", backward ? "backward" : "forward").text("name", c.name);
  line.integer("batch", s.batch).integer("heads", s.heads).integer("kv_heads", s.kv_heads);
  line.integer("n", s.n).integer("m", s.m).integer("d", s.d_k).boolean("causal", s.causal);
  line.text("dtype", dtype_name(c.dtype)).integer("threads", c.threads);
  line.number("seconds", r.timing.median_seconds).integer("runs", static_cast<std::int64_t>(r.timing.samples.size()));
  line.number("flops", c.flops()).number("gflops", f.gflops);
  optional_number(line, "fraction_of_peak", f.fraction_of_peak);
  if (f.fraction_of_bf16_peak) line.number("fraction_of_bf16_peak", *f.fraction_of_bf16_peak);
  if (f.fraction_of_amx_peak) line.number("fraction_of_amx_peak", *f.fraction_of_amx_peak);
  line.text("kernel", r.kernel);
  optional_text(line, "target", r.target);
  if (f.gbytes_per_s) line.number("gbytes_per_s", *f.gbytes_per_s);
  if (c.kind == CaseKind::decode) {
    optional_number(line, "fraction_of_bandwidth", f.fraction_of_bandwidth);
    optional_number(line, "fraction_of_read_bandwidth", f.fraction_of_read_bandwidth);
  }
  if (backward) {
    optional_number(line, "forward_seconds", median_of(r.forward));
    optional_number(line, "forward_gflops", f.forward_gflops);
    optional_number(line, "vs_forward", f.vs_forward);
    line.null("speedup_vs_naive").null("speedup_vs_openblas").text("openblas_note", r.openblas_note);
    out_ << line.str() << '\n';
    return;
  }
  if (r.naive) line.number("naive_seconds", r.naive->median_seconds).number("speedup_vs_naive", *f.speedup_vs_naive);
  if (r.openblas) {
    line.number("openblas_seconds", r.openblas->median_seconds).number("speedup_vs_openblas", *f.speedup_vs_openblas);
  } else {
    line.text("openblas_note", r.openblas_note);
  }
  out_ << line.str() << '\n';
}

void Report::section(const std::string& heading) {
  if (heading == section_) return;
  section_ = heading;
  out_ << '\n' << heading;
}

void Report::module_result(const ModuleResult& r) {
  const ModuleFigures f = figures_of(r, ceilings_);
  if (json_) {
    json_module_result(r, f);
  } else {
    text_module_result(r, f);
  }
  out_.flush();
}

void Report::text_module_result(const ModuleResult& r, const ModuleFigures& f) {
  const ModuleCase& c = r.module_case;
  const bool decode = c.kind == ModuleKind::decode;
  section(module_title(c) + pad_right("case", kModuleNameWidth) + pad_left("threads", kThreadsWidth) +
          pad_left("seconds", kNumberWidth) + pad_left("tokens/s", kNumberWidth) +
          (decode ? bandwidth_headings() : pad_left("GFLOP/s", kNumberWidth) + pad_left("of peak", kNumberWidth)) +
          pad_left("attn share", kShareWidth) + "  kernel  target\n");
  out_ << pad_right(c.name, kModuleNameWidth) << pad_left(std::to_string(c.threads), kThreadsWidth)
       << pad_left(format("%.4g", r.timing.median_seconds), kNumberWidth)
       << pad_left(format("%.1f", f.tokens_per_second), kNumberWidth);
  if (decode) {
    out_ << bandwidth_cells(f.gbytes_per_s, f.fraction_of_bandwidth, f.fraction_of_read_bandwidth);
  } else {
    out_ << pad_left(format("%.1f", f.gflops), kNumberWidth)
         << pad_left(cell(percent(f.fraction_of_peak), "%.1f%%"), kNumberWidth);
  }
  out_ << pad_left(format("%.1f%%", f.attention_share * kPercent), kShareWidth) << "  " << r.kernel << "  "
       << r.target.value_or("-") << '\n';
}

void Report::json_module_result(const ModuleResult& r, const ModuleFigures& f) const {
  const ModuleCase& c = r.module_case;
  const ModuleLayer& l = c.layer;
  const bool decode = c.kind == ModuleKind::decode;
  JsonLine line;
  line.text("kind", decode ? "mha_decode" : "mha_prefill").text("direction", "forward").text("name", c.name);
  line.integer("batch", 1).integer("embed_dim", l.embed_dim).integer("heads", l.num_heads);
  line.integer("kv_heads", l.num_kv_heads).integer("d", l.head_dim);
  line.integer("n", c.tokens).integer("m", decode ? c.context : c.tokens).boolean("causal", true);
  line.text("dtype", dtype_name(c.cache_dtype)).text("layout", layout_name(c.layout));
  if (c.layout == KVCacheLayout::paged) line.integer("block_size", kPagedBlockSize);
  line.integer("threads", c.threads);
  line.number("seconds", r.timing.median_seconds).integer("runs", static_cast<std::int64_t>(r.timing.samples.size()));
  line.number("tokens_per_second", f.tokens_per_second);
  line.number("flops", c.flops()).number("gflops", f.gflops);
  optional_number(line, "fraction_of_peak", f.fraction_of_peak);
  line.text("kernel", r.kernel);
  optional_text(line, "target", r.target);
  if (decode) {
    line.number("bytes", c.bytes()).number("gbytes_per_s", *f.gbytes_per_s);
    optional_number(line, "fraction_of_bandwidth", f.fraction_of_bandwidth);
    optional_number(line, "fraction_of_read_bandwidth", f.fraction_of_read_bandwidth);
  }
  line.number("attention_seconds", r.attention.median_seconds).number("attention_share", f.attention_share);
  out_ << line.str() << '\n';
}

void Report::peak_memory(const PeakMemoryResult& r) {
  if (json_) {
    JsonLine line;
    line.text("kind", "peak_memory").text("name", r.name).integer("n", r.n).integer("m", r.m).integer("d", r.d);
    line.integer("heads", 1).integer("threads", r.threads).integer("score_matrix_bytes", r.score_matrix_bytes);
    if (r.skipped) {
      line.text("skipped", *r.skipped);
    } else {
      line.text("kernel", r.kernel).number("seconds", r.seconds).integer("extra_bytes", r.extra_bytes);
      line.integer("operand_bytes", r.operand_bytes);
    }
    out_ << line.str() << '\n';
  } else {
    out_ << "\npeak memory, n = m = " << r.n << ", d = " << r.d << ", one head, " << r.threads << " threads: ";
    if (r.skipped) {
      out_ << "skipped: " << *r.skipped << '\n';
    } else {
      out_ << format("%.1f MiB", static_cast<double>(r.extra_bytes) / kMiB) << " beyond q, k, v and out ("
           << format("%.1f MiB", static_cast<double>(r.operand_bytes) / kMiB) << "; the n×m scores would be "
           << format("%.0f MiB", static_cast<double>(r.score_matrix_bytes) / kMiB) << "), " << r.kernel << " kernel, "
           << format("%.3g s", r.seconds) << '\n';
    }
  }
  out_.flush();
}

namespace {

constexpr std::size_t kVarlenNameWidth = 36;

std::string lengths_text(const std::vector<std::int64_t>& lengths) {
  std::string text;
  for (std::int64_t l : lengths) text += (text.empty() ? "" : ",") + std::to_string(l);
  return text;
}

}  // namespace

VarlenFigures figures_of(const VarlenResult& r, const Ceilings& ceilings) {
  const VarlenCase& c = r.varlen_case;
  VarlenFigures f;
  f.gflops = c.flops() / r.packed.median_seconds / kGiga;
  f.fraction_of_peak = ratio(f.gflops, ceilings.fma_for(c.threads));
  f.equal_gflops = c.equal_flops() / r.equal.median_seconds / kGiga;
  f.rate_vs_equal = f.gflops / f.equal_gflops;
  f.time_vs_padded = r.packed.median_seconds / r.padded.median_seconds;
  f.work_vs_padded = c.flops() / c.padded_flops();
  f.time_vs_masked = r.packed.median_seconds / r.masked.median_seconds;
  return f;
}

void Report::varlen_result(const VarlenResult& r) {
  const VarlenCase& c = r.varlen_case;
  VarlenFigures f = figures_of(r, ceilings_);
  if (c.threads == 1) one_thread_seconds_[c.name] = r.packed.median_seconds;
  if (auto it = one_thread_seconds_.find(c.name); it != one_thread_seconds_.end() && c.threads != 1) {
    f.vs_one_thread = it->second / r.packed.median_seconds;
  }
  if (json_) {
    json_varlen_result(r, f);
  } else {
    text_varlen_result(r, f);
  }
  out_.flush();
}

void Report::text_varlen_result(const VarlenResult& r, const VarlenFigures& f) {
  const VarlenCase& c = r.varlen_case;
  section("packed variable-length batches (varlen_forward): " + std::to_string(c.lengths.size()) +
          " sequences, queries = keys, lengths " + lengths_text(c.lengths) + " (seed " + std::to_string(c.seed) + "), " +
          std::to_string(c.heads) + " heads, d = " + std::to_string(c.d) +
          ";\nrate/equal: GFLOP/s over those of forward on an equal-length batch of the same work (" +
          std::to_string(c.lengths.size()) + " x " + std::to_string(c.equal_length()) +
          "); time/padded: seconds over those of forward\non the sequences padded to the longest (" +
          std::to_string(c.longest()) + ") with key_lengths, and work/padded the same of the FLOPs that call must do (its\n"
          "padded queries see their keys), the bound on time/padded; time/masked: over padding with a bool key-padding\n"
          "mask [B, 1, 1, Lmax] instead, which no kernel can skip; x 1 thread: the 1-thread seconds over these\n" +
          pad_right("case", kVarlenNameWidth) + pad_left("threads", kThreadsWidth) + pad_left("seconds", kNumberWidth) +
          pad_left("GFLOP/s", kNumberWidth) + pad_left("of peak", kNumberWidth) + pad_left("rate/equal", kNumberWidth + 2) +
          pad_left("time/padded", kNumberWidth + 2) + pad_left("work/padded", kNumberWidth + 2) +
          pad_left("time/masked", kNumberWidth + 2) + pad_left("x 1 thread", kNumberWidth + 2) + "  kernel  target\n");
  out_ << pad_right(c.name, kVarlenNameWidth) << pad_left(std::to_string(c.threads), kThreadsWidth)
       << pad_left(format("%.4g", r.packed.median_seconds), kNumberWidth) << pad_left(format("%.1f", f.gflops), kNumberWidth)
       << pad_left(cell(percent(f.fraction_of_peak), "%.1f%%"), kNumberWidth)
       << pad_left(format("%.3f", f.rate_vs_equal), kNumberWidth + 2)
       << pad_left(format("%.3f", f.time_vs_padded), kNumberWidth + 2)
       << pad_left(format("%.3f", f.work_vs_padded), kNumberWidth + 2)
       << pad_left(format("%.3f", f.time_vs_masked), kNumberWidth + 2)
       << pad_left(cell(f.vs_one_thread, "%.2fx"), kNumberWidth + 2) << "  " << r.kernel << "  " << r.target.value_or("-")
       << '\n';
}

void Report::json_varlen_result(const VarlenResult& r, const VarlenFigures& f) const {
  const VarlenCase& c = r.varlen_case;
  JsonLine line;
  line.text("kind", "varlen").text("direction", "forward").text("name", c.name);
  line.integer("batch", static_cast<std::int64_t>(c.lengths.size())).integer("heads", c.heads).integer("kv_heads", c.heads);
  line.integer("d", c.d).boolean("causal", c.causal).text("dtype", "f32").integer("threads", c.threads);
  std::vector<double> lengths(c.lengths.begin(), c.lengths.end());
  line.numbers("lengths", lengths).integer("lengths_seed", c.seed);
  line.integer("equal_length", c.equal_length()).integer("padded_length", c.longest());
  line.number("seconds", r.packed.median_seconds).integer("runs", static_cast<std::int64_t>(r.packed.samples.size()));
  line.number("flops", c.flops()).number("gflops", f.gflops);
  optional_number(line, "fraction_of_peak", f.fraction_of_peak);
  line.number("equal_seconds", r.equal.median_seconds).number("equal_gflops", f.equal_gflops);
  line.number("rate_vs_equal", f.rate_vs_equal);
  line.number("padded_seconds", r.padded.median_seconds).number("time_vs_padded", f.time_vs_padded);
  line.number("work_vs_padded", f.work_vs_padded);
  line.number("masked_seconds", r.masked.median_seconds).number("time_vs_masked", f.time_vs_masked);
  optional_number(line, "speedup_vs_one_thread", f.vs_one_thread);
  line.text("kernel", r.kernel);
  optional_text(line, "target", r.target);
  out_ << line.str() << '\n';
}

// ---- batched decoding ----

namespace {

constexpr std::size_t kBatchDecodeNameWidth = 36;

std::string bf16_key(const BatchDecodeCase& c) { return c.group + " t" + std::to_string(c.threads); }

}  // namespace

BatchDecodeFigures figures_of(const BatchDecodeResult& r, const Ceilings& ceilings) {
  const BatchDecodeCase& c = r.batch_case;
  BatchDecodeFigures f;
  f.gflops = c.flops() / r.step.median_seconds / kGiga;
  f.fraction_of_peak = ratio(f.gflops, ceilings.fma_for(c.threads));
  f.gbytes_per_s = c.kv_bytes() / r.step.median_seconds / kGiga;
  f.fraction_of_bandwidth = ratio(f.gbytes_per_s, ceilings.copy_for(c.threads));
  f.fraction_of_read_bandwidth = ratio(f.gbytes_per_s, ceilings.read_for(c.threads));
  return f;
}

void Report::batch_decode_result(const BatchDecodeResult& r) {
  const BatchDecodeCase& c = r.batch_case;
  BatchDecodeFigures f = figures_of(r, ceilings_);
  if (c.dtype == DType::bf16) bf16_step_seconds_[bf16_key(c)] = r.step.median_seconds;
  if (auto it = bf16_step_seconds_.find(bf16_key(c)); it != bf16_step_seconds_.end()) {
    f.speedup_vs_bf16 = it->second / r.step.median_seconds;
  }
  if (json_) {
    json_batch_decode_result(r, f);
  } else {
    text_batch_decode_result(r, f);
  }
  out_.flush();
}

void Report::text_batch_decode_result(const BatchDecodeResult& r, const BatchDecodeFigures& f) {
  const BatchDecodeCase& c = r.batch_case;
  section("batched decoding (attend over a paged cache, blocks of " + std::to_string(c.block_size) + " tokens): " +
          std::to_string(c.lengths.size()) + " sequences of " + lengths_text(c.lengths) + " tokens (seed " +
          std::to_string(c.seed) + "), one query each, " + std::to_string(c.heads) + " query heads over " +
          std::to_string(c.kv_heads) + " KV heads;\nGB/s: bytes of K and V over the step's seconds, caches evicted before "
          "each step; vs bf16: the bf16 cache's step seconds over these\n" +
          pad_right("case", kBatchDecodeNameWidth) + pad_left("threads", kThreadsWidth) + pad_left("seconds", kNumberWidth) +
          bandwidth_headings() + pad_left("vs bf16", kNumberWidth) + "  kernel  target\n");
  out_ << pad_right(c.name, kBatchDecodeNameWidth) << pad_left(std::to_string(c.threads), kThreadsWidth)
       << pad_left(format("%.4g", r.step.median_seconds), kNumberWidth)
       << bandwidth_cells(f.gbytes_per_s, f.fraction_of_bandwidth, f.fraction_of_read_bandwidth)
       << pad_left(cell(f.speedup_vs_bf16, "%.2fx"), kNumberWidth) << "  " << r.kernel << "  " << r.target.value_or("-")
       << '\n';
}

void Report::json_batch_decode_result(const BatchDecodeResult& r, const BatchDecodeFigures& f) const {
  const BatchDecodeCase& c = r.batch_case;
  JsonLine line;
  line.text("kind", "decode_batch").text("direction", "forward").text("name", c.name);
  line.integer("batch", static_cast<std::int64_t>(c.lengths.size())).integer("heads", c.heads).integer("kv_heads", c.kv_heads);
  line.integer("d", c.d).text("dtype", std::string(dtype_name(c.dtype))).integer("threads", c.threads);
  line.integer("block_size", c.block_size);
  std::vector<double> lengths(c.lengths.begin(), c.lengths.end());
  line.numbers("lengths", lengths).integer("lengths_seed", c.seed).integer("tokens", c.tokens());
  line.number("seconds", r.step.median_seconds).integer("runs", static_cast<std::int64_t>(r.step.samples.size()));
  line.number("flops", c.flops()).number("gflops", f.gflops);
  optional_number(line, "fraction_of_peak", f.fraction_of_peak);
  line.number("kv_bytes", c.kv_bytes()).number("gbytes_per_s", f.gbytes_per_s);
  optional_number(line, "fraction_of_bandwidth", f.fraction_of_bandwidth);
  optional_number(line, "fraction_of_read_bandwidth", f.fraction_of_read_bandwidth);
  optional_number(line, "speedup_vs_bf16", f.speedup_vs_bf16);
  line.text("kernel", r.kernel);
  optional_text(line, "target", r.target);
  out_ << line.str() << '\n';
}

}  // namespace attnkit::bench
