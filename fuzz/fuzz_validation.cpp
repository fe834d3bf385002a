// Fuzz target: the API's argument validation, through attnkit::forward, attnkit::backward and
// attnkit::attend over a KV cache, with random shapes, strides, dtypes and options, absurd sizes
// among them.
//
// Allowed outcomes: success, or an attnkit::Error. Findings: a crash or sanitizer report (an
// access outside the memory a view reaches, overflow in a size computation), any other exception,
// a call accepted although one of its views must be refused (a negative size, an element count or
// byte extent past 64 bits, null data with elements, an output sharing an input's memory), and
// NaN in an output of an accepted call whose inputs and options are tame (finite values in [-4, 4],
// scale and ALiBi slopes at most 1e3, dropout at most 0.9), since then every output element must be
// written with a number. Calls that could be accepted are capped in work (kMaxWork) so that each
// input runs in milliseconds.
//
// The input is read in this order (fuzz/make_seeds.py writes seeds in the same order):
//   call byte        forward, backward or attend (value % 3)
//   setup byte       bit 0: two threads; bits 1-2: dtype (f32, f16, bf16, f64); bits 3-4: kernel
//                    (automatic, reference, fast, automatic); 0xF8 and up: a Kernel value that is none
//   forward/backward sizes B, Hkv, Hq/Hkv, n, m, d_k, d_v (decode_size), a seed for the contents,
//                    the options (decode_options), the views (FuzzView::decode: q, k, v, out, then for
//                    the forward an extras byte and lse, probs; for the backward d_out, lse, dq, dk,
//                    dv), an aliasing byte (plant_alias) and a values byte (plant_special)
//   attend           the cache (decode_cache; the top bit of its head_dim and value_dim bytes picks
//                    32 or 64 features, whole blocks for quantized storage; its num_blocks byte's
//                    top quarter asks for keys per channel), a seed for the
//                    contents, its sequences (fill_cache), the sequence ids, Hq/Hkv, n, the options,
//                    q, out, an lse byte and lse, an aliasing
//                    byte and a values byte
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"
#include "attnkit/options.hpp"
#include "attnkit/quantized.hpp"
#include "attnkit/tensor.hpp"
#include "fuzz_support.hpp"
#include "fuzz_views.hpp"

namespace {

using namespace attnkit;
using fuzz::ByteReader;
using fuzz::decode_size;
using fuzz::finding;
using fuzz::FuzzView;
using fuzz::Reach;

constexpr double kMaxWork = 1 << 18;  // B·Hq·n·m·(d_k + d_v) of a call that runs
constexpr std::int64_t kSmallBatch = 4, kSmallHeads = 4, kSmallLength = 20;
constexpr std::size_t kMaxListLength = 64;  // key_lengths and alibi_slopes entries decoded at most
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kTameLimit = 1e3;   // scale and |ALiBi slope| at most this keep logits finite
constexpr double kTameDropout = 0.9;  // kept weights scaled by at most 10

constexpr std::array<DType, 4> kDtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};
constexpr std::array<Kernel, 4> kKernels = {Kernel::automatic, Kernel::reference, Kernel::fast, Kernel::automatic};

// Option values: mostly ordinary, then the edges validation must handle.
constexpr std::array<std::optional<double>, 16> kScales = {
    std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, 1.0, 0.5, 0.125, 3.0, 0.0, -1.0, kNaN,
    kInf, 1e300, 5e-324, kTameLimit};
// Window sides up to INT64_MAX are valid (docs/semantics.md, Limits): the kernels compare
// distances, so no side overflows.
constexpr std::array<std::int64_t, 16> kWindowSides = {
    -1, -1, -1, -1, -1, 0, 1, 2, 5, 17, -2, fuzz::kInt64Min, std::int64_t{1} << 31, std::int64_t{1} << 62,
    fuzz::kInt64Max - 1, fuzz::kInt64Max};
constexpr std::array<double, 16> kSoftcaps = {0, 0, 0, 0, 0, 0, 0, 0, 1, 30, 0.25, -1, kNaN, kInf, 1e-300, 1e300};
constexpr std::array<double, 16> kDropouts = {
    0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0.5, 0.9, 0.999999, 1, -0.1, kNaN, 1e-300};
constexpr std::array<double, 16> kSlopes = {
    0, 0.5, 1, 0.0625, -1, 8, kTameLimit, 0.25, 1e30, kNaN, kInf, -kInf, 1e-30, 2, -0.5, 3e38};

struct Dims {
  std::int64_t batch = 0, kv_heads = 0, q_heads = 0, n = 0, m = 0, d_k = 0, d_v = 0;
};

std::int64_t times(std::int64_t a, std::int64_t b) {
  std::int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? fuzz::kInt64Max : product;
}

Dims decode_dims(ByteReader& in) {
  Dims d;
  d.batch = decode_size(in, kSmallBatch + 1);
  d.kv_heads = decode_size(in, kSmallHeads + 1);
  d.q_heads = times(d.kv_heads, decode_size(in, kSmallHeads + 1));
  d.n = decode_size(in, kSmallLength);
  d.m = decode_size(in, kSmallLength);
  d.d_k = decode_size(in, kSmallLength);
  d.d_v = decode_size(in, kSmallLength);
  return d;
}

// Deterministic contents (splitmix64), seeded from the input.
class Values {
 public:
  explicit Values(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // A multiple of 1/8 in [-4, 4]: exact in every float dtype.
  double tame() { return static_cast<double>(static_cast<int>(next() % 65) - 32) / 8.0; }

 private:
  std::uint64_t state_;
};

// The options and the memory they point at.
struct DecodedOptions {
  AttentionOptions options;
  std::vector<std::int64_t> key_lengths;
  std::vector<float> slopes;
  std::optional<FuzzView> mask;
  bool tame = true;

  // Spans into this object: call after it has stopped moving.
  const AttentionOptions& attached() {
    options.key_lengths = key_lengths;
    options.alibi_slopes = slopes;
    if (mask) options.mask = mask->view();
    return options;
  }
};

// A list of `expected` entries, or one more or fewer, capped at kMaxListLength.
std::size_t decode_list_length(std::uint8_t b, std::int64_t expected) {
  std::int64_t count = std::clamp<std::int64_t>(expected, 0, kMaxListLength);
  if ((b >> 2) % 4 == 1) count += 1;
  if ((b >> 2) % 4 == 2) count -= 1;
  return static_cast<std::size_t>(std::clamp<std::int64_t>(count, 0, kMaxListLength));
}

std::optional<FuzzView> decode_mask(ByteReader& in, const Dims& d, DType dtype, Values& values, bool& tame) {
  const std::uint8_t kind = in.byte();
  if (kind % 8 < 4) return std::nullopt;
  const bool keep_mask = kind % 2 == 0;
  const bool rank4 = kind % 8 < 6;
  const std::uint8_t broadcast = in.byte();
  std::vector<std::int64_t> shape = rank4 ? std::vector{d.batch, d.q_heads, d.n, d.m} : std::vector{d.n, d.m};
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if ((broadcast >> i) & 1) shape[i] = 1;
  }
  FuzzView mask = FuzzView::decode(in, shape, keep_mask ? DType::boolean : ((kind >> 3) & 1 ? DType::f32 : dtype));
  const std::uint8_t density = in.byte();  // share of kept keys, or of −inf entries in an additive mask
  mask.fill([&] {
    const bool hit = values.next() % 256 < density;
    if (mask.dtype() == DType::boolean) return hit ? 0.0 : 1.0;
    return hit ? -kInf : values.tame();
  });
  if (!is_floating(mask.dtype()) && mask.dtype() != DType::boolean) tame = false;  // refused anyway
  return mask;
}

DecodedOptions decode_options(ByteReader& in, const Dims& d, DType dtype, Kernel kernel, Values& values) {
  DecodedOptions o;
  AttentionOptions& a = o.options;
  a.kernel = kernel;
  a.scale = in.pick(kScales);
  if (a.scale && !(*a.scale > 0 && *a.scale <= kTameLimit)) o.tame = false;
  const std::uint8_t causal = in.byte();
  a.causal = causal >= 0xFC ? static_cast<Causal>(causal) : static_cast<Causal>(causal % 3);
  a.window.left = in.pick(kWindowSides);
  a.window.right = in.pick(kWindowSides);
  a.softcap = in.pick(kSoftcaps);
  a.dropout_p = in.pick(kDropouts);
  if (!(a.dropout_p <= kTameDropout)) o.tame = false;
  a.seed = in.byte();

  const std::uint8_t lengths = in.byte();
  if (lengths % 4 >= 2) {
    o.key_lengths.resize(decode_list_length(lengths, d.batch));
    for (std::int64_t& length : o.key_lengths) {
      const std::uint8_t b = in.byte();
      length = b >= 0xF0 ? fuzz::kAbsurdSizes[b & 0x0F] : b % (std::clamp<std::int64_t>(d.m, 0, 255) + 2);
    }
  }
  const std::uint8_t slopes = in.byte();
  if (slopes % 4 >= 2) {
    o.slopes.resize(decode_list_length(slopes, d.q_heads));
    for (float& slope : o.slopes) {
      slope = static_cast<float>(in.pick(kSlopes));
      if (!(std::fabs(slope) <= kTameLimit)) o.tame = false;
    }
  }
  o.mask = decode_mask(in, d, dtype, values, o.tame);
  return o;
}

// ---- the outcome ----

// Why a call must be refused, or empty if it may be accepted: an invalid view among `views`, or an
// output among `outputs` that writes an element twice.
std::string must_refuse(std::initializer_list<std::pair<const char*, const FuzzView*>> views,
                        std::initializer_list<std::pair<const char*, const FuzzView*>> outputs) {
  for (const auto& [name, view] : views) {
    if (view != nullptr && view->reach() == Reach::must_reject) return std::string(name) + " is invalid";
  }
  for (const auto& [name, view] : outputs) {
    if (view != nullptr && view->writes_an_element_twice()) return std::string(name) + " writes an element twice";
  }
  return {};
}

// Size `d` of a view as the library reads it (0 past its rank; negative sizes are refused anyway).
double size_of(const FuzzView& view, int d) {
  return view.shape().rank > d ? static_cast<double>(std::max<std::int64_t>(view.shape().sizes[d], 0)) : 0.0;
}

// What a forward or backward would compute: every row over every key, every key row once, and the
// kernels' loops over heads, which run even when rows or keys are empty (an empty problem with 2^61
// batch entries loops for hours in the reference backward).
double work(const FuzzView& q, const FuzzView& k, const FuzzView& v) {
  const double rows = size_of(q, 0) * size_of(q, 1) * std::max(size_of(q, 2), 1.0);
  const double width = std::max(size_of(q, 3), 1.0) + std::max(size_of(v, 3), 1.0);
  const double heads = size_of(q, 0) * std::max(size_of(q, 1), size_of(k, 1));
  return rows * std::max(size_of(k, 2), 1.0) * width + size_of(k, 0) * size_of(k, 1) * size_of(k, 2) * width + heads;
}

// ATTNKIT_FUZZ_VERBOSE=1 prints each call's outcome: to see what a seed or a saved finding exercises.
bool verbose() {
  static const bool on = std::getenv("ATTNKIT_FUZZ_VERBOSE") != nullptr;
  return on;
}

// Runs `call`: true if it succeeded, false if it raised attnkit::Error; anything else is a finding.
template <class Call>
bool accepted(const char* what, Call&& call) {
  try {
    call();
    if (verbose()) std::fprintf(stderr, "%s: accepted\n", what);
    return true;
  } catch (const Error& e) {
    if (verbose()) std::fprintf(stderr, "%s: refused: %s\n", what, e.what());
    return false;
  } catch (const std::exception& e) {
    finding(std::string(what) + " raised an exception that is not attnkit::Error", e.what());
  }
}

void check_refusal(bool ok, const std::string& reason, const char* what) {
  if (ok && !reason.empty()) finding(std::string(what) + " accepted a call it must refuse", reason);
}

void check_no_nan(std::initializer_list<std::pair<const char*, const FuzzView*>> outputs, const char* what) {
  for (const auto& [name, view] : outputs) {
    if (view != nullptr && view->has_nan()) finding(std::string(what) + ": NaN in an output of a tame call", name);
  }
}

// The values byte: below 0xE0 every input stays tame; else one non-finite or huge value is planted
// in one input, and no NaN check applies.
bool plant_special(ByteReader& in, std::initializer_list<FuzzView*> inputs) {
  const std::uint8_t b = in.byte();
  if (b < 0xE0) return true;
  const std::array<double, 4> specials = {kNaN, kInf, -kInf, 6e4};
  FuzzView* target = *(inputs.begin() + in.byte() % inputs.size());
  target->poke(in.byte(), specials[b % specials.size()]);
  return false;
}

// Aliasing byte: 0xF0 and up makes the first output share the first input's memory, which
// validation must refuse. Only when both hold elements: an empty input's token buffer is no memory
// an output could use, and an empty output touches none.
std::string plant_alias(ByteReader& in, FuzzView& output, const FuzzView& input) {
  if (in.byte() < 0xF0 || output.reach() != Reach::small || input.reach() != Reach::small) return {};
  output.alias(input);
  return "an output aliases an input";
}

// ---- forward ----

void fuzz_forward(ByteReader& in, DType dtype, Kernel kernel) {
  const Dims d = decode_dims(in);
  Values values(in.byte());
  DecodedOptions o = decode_options(in, d, dtype, kernel, values);
  FuzzView q = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_k}, dtype);
  FuzzView k = FuzzView::decode(in, {d.batch, d.kv_heads, d.m, d.d_k}, dtype);
  FuzzView v = FuzzView::decode(in, {d.batch, d.kv_heads, d.m, d.d_v}, dtype);
  FuzzView out = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_v}, dtype);
  const std::uint8_t extras = in.byte();
  std::optional<FuzzView> lse, probs;
  if (extras & 1) lse = FuzzView::decode(in, {d.batch, d.q_heads, d.n}, DType::f32);
  if (extras & 2) probs = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.m}, (extras & 4) ? DType::f32 : dtype);

  for (FuzzView* input : {&q, &k, &v}) input->fill([&] { return values.tame(); });
  for (FuzzView* output : {&out, lse ? &*lse : nullptr, probs ? &*probs : nullptr}) {
    if (output) output->fill([] { return kNaN; });  // an element left unwritten stays NaN
  }
  std::string reason = plant_alias(in, out, q);
  const bool tame = plant_special(in, {&q, &k, &v}) && o.tame;
  if (reason.empty()) {
    reason = must_refuse({{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", lse ? &*lse : nullptr},
                          {"probs", probs ? &*probs : nullptr}, {"mask", o.mask ? &*o.mask : nullptr}},
                         {{"out", &out}, {"lse", lse ? &*lse : nullptr}, {"probs", probs ? &*probs : nullptr}});
  }
  if (reason.empty() && work(q, k, v) > kMaxWork) return;

  const AttentionOptions& options = o.attached();
  ForwardExtras x;
  if (lse) x.lse = lse->view();
  if (probs) x.probs = probs->view();
  const bool ok = accepted("forward", [&] { forward(q.view(), k.view(), v.view(), out.view(), options, x); });
  check_refusal(ok, reason, "forward");
  if (ok && tame) {
    check_no_nan({{"out", &out}, {"lse", lse ? &*lse : nullptr}, {"probs", probs ? &*probs : nullptr}}, "forward");
  }
}

// ---- backward ----

void fuzz_backward(ByteReader& in, DType dtype, Kernel kernel) {
  const Dims d = decode_dims(in);
  Values values(in.byte());
  DecodedOptions o = decode_options(in, d, dtype, kernel, values);
  FuzzView q = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_k}, dtype);
  FuzzView k = FuzzView::decode(in, {d.batch, d.kv_heads, d.m, d.d_k}, dtype);
  FuzzView v = FuzzView::decode(in, {d.batch, d.kv_heads, d.m, d.d_v}, dtype);
  FuzzView out = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_v}, dtype);
  FuzzView d_out = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_v}, dtype);
  FuzzView lse = FuzzView::decode(in, {d.batch, d.q_heads, d.n}, DType::f32);
  FuzzView dq = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_k}, dtype);
  FuzzView dk = FuzzView::decode(in, {d.batch, d.kv_heads, d.m, d.d_k}, dtype);
  FuzzView dv = FuzzView::decode(in, {d.batch, d.kv_heads, d.m, d.d_v}, dtype);

  for (FuzzView* input : {&q, &k, &v, &d_out, &out, &lse}) input->fill([&] { return values.tame(); });
  for (FuzzView* output : {&dq, &dk, &dv}) output->fill([] { return kNaN; });
  std::string reason = plant_alias(in, dq, q);
  const bool tame = plant_special(in, {&q, &k, &v, &d_out}) && o.tame;
  if (reason.empty()) {
    reason = must_refuse({{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"d_out", &d_out}, {"lse", &lse},
                          {"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"mask", o.mask ? &*o.mask : nullptr}},
                         {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  }
  if (reason.empty() && work(q, k, v) > kMaxWork) return;

  const AttentionOptions& options = o.attached();
  // The backward trusts out and lse to be the forward's: compute them when the views allow, else the
  // gradients of the tame-input check would be those of arbitrary numbers.
  bool consistent = false;
  if (reason.empty()) {
    consistent = accepted("forward before backward",
                          [&] { forward(q.view(), k.view(), v.view(), out.view(), options, {.lse = lse.view()}); });
    check_refusal(consistent, must_refuse({}, {{"out", &out}, {"lse", &lse}}), "forward before backward");
  }
  const bool ok = accepted("backward", [&] {
    backward(q.view(), k.view(), v.view(), out.view(), d_out.view(), lse.view(), dq.view(), dk.view(), dv.view(), options);
  });
  check_refusal(ok, reason, "backward");
  if (ok && tame && consistent) check_no_nan({{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}, "backward");
}

// ---- attend over a KV cache ----

// Config fields: small valid values and invalid ones; sizes the cache must refuse because its bytes
// overflow, never sizes that would really allocate much.
constexpr std::array<std::int64_t, 8> kConfigCounts = {1, 1, 2, 3, 0, -1, 2, fuzz::kInt64Max};
constexpr std::array<std::int64_t, 8> kConfigLengths = {1, 5, 9, 16, 0, -3, std::int64_t{1} << 62, fuzz::kInt64Max};
constexpr std::array<std::int64_t, 8> kConfigBlockSizes = {1, 32, 4, 8, 16, 0, 3, -4};
constexpr std::array<DType, 12> kConfigDtypes = {DType::f32,  DType::f32, DType::f16,     DType::bf16, DType::f32,     DType::f16,
                                                 DType::f64,  DType::boolean, DType::int8, DType::int4, DType::fp8_e4m3, DType::fp8_e5m2};

KVCacheConfig decode_cache(ByteReader& in) {
  KVCacheConfig c;
  c.num_kv_heads = in.pick(kConfigCounts);
  // Small widths, or with the byte's top bit whole quantisation blocks (32, 64) for quantized
  // storage.
  const std::uint8_t head_dim = in.byte(), value_dim = in.byte();
  c.head_dim = head_dim & 0x80 ? 32 * (1 + (head_dim & 1)) : 1 + head_dim % 8;
  c.value_dim = value_dim & 0x80 ? 32 : value_dim % 9;
  c.max_sequences = in.pick(kConfigCounts);
  c.max_sequence_length = in.pick(kConfigLengths);
  c.layout = in.flag() ? KVCacheLayout::paged : KVCacheLayout::contiguous;
  c.block_size = in.pick(kConfigBlockSizes);
  const std::uint8_t blocks = in.byte();
  c.num_blocks = blocks % 13;
  c.dtype = in.pick(kConfigDtypes);
  if (blocks >= 0xC0) c.key_quantization = KeyQuantization::per_channel;  // the byte's top quarter
  return c;
}

// The cache's storage in bytes, saturating far beyond 64 bits: a rough upper bound.
double cache_bytes(const KVCacheConfig& c) {
  const double length = static_cast<double>(c.max_sequence_length), sequences = static_cast<double>(c.max_sequences);
  double rows = sequences * length;  // contiguous: one slot per sequence
  if (c.layout == KVCacheLayout::paged && c.block_size > 0) {
    const double blocks = c.num_blocks > 0 ? static_cast<double>(c.num_blocks)
                                           : sequences * std::ceil(length / static_cast<double>(c.block_size));
    rows = blocks * static_cast<double>(c.block_size);
  }
  const double width = static_cast<double>(c.head_dim + (c.value_dim > 0 ? c.value_dim : c.head_dim));
  return rows * static_cast<double>(c.num_kv_heads) * width * 8.0;
}

bool valid_config_fields(const KVCacheConfig& c) {
  const bool paged_ok = c.layout == KVCacheLayout::contiguous ||
                        (c.block_size > 0 && (c.block_size & (c.block_size - 1)) == 0);
  const std::int64_t value_dim = c.value_dim > 0 ? c.value_dim : c.head_dim;
  const bool quantized_ok = is_quantized(c.dtype) && c.head_dim % kQuantBlock == 0 && value_dim % kQuantBlock == 0;
  const bool channels_ok = c.key_quantization == KeyQuantization::per_token ||
                           (has_channel_groups(c.dtype) && (c.layout == KVCacheLayout::contiguous || c.block_size % kChannelGroup == 0));
  return c.num_kv_heads > 0 && c.max_sequences > 0 && c.max_sequence_length > 0 && paged_ok && channels_ok &&
         (c.dtype == DType::f32 || c.dtype == DType::f16 || c.dtype == DType::bf16 || quantized_ok);
}

// A few sequences, appended to and perhaps one freed, from the input.
void fill_cache(ByteReader& in, KVCache& cache, Values& values) {
  const int adds = in.byte() % 4;
  for (int i = 0; i < adds; ++i) accepted("KVCache::add_sequence", [&] { cache.add_sequence(); });
  const KVCacheConfig& c = cache.config();
  for (KVCache::SequenceId id : cache.sequences()) {
    // Keys per channel: up to 40 tokens, past a group of 32.
    const std::int64_t tokens = in.byte() % (c.key_quantization == KeyQuantization::per_channel ? 41 : 12);
    const DType dtype = kDtypes[in.byte() % kDtypes.size()];
    Tensor keys(dtype, {c.num_kv_heads, tokens, c.head_dim}), vals(dtype, {c.num_kv_heads, tokens, c.value_dim});
    for (Tensor* t : {&keys, &vals}) {
      for (std::int64_t e = 0; e < t->numel(); ++e) {
        store_from_double(static_cast<std::byte*>(t->raw()) + e * static_cast<std::int64_t>(dtype_size(dtype)), dtype,
                          values.tame());
      }
    }
    accepted("KVCache::append", [&] { cache.append(id, keys.view(), vals.view()); });
  }
  if (in.byte() >= 0xF0 && !cache.sequences().empty()) cache.free_sequence(cache.sequences().front());
}

void fuzz_attend(ByteReader& in, DType dtype, Kernel kernel) {
  const KVCacheConfig config = decode_cache(in);
  const double bytes = cache_bytes(config);
  const bool overflows = bytes > 0x1p70;  // far past 64 bits: the cache must refuse it
  if (!overflows && bytes > static_cast<double>(fuzz::kMaxBufferBytes)) return;  // valid and big: not made
  std::optional<KVCache> made;
  const bool built = accepted("KVCache", [&] { made.emplace(config); });
  if (built && (overflows || !valid_config_fields(config))) finding("KVCache accepted a configuration it must refuse");
  if (!built) return;
  KVCache& cache = *made;
  const KVCacheConfig& c = cache.config();
  Values values(in.byte());
  fill_cache(in, cache, values);

  std::vector<KVCache::SequenceId> ids(in.byte() % 4);
  const std::vector<KVCache::SequenceId> alive = cache.sequences();
  std::int64_t m = 0;
  for (KVCache::SequenceId& id : ids) {
    const std::uint8_t b = in.byte();
    id = b < 0xF0 && !alive.empty() ? alive[b % alive.size()] : (b & 1 ? 7777 : -1);  // else unknown ids
    if (cache.contains(id)) m = std::max(m, cache.length(id));
  }
  Dims d;
  d.batch = static_cast<std::int64_t>(ids.size());
  d.kv_heads = c.num_kv_heads;
  d.q_heads = times(c.num_kv_heads, decode_size(in, kSmallHeads + 1));
  d.n = decode_size(in, 6);
  d.m = m;
  d.d_k = c.head_dim;
  d.d_v = c.value_dim;
  DecodedOptions o = decode_options(in, d, dtype, kernel, values);
  CachedAttentionOptions co;
  co.scale = o.options.scale;
  co.window = o.options.window;
  co.alibi_slopes = o.slopes;
  co.softcap = o.options.softcap;
  co.kernel = o.options.kernel;

  FuzzView q = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_k}, dtype);
  FuzzView out = FuzzView::decode(in, {d.batch, d.q_heads, d.n, d.d_v}, dtype);
  std::optional<FuzzView> lse;
  if (in.flag()) lse = FuzzView::decode(in, {d.batch, d.q_heads, d.n}, DType::f32);
  q.fill([&] { return values.tame(); });
  out.fill([] { return kNaN; });
  if (lse) lse->fill([] { return kNaN; });
  if (lse) co.lse = lse->view();
  std::string reason = plant_alias(in, out, q);
  const bool tame = plant_special(in, {&q}) && o.tame;
  if (reason.empty()) {
    reason = must_refuse({{"q", &q}, {"out", &out}, {"lse", lse ? &*lse : nullptr}},
                         {{"out", &out}, {"lse", lse ? &*lse : nullptr}});
  }
  if (reason.empty()) {
    const double rows = static_cast<double>(d.batch) * std::max(size_of(q, 1), 1.0) * std::max(size_of(q, 2), 1.0);
    if (rows * std::max(static_cast<double>(m), 1.0) * static_cast<double>(d.d_k + d.d_v) > kMaxWork) return;
  }
  const bool ok = accepted("attend", [&] { attend(cache, ids, q.view(), out.view(), co); });
  check_refusal(ok, reason, "attend");
  if (ok && tame) check_no_nan({{"out", &out}, {"lse", lse ? &*lse : nullptr}}, "attend");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in(std::span(data, size));
  const std::uint8_t call = in.byte() % 3;
  const std::uint8_t setup = in.byte();
  set_num_threads(1 + (setup & 1));
  const DType dtype = kDtypes[(setup >> 1) & 3];
  const Kernel kernel = setup >= 0xF8 ? static_cast<Kernel>(setup) : kKernels[(setup >> 3) & 3];
  switch (call) {
    case 0: fuzz_forward(in, dtype, kernel); break;
    case 1: fuzz_backward(in, dtype, kernel); break;
    default: fuzz_attend(in, dtype, kernel); break;
  }
  return 0;
}
