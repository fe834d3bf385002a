#include "soak/soak.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"
#include "attnkit/targets.hpp"
#include "soak/compare.hpp"
#include "soak/random_call.hpp"

namespace attnkit::cli::soak {

namespace {

using Clock = std::chrono::steady_clock;

// The base bounds, per dtype of the inputs and outputs; each call adds kLogitRounding · L for the
// float32 rounding of its logits (soak.hpp). The fast kernel computes in float32; bf16 and f16
// outputs add their own rounding (2^-9 and 2^-12 relative to |out| ≤ max|V|/(1 − p)). What that
// rounding moves the gradients by through the backward's D = rowsum(dO ∘ O) grows with the rows a key
// gathers, so the reference's gradients are moved to the stored output (move_to_stored_output) rather
// than the bound widened. The largest errors of long runs
// on these random inputs use a fraction of them (docs/guarantees.md lists both), so a real
// regression, not rounding, trips them.
struct Bounds {
  double forward, lse, backward;
};
Bounds bounds_for(DType dtype) {
  switch (dtype) {
    case DType::bf16: return {2e-2, 5e-5, 4e-2};
    case DType::f16: return {4e-3, 5e-5, 2e-3};
    default: return {1e-5, 1e-5, 2e-5};
  }
}

constexpr DType kSoakDTypes[] = {DType::f32, DType::bf16, DType::f16};

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

// Counts, errors and failures of the run so far.
class Tally {
 public:
  explicit Tally(SoakReport& report) : report_(report) {
    for (DType d : kSoakDTypes) {
      const Bounds b = bounds_for(d);
      DTypeErrors e;
      e.dtype = d;
      e.forward_bound = b.forward;
      e.lse_bound = b.lse;
      e.backward_bound = b.backward;
      report_.errors.push_back(e);
    }
  }

  void fail(const std::string& what) {
    ++report_.failures;
    if (report_.first_failures.size() < kMaxReportedFailures) report_.first_failures.push_back(what);
  }

  // Records an error against its call's bound (the base bound plus kLogitRounding · logits, the
  // call's largest |logit|); a breach is a failure naming the call.
  void error(DType dtype, ErrorStat DTypeErrors::*stat, double DTypeErrors::*base, double logits, double error,
             const char* what, const std::string& call) {
    DTypeErrors& e = errors_of(dtype);
    const double bound = e.*base + kLogitRounding * logits;
    (e.*stat).largest = std::max((e.*stat).largest, error);
    (e.*stat).share = std::max((e.*stat).share, error / bound);
    if (!(error <= bound)) {
      fail(call + ": " + what + " error " + number(error) + " exceeds its bound " + number(bound) + " (logits up to " +
           number(logits) + ")");
    }
  }

  void checked(DType dtype) {
    ++report_.checked;
    ++errors_of(dtype).checked;
  }

  SoakReport& report() { return report_; }

 private:
  DTypeErrors& errors_of(DType dtype) {
    for (DTypeErrors& e : report_.errors)
      if (e.dtype == dtype) return e;
    return report_.errors.front();
  }
  SoakReport& report_;
};

DType random_dtype(Random& random) { return kSoakDTypes[random.integer(0, 2)]; }

// One forward call on the fast kernel; when `check`, the float64 reference on the same rounded
// inputs and options, and out, LSE and probabilities compared.
void forward_call(Random& random, bool check, Tally& tally) {
  const DType dtype = random_dtype(random);
  const Shape s = random_shape(random, true);
  const bool sequence_major = random.chance(0.3);
  const Input q = random_input(random, dtype, s.batch, s.q_heads, s.n, s.d_k, sequence_major);
  const Input k = random_input(random, dtype, s.batch, s.kv_heads, s.m, s.d_k, sequence_major);
  const Input v = random_input(random, dtype, s.batch, s.kv_heads, s.m, s.d_v, sequence_major);
  RandomOptions o;
  random_options(random, s, true, o);
  const bool want_probs = s.n * s.m <= 40000 && random.chance(0.2);
  const std::string call = std::string("forward ") + target_name(active_target()) + " " + std::string(dtype_name(dtype)) + " " + describe(s) +
                           (sequence_major ? " sequence-major" : "") + o.text + (want_probs ? " probs" : "");

  Tensor out = poisoned(dtype, {s.batch, s.q_heads, s.n, s.d_v}), lse = poisoned(DType::f32, {s.batch, s.q_heads, s.n});
  std::optional<Tensor> probs;
  if (want_probs) probs = poisoned(dtype, {s.batch, s.q_heads, s.n, s.m});
  forward(q.view, k.view, v.view, out.view(), o.options, {lse.view(), probs ? std::optional<TensorView>(probs->view()) : std::nullopt});
  ++tally.report().forward_calls;
  if (!check) return;

  AttentionOptions reference = o.options;
  reference.kernel = Kernel::reference;
  Tensor out64(DType::f64, {s.batch, s.q_heads, s.n, s.d_v}), lse64(DType::f32, {s.batch, s.q_heads, s.n});
  std::optional<Tensor> probs64;
  if (want_probs) probs64 = Tensor(DType::f64, {s.batch, s.q_heads, s.n, s.m});
  forward(q.exact.view(), k.exact.view(), v.exact.view(), out64.view(), reference,
          {lse64.view(), probs64 ? std::optional<TensorView>(probs64->view()) : std::nullopt});
  tally.checked(dtype);
  const double logits = logit_magnitude(s, q, k, o.options, o.mask);
  const double v_scale = std::max(v.max_abs * o.keep_scale(), 1e-30);
  tally.error(dtype, &DTypeErrors::forward, &DTypeErrors::forward_bound, logits, normalised_error(out, out64, v_scale), "out", call);
  tally.error(dtype, &DTypeErrors::lse, &DTypeErrors::lse_bound, logits, lse_error(lse, lse64), "lse", call);
  if (want_probs) {
    tally.error(dtype, &DTypeErrors::forward, &DTypeErrors::forward_bound, logits, normalised_error(*probs, *probs64, 1.0),
                "probabilities", call);
  }
}

// Forward then backward on the fast kernel; when `check`, the reference's gradients from the same
// rounded inputs compared with dq, dk and dv.
void backward_call(Random& random, bool check, Tally& tally) {
  const DType dtype = random_dtype(random);
  const Shape s = random_shape(random, false);
  const bool sequence_major = random.chance(0.3);
  const Input q = random_input(random, dtype, s.batch, s.q_heads, s.n, s.d_k, sequence_major);
  const Input k = random_input(random, dtype, s.batch, s.kv_heads, s.m, s.d_k, sequence_major);
  const Input v = random_input(random, dtype, s.batch, s.kv_heads, s.m, s.d_v, sequence_major);
  const Input d_out = random_input(random, dtype, s.batch, s.q_heads, s.n, s.d_v, false);
  RandomOptions o;
  random_options(random, s, true, o);
  const std::string call = std::string("backward ") + target_name(active_target()) + " " + std::string(dtype_name(dtype)) + " " + describe(s) +
                           (sequence_major ? " sequence-major" : "") + o.text;

  Tensor out = poisoned(dtype, {s.batch, s.q_heads, s.n, s.d_v}), lse = poisoned(DType::f32, {s.batch, s.q_heads, s.n});
  forward(q.view, k.view, v.view, out.view(), o.options, {lse.view(), std::nullopt});
  Tensor dq = poisoned(dtype, {s.batch, s.q_heads, s.n, s.d_k}), dk = poisoned(dtype, {s.batch, s.kv_heads, s.m, s.d_k}),
         dv = poisoned(dtype, {s.batch, s.kv_heads, s.m, s.d_v});
  backward(q.view, k.view, v.view, out.view(), d_out.view, lse.view(), dq.view(), dk.view(), dv.view(), o.options);
  ++tally.report().backward_calls;
  if (!check) return;

  AttentionOptions reference = o.options;
  reference.kernel = Kernel::reference;
  Tensor out64(DType::f64, {s.batch, s.q_heads, s.n, s.d_v}), lse64(DType::f32, {s.batch, s.q_heads, s.n});
  Tensor probs64(DType::f64, {s.batch, s.q_heads, s.n, s.m});
  forward(q.exact.view(), k.exact.view(), v.exact.view(), out64.view(), reference, {lse64.view(), probs64.view()});
  Tensor dq64(DType::f64, {s.batch, s.q_heads, s.n, s.d_k}), dk64(DType::f64, {s.batch, s.kv_heads, s.m, s.d_k}),
      dv64(DType::f64, {s.batch, s.kv_heads, s.m, s.d_v});
  backward(q.exact.view(), k.exact.view(), v.exact.view(), out64.view(), d_out.exact.view(), lse64.view(), dq64.view(),
           dk64.view(), dv64.view(), reference);
  tally.checked(dtype);
  const double logits = logit_magnitude(s, q, k, o.options, o.mask);
  // The output the backward reads is held to the forward's bound, and the reference's gradients are
  // moved to it: D = rowsum(dO ∘ O) is computed from the output as stored (bf16 or f16 rounded).
  const double v_scale = std::max(v.max_abs * o.keep_scale(), 1e-30);
  tally.error(dtype, &DTypeErrors::forward, &DTypeErrors::forward_bound, logits, normalised_error(out, out64, v_scale), "out", call);
  move_to_stored_output(dq64, dk64, out, out64, d_out.exact, probs64, q.exact, k.exact, call_scale(s, o.options),
                        o.options.softcap);
  // Each gradient by its own size (gradient_error), so a wrong small one cannot hide behind a large one.
  const std::pair<const Tensor*, const Tensor*> pairs[] = {{&dq, &dq64}, {&dk, &dk64}, {&dv, &dv64}};
  const char* names[] = {"dq", "dk", "dv"};
  for (int g = 0; g < 3; ++g) {
    tally.error(dtype, &DTypeErrors::backward, &DTypeErrors::backward_bound, logits,
                gradient_error(*pairs[g].first, *pairs[g].second), names[g], call);
  }
}

// Decoding through a KV cache (contiguous or paged, f32/f16/bf16 storage): new queries over
// sequences of different lengths, the fast kernel reading the blocks in place against the reference
// gathering them.
void attend_call(Random& random, bool check, Tally& tally) {
  KVCacheConfig config;
  config.num_kv_heads = random.integer(1, 3);
  config.head_dim = random.integer(1, 72);
  config.value_dim = random.chance(0.5) ? 0 : random.integer(1, 72);
  config.max_sequences = random.integer(1, 3);
  config.max_sequence_length = random.integer(1, 1800);
  config.layout = random.chance(0.5) ? KVCacheLayout::paged : KVCacheLayout::contiguous;
  config.block_size = std::int64_t{1} << random.integer(3, 6);
  config.dtype = random_dtype(random);
  KVCache cache(config);
  const std::int64_t d_v = config.value_dim == 0 ? config.head_dim : config.value_dim;

  std::vector<KVCache::SequenceId> ids;
  Input key_summary;  // the largest key norm and |value| over every sequence, for the bound
  double value_max = 0.0;
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < config.max_sequences; ++b) {
    const KVCache::SequenceId id = cache.add_sequence();
    const std::int64_t length = random.integer(0, config.max_sequence_length);
    const Input keys = random_input(random, DType::f32, 1, config.num_kv_heads, length, config.head_dim, false);
    const Input values = random_input(random, DType::f32, 1, config.num_kv_heads, length, d_v, false);
    const KVCache::SequenceId one[] = {id};
    cache.append(one, keys.view, values.view);
    ids.push_back(id);
    key_summary.max_row_norm = std::max(key_summary.max_row_norm, keys.max_row_norm);
    value_max = std::max(value_max, values.max_abs);
    longest = std::max(longest, length);
  }
  const std::int64_t batch = static_cast<std::int64_t>(ids.size()), heads = config.num_kv_heads * random.integer(1, 3);
  const std::int64_t n = random.integer(1, 8);
  const DType dtype = random.chance(0.5) ? DType::f32 : DType::bf16;
  const Input q = random_input(random, dtype, batch, heads, n, config.head_dim, random.chance(0.3));
  CachedAttentionOptions options;
  std::vector<float> slopes;
  std::string text;
  if (random.chance(0.25)) {
    options.window = {random.integer(-1, 300), -1};
    text += " window=(" + std::to_string(options.window.left) + ",-1)";
  }
  if (random.chance(0.2)) {
    for (std::int64_t h = 0; h < heads; ++h) slopes.push_back(static_cast<float>(random.uniform(0.0, 0.5)));
    options.alibi_slopes = slopes;
    text += " alibi";
  }
  if (random.chance(0.2)) {
    options.softcap = random.uniform(5.0, 50.0);
    text += " softcap=" + number(options.softcap);
  }
  const std::string call = std::string("attend ") + target_name(active_target()) + " " + std::string(dtype_name(dtype)) + " over a " +
                           (config.layout == KVCacheLayout::paged ? "paged " : "contiguous ") + std::string(dtype_name(config.dtype)) +
                           " cache, " + std::to_string(batch) + " sequences, Hq=" + std::to_string(heads) +
                           " Hkv=" + std::to_string(config.num_kv_heads) + " n=" + std::to_string(n) +
                           " d_k=" + std::to_string(config.head_dim) + " d_v=" + std::to_string(d_v) + text;

  Tensor out = poisoned(dtype, {batch, heads, n, d_v});
  attend(cache, ids, q.view, out.view(), options);
  ++tally.report().attend_calls;
  if (!check) return;
  options.kernel = Kernel::reference;
  Tensor expected = poisoned(dtype, {batch, heads, n, d_v});
  attend(cache, ids, q.view, expected.view(), options);
  tally.checked(dtype);
  AttentionOptions as_forward;  // the same logits, in the terms logit_magnitude takes
  as_forward.softcap = options.softcap;
  as_forward.alibi_slopes = options.alibi_slopes;
  const Shape shape{batch, heads, config.num_kv_heads, n, longest, config.head_dim, d_v};
  const double logits = logit_magnitude(shape, q, key_summary, as_forward, std::nullopt);
  // Both outputs are rounded to `dtype` (the cache's storage rounding is the same on both sides).
  tally.error(dtype, &DTypeErrors::forward, &DTypeErrors::forward_bound, logits,
              normalised_error(out, expected, std::max(value_max, 1e-30)), "out", call);
}

// A call that must be refused: a valid forward with one argument broken. It must raise
// attnkit::Error and leave the output untouched.
void refused_call(Random& random, Tally& tally) {
  Shape s = random_shape(random, false);
  s.batch = std::max<std::int64_t>(s.batch, 1);
  s.n = std::max<std::int64_t>(s.n, 2);
  s.m = std::max<std::int64_t>(s.m, 2);
  s.d_k = std::max<std::int64_t>(s.d_k, 2);
  const Input q = random_input(random, DType::f32, s.batch, s.q_heads, s.n, s.d_k, false);
  const Input k = random_input(random, DType::f32, s.batch, s.kv_heads, s.m, s.d_k, false);
  const Input v = random_input(random, DType::f32, s.batch, s.kv_heads, s.m, s.d_v, false);
  Tensor out = poisoned(DType::f32, {s.batch, s.q_heads, s.n, s.d_v});
  RandomOptions o;
  random_options(random, s, true, o);
  ConstTensorView qv = q.view, kv = k.view;
  TensorView ov = out.view();
  std::vector<std::int64_t> lengths;
  std::vector<float> slopes;
  Tensor wrong_lse(DType::f64, {s.batch, s.q_heads, s.n});
  ForwardExtras extras;
  std::string broken;
  switch (random.integer(0, 9)) {
    case 0: kv = ConstTensorView(k.view.data(), DType::f32, {s.batch, s.kv_heads, s.m, s.d_k - 1},
                                 {k.view.stride(0), k.view.stride(1), k.view.stride(2), k.view.stride(3)});
            broken = "k's d_k differs from q's"; break;
    case 1: o.options.dropout_p = random.chance(0.5) ? 1.0 : -0.25; broken = "dropout_p outside [0, 1)"; break;
    case 2: o.options.scale = random.chance(0.5) ? 0.0 : std::numeric_limits<double>::quiet_NaN(); broken = "scale 0 or NaN"; break;
    case 3: o.options.window.left = -2; broken = "window left -2"; break;
    case 4: lengths.assign(static_cast<std::size_t>(s.batch), s.m + 1); o.options.key_lengths = lengths; broken = "key_lengths past m"; break;
    case 5: slopes.assign(static_cast<std::size_t>(s.q_heads + 1), 0.5f); o.options.alibi_slopes = slopes; broken = "one ALiBi slope too many"; break;
    case 6: o.options.softcap = -1.0; broken = "softcap negative"; break;
    case 7: extras.lse = wrong_lse.view(); broken = "lse of dtype f64"; break;
    case 8: qv = ConstTensorView(nullptr, DType::f32, {s.batch, s.q_heads, s.n, s.d_k}, {0, 0, 0, 1}); broken = "q null"; break;
    default: ov = TensorView(out.raw(), DType::f32, {s.batch, s.q_heads, s.n, s.d_v}, {0, 0, 0, 1}); broken = "out's rows overlap"; break;
  }
  const std::string call = "refused forward (" + broken + ") " + describe(s) + o.text;
  try {
    forward(qv, kv, v.view, ov, o.options, extras);
    tally.fail(call + ": was accepted");
  } catch (const Error&) {
    if (!all_nan(out)) tally.fail(call + ": raised, but wrote into out first");
  }
  ++tally.report().refused_calls;
}

}  // namespace

bool SoakReport::memory_flat() const {
  return !memory_judged() || (heap_growth() < kHeapSlack && resident_growth() < kResidentSlack);
}

SoakReport run_soak(const SoakOptions& options) {
  SoakReport report;
  report.seed = options.seed;
  Tally tally(report);
  Random random(options.seed);
  const Clock::time_point start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  bool warm = false;
  double next_progress = options.progress_seconds;
  std::int64_t valid_calls = 0;
  report.after_warmup = memory_usage();
  // Each call runs on a random supported SIMD target (the emulated ones included), unless
  // ATTNKIT_TARGET forces one.
  const char* forced = std::getenv("ATTNKIT_TARGET");
  const std::vector<Target> targets =
      forced != nullptr && *forced != '\0' ? std::vector<Target>{active_target()} : supported_targets();
  report.targets = targets;
  while (elapsed() < options.seconds && (options.max_calls == 0 || report.calls < options.max_calls)) {
    const double kind = random.uniform();
    if (targets.size() > 1) set_target(targets[static_cast<std::size_t>(random.integer(0, static_cast<std::int64_t>(targets.size()) - 1))]);
    try {
      if (kind < 0.1) {
        refused_call(random, tally);
      } else {
        const bool check = valid_calls++ % options.check_every == 0;
        if (kind < 0.55) {
          forward_call(random, check, tally);
        } else if (kind < 0.8) {
          backward_call(random, check, tally);
        } else {
          attend_call(random, check, tally);
        }
      }
    } catch (const std::exception& e) {
      tally.fail(std::string("a valid call raised: ") + e.what());
    }
    ++report.calls;
    const double now = elapsed();
    // Warm after the first share of the time, or of the calls when their number bounds the run (the
    // time bound may then never be reached, and a baseline taken before any call would count every
    // target's first workspaces as growth).
    const bool warm_by_calls =
        options.max_calls > 0 && static_cast<double>(report.calls) >= options.warmup_fraction * static_cast<double>(options.max_calls);
    if (!warm && (now >= options.warmup_fraction * options.seconds || warm_by_calls)) {
      warm = true;
      report.after_warmup = memory_usage();
    }
    if (options.on_progress && now >= next_progress) {
      options.on_progress(now, report.calls, report.failures);
      next_progress += options.progress_seconds;
    }
  }
  if (targets.size() > 1) reset_target();
  report.seconds = elapsed();
  report.at_end = memory_usage();
  return report;
}

namespace {

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}
std::string mib_plain(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

std::string format_report(const SoakReport& r) {
  std::string text = "soak: " + number(r.seconds) + " s, seed " + std::to_string(r.seed) + ", " + std::to_string(r.calls) +
                     " calls (" + std::to_string(r.forward_calls) + " forward, " + std::to_string(r.backward_calls) +
                     " backward, " + std::to_string(r.attend_calls) + " attend over a KV cache, " +
                     std::to_string(r.refused_calls) + " refused as they must be), " + std::to_string(r.checked) +
                     " checked against the float64 reference, " + std::to_string(r.failures) + " failures\n";
  std::string targets;
  for (Target t : r.targets) targets += (targets.empty() ? "" : ", ") + std::string(target_name(t));
  text += "  SIMD targets, one drawn per call: " + targets + "\n";
  for (const DTypeErrors& e : r.errors) {
    const auto stat = [](const char* name, const ErrorStat& x, double base) {
      return std::string(name) + " " + number(x.largest) + " (" + number(x.share) + " of its bound; base " + number(base) + ")";
    };
    text += std::string("  ") + std::string(dtype_name(e.dtype)) + ": " + std::to_string(e.checked) + " checked; largest error: " +
            stat("out", e.forward, e.forward_bound) + ", " + stat("lse", e.lse, e.lse_bound) + ", " +
            stat("gradients", e.backward, e.backward_bound) + "\n";
  }
  text += "  memory after warm-up -> at the end: resident " + mib_plain(r.after_warmup.resident_bytes) + " -> " +
          mib_plain(r.at_end.resident_bytes) + " (" + mib(r.resident_growth()) + "), heap in use " +
          mib_plain(r.after_warmup.heap_bytes) + " -> " + mib_plain(r.at_end.heap_bytes) + " (" + mib(r.heap_growth()) + "): " +
          (!r.memory_judged() ? "not judged (malloc is not glibc's: a sanitizer or valgrind, which checks leaks at exit)"
                              : r.memory_flat() ? "flat" : "GROWING") + "\n";
  for (const std::string& f : r.first_failures) text += "  FAILED: " + f + "\n";
  text += r.passed() ? "soak passed\n" : "soak FAILED\n";
  return text;
}

// JSON has no inf or NaN: an error that is not finite (a failure) is written as null.
static std::string json_number(double x) { return std::isfinite(x) ? number(x) : "null"; }

std::string format_report_json(const SoakReport& r) {
  std::string text = "{\"soak\": {\"seconds\": " + number(r.seconds) + ", \"seed\": " + std::to_string(r.seed) +
                     ", \"calls\": " + std::to_string(r.calls) + ", \"forward\": " + std::to_string(r.forward_calls) +
                     ", \"backward\": " + std::to_string(r.backward_calls) + ", \"attend\": " + std::to_string(r.attend_calls) +
                     ", \"refused\": " + std::to_string(r.refused_calls) + ", \"checked\": " + std::to_string(r.checked) +
                     ", \"failures\": " + std::to_string(r.failures) +
                     ", \"resident_growth_bytes\": " + std::to_string(r.resident_growth()) +
                     ", \"heap_growth_bytes\": " + std::to_string(r.heap_growth()) +
                     ", \"memory_judged\": " + (r.memory_judged() ? "true" : "false") +
                     ", \"memory_flat\": " + (r.memory_flat() ? "true" : "false") + ", \"targets\": [";
  for (std::size_t i = 0; i < r.targets.size(); ++i) text += std::string(i ? ", " : "") + "\"" + target_name(r.targets[i]) + "\"";
  text += "], \"errors\": {";
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    const DTypeErrors& e = r.errors[i];
    text += std::string(i ? ", " : "") + "\"" + std::string(dtype_name(e.dtype)) + "\": {\"checked\": " + std::to_string(e.checked) +
            ", \"out\": " + json_number(e.forward.largest) + ", \"out_share\": " + json_number(e.forward.share) +
            ", \"out_base_bound\": " + number(e.forward_bound) + ", \"lse\": " + json_number(e.lse.largest) +
            ", \"lse_share\": " + json_number(e.lse.share) + ", \"lse_base_bound\": " + number(e.lse_bound) +
            ", \"gradients\": " + json_number(e.backward.largest) + ", \"gradients_share\": " + json_number(e.backward.share) +
            ", \"gradients_base_bound\": " + number(e.backward_bound) + "}";
  }
  text += "}, \"passed\": " + std::string(r.passed() ? "true" : "false") + "}}\n";
  return text;
}

}  // namespace attnkit::cli::soak
