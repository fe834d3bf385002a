// The fast forward kernel, FlashAttention-2 style, written once over an ISA wrapper.
//
// Included once per target by src/cpu/kernels_<target>.cpp, which defines ATTNKIT_ISA (the wrapper
// type) and ATTNKIT_ISA_NAMESPACE; everything here lives in that namespace, so no inline function is
// shared between translation units compiled with different instruction sets. It brings in the
// pieces the backward kernel (flash_backward.inl, included after it) shares: packing.inl,
// micro_kernels.inl, tile_bias.inl. No include guard on purpose.
//
// For one work item (a block of queries of every head in a GQA group, see forward_plan.hpp):
//
//   q_tile ← Q
//   for each key block K_j, V_j that some row can see:
//     pack K_jᵀ and V_j once for the whole item
//     for each register tile of kTileRows rows:
//       scores = q_tile · K_jᵀ · scale                  score_tile
//       scores = bias(scores), −inf where masked        apply_bias_and_mask
//       m_new = max(m, row_max(scores))                 online_softmax
//       p = exp(scores − m_new);  l = l·exp(m − m_new) + row_sum(p)
//       acc = acc·exp(m − m_new) + dropout(p) · V_j     accumulate_pv
//   O = acc / l,  LSE = m + log l                        finalize (forward.cpp)
//
// Scores stay in natural units and exp is taken of the difference s − m, which is exact for nearby
// values, and the scale multiplies the finished dot products. (Scaling the scores to log2 units up
// front to use exp2, or pre-scaling Q by the scale, each saves a multiply per score but adds a
// rounding: on inputs with outliers each measured up to 3.8× the naive float32 error, failing the
// accuracy rule; see docs/tuning.md, "The online softmax and its exp".)

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "attnkit/quantized.hpp"
#include "core/bf16_rounding.hpp"
#include "core/element_io.hpp"
#include "core/philox.hpp"
#include "core/softmax_partial.hpp"
#include "cpu/forward_plan.hpp"
#include "cpu/kernels.hpp"
#include "cpu/simd/math.hpp"
#include "cpu/visibility.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu::ATTNKIT_ISA_NAMESPACE {

using Isa = ATTNKIT_ISA;
using Vec = Isa::Vec;

#include "cpu/packing.inl"
#include "cpu/micro_kernels.inl"
#include "cpu/tile_bias.inl"

static_assert(kKeyBlock % kTileCols == 0, "key blocks hold whole register tiles");

// The value block is stored row by row, v[j · d_v + c]. (Panels of one tile's columns, which tile_a_b
// would stream front to back, measured no faster for the forward and 10% slower for decoding; see
// docs/tuning.md, "Block geometry".)

// ---- micro-kernels: one register tile ----

// scores[r][·] = scale · q[r] · K_jᵀ for the kTileRows rows of the tile and `cols` keys.
template <class Between = NothingBetweenChunks>
void score_tile(const ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float scale, Between&& between = {}) {
  tile_a_bt(ws.q + tile * ws.d_k, ws.d_k, ws.k_t, ws.d_k, cols, scale, ws.scores, kKeyBlock, between);
}

// Decoding requests key rows 8 ahead: 4, 12, 16, 32 and 64 measured no better on the machines in
// docs/tuning.md, "Requesting rows ahead".
constexpr std::int64_t kPrefetchRows = 8;  // how far ahead of use key rows are requested
constexpr std::int64_t kCacheLine = 64;

// Bytes per element of the dtypes the fast kernels read (inline: decoding asks for every row).
inline std::int64_t element_bytes(DType dtype) {
  if (dtype == DType::f32) return 4;  // (int8 and int4 rows: 1, their strides count bytes)
  return dtype == DType::bf16 || dtype == DType::f16 ? 2 : static_cast<std::int64_t>(dtype_size(dtype));
}

// Requests rows of one KV head of K or V ahead of use, with the addressing worked out once per
// block rather than once per row (decoding asks for two rows per key). Rows not of unit stride are
// not requested.
class RowPrefetcher {
 public:
  RowPrefetcher(const ConstTensorView& t, std::int64_t kv_head)
      : RowPrefetcher(t, kv_head, element_bytes(t.dtype())) {}
  void operator()(StoredRow at) const { request<3>(row_begin(at)); }
  void operator()(const char* row) const { request<3>(row); }
  // The same into the second-level cache only (prefetcht1): for rows read long after the request,
  // which in L1 would only evict lines in use and hold its miss buffers meanwhile.
  void into_l2(const char* row) const { request<2>(row); }
  // The same for the rows of a quantized dtype: records of any byte length, one after the other in
  // a block. The lines from the first that starts inside the row to the one holding its last byte:
  // a line the row shares with the row before it came with that row's request. (Asked for line by
  // line from the row's start, int8 and int4 rows made up to twice as many requests as lines.)
  template <int Locality = 3>
  void records(const char* row) const {
    const auto begin = reinterpret_cast<std::uintptr_t>(row);
    const std::uintptr_t first = (begin + kCacheLine - 1) / kCacheLine * kCacheLine;
    const std::uintptr_t last = (begin + static_cast<std::uintptr_t>(bytes_) - 1) / kCacheLine * kCacheLine;
    for (std::uintptr_t line = first; bytes_ > 0 && line <= last; line += kCacheLine)
      __builtin_prefetch(reinterpret_cast<const char*>(line), 0, Locality);
  }
  const char* row_begin(StoredRow at) const { return head_ + at.outer * outer_stride_ + at.row * row_stride_; }
  std::int64_t row_bytes() const { return bytes_; }  // 0: rows not requested

 private:
  // Every cache line of the row, with __builtin_prefetch's locality (3: into L1, 2: into L2).
  template <int Locality>
  void request(const char* begin) const {
    for (std::int64_t offset = 0; offset < bytes_; offset += kCacheLine) __builtin_prefetch(begin + offset, 0, Locality);
  }
  RowPrefetcher(const ConstTensorView& t, std::int64_t kv_head, std::int64_t element)
      : head_(static_cast<const char*>(t.data()) + kv_head * t.stride(1) * element),
        outer_stride_(t.stride(0) * element),
        row_stride_(t.stride(2) * element),
        bytes_(t.stride(3) != 1        ? 0
               : is_quantized(t.dtype()) ? quantized_row_bytes(t.dtype(), t.size(3))  // the codes and their scales
                                         : t.size(3) * element) {}

  const char* head_;
  std::int64_t outer_stride_, row_stride_, bytes_;
};

// Requests one tile's share of the next key block's rows, keys' then values', a few cache lines at a
// time: the tile's micro-kernels call it between their column chunks, and what is left is requested
// when it goes out of scope. Requested all at once, a tile's 176 lines (d = 128, f32) fill the
// core's miss buffers and the prefetch instructions themselves stall (2.5% of the f32 forward's time
// at n = 8192 on an AVX-512 Zen 4), and the packing that follows finds fewer of its rows in cache.
// See docs/tuning.md, "Prefetching the next key block".
class SpreadRowPrefetch {
  static std::int64_t lines_of(std::int64_t bytes) { return (bytes + kCacheLine - 1) / kCacheLine; }

 public:
  // Rows [first, end) of the block starting at key `next`, over `chunks` calls.
  SpreadRowPrefetch(const detail::Problem& p, std::int64_t batch, const RowPrefetcher& keys,
                    const RowPrefetcher& values, std::int64_t next, std::int64_t first, std::int64_t end,
                    std::int64_t chunks)
      : p_(p), batch_(batch), next_(next), row_(first), end_(std::max(first, end)), keys_(keys), values_(values) {
    const std::int64_t lines = (end_ - row_) * (lines_of(keys.row_bytes()) + lines_of(values.row_bytes()));
    per_call_ = std::max<std::int64_t>(1, (lines + chunks - 1) / std::max<std::int64_t>(1, chunks));
  }
  SpreadRowPrefetch(const SpreadRowPrefetch&) = delete;
  SpreadRowPrefetch& operator=(const SpreadRowPrefetch&) = delete;
  // Whatever way the tile ends (a skipped or seen-only tile calls no micro-kernel), its share is requested.
  ~SpreadRowPrefetch() { request(std::numeric_limits<std::int64_t>::max()); }
  void operator()() { request(per_call_); }

 private:
  void request(std::int64_t lines) {
    while (lines > 0 && row_ < end_) {
      const RowPrefetcher& rows = on_values_ ? values_ : keys_;
      const char* begin = rows.row_begin(stored_row(p_, batch_, next_ + row_));
      for (; offset_ < rows.row_bytes() && lines > 0; offset_ += kCacheLine, --lines)
        __builtin_prefetch(begin + offset_);
      if (offset_ < rows.row_bytes()) return;
      offset_ = 0;
      if (on_values_) ++row_;
      on_values_ = !on_values_;
    }
  }

  const detail::Problem& p_;
  std::int64_t batch_, next_, row_, end_, per_call_ = 1, offset_ = 0;
  bool on_values_ = false;
  const RowPrefetcher &keys_, &values_;
};

// Rows the kernels read where they are stored: f32, bf16 and f16 widened in registers, and the
// quantized int8 and int4 rows of a KV cache (quantized_loads.inl), addressed by their first byte.
template <DType Stored>
using StoredElement = std::conditional_t<Stored == DType::f32, float,
                                         std::conditional_t<Stored == DType::int8 || Stored == DType::int4, std::byte, std::uint16_t>>;

// kLanes elements of a float row, as floats.
template <DType Stored>
Vec load_stored(const StoredElement<Stored>* x) {
  if constexpr (Stored == DType::f32) return Isa::load(x);
  else if constexpr (Stored == DType::bf16) return Isa::load_bf16(x);
  else return Isa::load_f16(x);
}

// Elements c .. c + kLanes of a stored row of `width` values, as floats: for float rows the elements
// at x + c, for quantized rows dequantised from the row's record.
template <DType Stored>
Vec load_row_vector(const StoredElement<Stored>* row, std::int64_t width, std::int64_t c) {
  if constexpr (Stored == DType::int8 || Stored == DType::int4) return load_quantized<Stored>(row, width, c);
  else return load_stored<Stored>(row + c);
}

// f(std::integral_constant<DType, dtype>{}) for a dtype read in place (f32, bf16 or f16): the loops
// over a row are instantiated per dtype, never choosing it per vector (GCC then kept the
// accumulators of such a loop in memory and stored them on every step).
template <class F>
void with_stored_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); break;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); break;
    case DType::int8: f(std::integral_constant<DType, DType::int8>{}); break;
    case DType::int4: f(std::integral_constant<DType, DType::int4>{}); break;
    default: f(std::integral_constant<DType, DType::f16>{}); break;  // f16: the only other one read in place
  }
}

// Whether the value rows are read where they are stored: unit stride, d_v already whole tiles, and
// a dtype load_row_vector reads.
bool value_rows_in_place(const detail::Problem& p, const ForwardWorkspace& ws) {
  const DType dtype = p.v.dtype();
  return p.v.stride(3) == 1 && p.sizes.d_v == ws.d_v &&
         (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || is_quantized(dtype));
}

// How many keys decoding's score loop takes per step for a tile of `rows` live rows: enough
// independent accumulators (rows × keys) to cover the FMA latency at full throughput (8 chains: 4
// cycles × 2 units), with each loaded query vector shared by the step's keys. With 32 registers
// (AVX-512), up to kLanes accumulators: one reduction tree (reduce_add_each) then sums them all, which
// costs less per sum the more there are. With 16 registers, 2 keys for a GQA group of 4 rows: 3 keys
// (12 chains) measured faster from cache on a Zen 3 but slower from memory, where decoding runs. See
// docs/tuning.md, "The score loop".
constexpr std::int64_t decode_keys_per_step(std::int64_t rows) {
  if constexpr (Isa::kGeometry.registers >= 32) return std::clamp<std::int64_t>(kLanes / rows, 2, 8);
  return std::min<std::int64_t>(4, (8 + rows - 1) / rows);
}
// For every live row count, its accumulators, key vectors and query vector fit the registers.
constexpr bool decode_steps_fit_registers() {
  for (std::int64_t rows = 1; rows <= kTileRows; ++rows) {
    const std::int64_t keys = decode_keys_per_step(rows);
    if (rows * keys + keys + 1 > Isa::kGeometry.registers) return false;
  }
  return true;
}
static_assert(decode_steps_fit_registers(), "decode's score accumulators and operands fit the vector registers");

// out[i] = Isa::reduce_add(v[i]) for i < Count, bit for bit: by the target's reduction tree over all
// of them at once where it has one (Isa::reduce_add_each), else one vector at a time.
template <std::int64_t Count, class I = Isa>
void reduce_add_each(const Vec* v, float* out) {
  if constexpr (requires { I::template reduce_add_each<Count>(v, out); }) {
    I::template reduce_add_each<Count>(v, out);
  } else {
    for (std::int64_t i = 0; i < Count; ++i) out[i] = I::reduce_add(v[i]);
  }
}

// scores[r·kKeyBlock + t] = scale · Σ acc[t·Rows + r] (each a sum across lanes, as reduce_add_each
// sums), for t < Keys, r < Rows: straight from registers where the target has a way
// (Isa::reduce_add_each_by_row), else through an array of sums.
template <std::int64_t Rows, std::int64_t Keys, class I = Isa>
__attribute__((always_inline)) inline void store_scaled_sums(const Vec* acc, float scale, float* scores) {
  if constexpr (requires { I::template reduce_add_each_by_row<Rows, Keys>(acc, scale, scores, kKeyBlock); }) {
    I::template reduce_add_each_by_row<Rows, Keys>(acc, scale, scores, kKeyBlock);
  } else {
    float sums[Keys][Rows];
    reduce_add_each<Keys * Rows, I>(acc, &sums[0][0]);
    for (std::int64_t t = 0; t < Keys; ++t)
      for (std::int64_t r = 0; r < Rows; ++r) scores[r * kKeyBlock + t] = sums[t][r] * scale;
  }
}

// acc[t][r] = q[r] · k[t] as kLanes partial sums, over the first `count` elements (a multiple of
// kLanes) for the Rows rows of q, d_k apart, and the Keys key rows k[t], stored as `Stored`. Each
// sum runs over the vectors in the same order whatever Keys is, so a score does not depend on how
// keys are grouped. Inlined into the key loop: called, a step (16 vectors at d_k = 128) pays a call
// and its accumulators zeroed on the stack (bf16 decoding measured 1.13x from cache, 1.07x from
// memory on a Zen 3; see docs/tuning.md, "The score loop").
template <std::int64_t Rows, std::int64_t Keys, DType Stored>
__attribute__((always_inline)) inline void dot_with_rows(const float* q, std::int64_t d_k, std::int64_t count,
                                                         const StoredElement<Stored>* const* k, Vec (&acc)[Keys][Rows]) {
  for (auto& key : acc)
    for (Vec& a : key) a = Isa::zero();
  if constexpr (Stored == DType::int8 || Stored == DType::int4) {
    // Quantized rows (whole blocks): each key's block parameters converted a group of blocks at a
    // time, then each block's vectors in the same order as below.
    constexpr std::int64_t kGroupBlocks = 4, kPerBlock = kParamsPerBlock<Stored>;
    for (std::int64_t g0 = 0; g0 < count; g0 += kGroupBlocks * kQuantBlock) {
      const std::int64_t blocks = std::min(kGroupBlocks, (count - g0) / kQuantBlock);
      float params[Keys][kGroupBlocks * kPerBlock];
      for (std::int64_t t = 0; t < Keys; ++t)
        block_params_to_float<Stored>(k[t], d_k, g0 / kQuantBlock, blocks * kPerBlock, params[t]);
      for (std::int64_t b = 0; b < blocks; ++b) {
        BlockScale scale[Keys];
        for (std::int64_t t = 0; t < Keys; ++t) scale[t] = block_scale<Stored>(params[t] + b * kPerBlock);
        for (std::int64_t c = g0 + b * kQuantBlock; c < g0 + (b + 1) * kQuantBlock; c += kLanes) {
          Vec kc[Keys];
          for (std::int64_t t = 0; t < Keys; ++t) kc[t] = load_quantized<Stored>(k[t], c, scale[t]);
          for (std::int64_t r = 0; r < Rows; ++r) {
            const Vec qr = Isa::load(q + r * d_k + c);
            for (std::int64_t t = 0; t < Keys; ++t) acc[t][r] = Isa::fma(qr, kc[t], acc[t][r]);
          }
        }
      }
    }
    return;
  }
  for (std::int64_t c = 0; c < count; c += kLanes) {
    Vec kc[Keys];
    for (std::int64_t t = 0; t < Keys; ++t) kc[t] = load_row_vector<Stored>(k[t], d_k, c);
    for (std::int64_t r = 0; r < Rows; ++r) {
      const Vec qr = Isa::load(q + r * d_k + c);
      for (std::int64_t t = 0; t < Keys; ++t) acc[t][r] = Isa::fma(qr, kc[t], acc[t][r]);
    }
  }
}

// The same partial sums with bf16 dot products: q as rows of pairs (`count` pairs, a multiple of
// kLanes, `stride` pairs apart) and bf16 key rows read as pairs along d_k where they are stored.
template <std::int64_t Rows, std::int64_t Keys, class I = Isa>
__attribute__((always_inline)) inline void dot_pairs_with_rows(const std::uint32_t* q, std::int64_t stride,
                                                               std::int64_t count, const std::uint16_t* const* k,
                                                               Vec (&acc)[Keys][Rows]) {
  for (auto& key : acc)
    for (Vec& a : key) a = I::zero();
  for (std::int64_t c = 0; c < count; c += kLanes) {
    typename I::Pairs kc[Keys];
    for (std::int64_t t = 0; t < Keys; ++t) kc[t] = I::load_pairs(reinterpret_cast<const std::uint32_t*>(k[t] + 2 * c));
    for (std::int64_t r = 0; r < Rows; ++r) {
      const typename I::Pairs qr = I::load_pairs(q + r * stride + c);
      for (std::int64_t t = 0; t < Keys; ++t) acc[t][r] = I::dot_bf16(acc[t][r], qr, kc[t]);
    }
  }
}

// The same scores read from the key rows as stored, without packing: for an item of a single tile
// (decoding), where packing the keys would cost more than the arithmetic on them. Key rows are
// requested ahead of use up to `ahead_end` (keys from j0 the item reads, past this block). A few keys per
// step (decode_keys_per_step): vectors along the feature dimension, one accumulator per row and key,
// summed across lanes at the end. Only the tile's Rows live rows are computed (the rest are masked
// whole by apply_bias_and_mask). With KeyPairs (bf16 keys of unit stride on a bf16-dot target, d_k
// whole vectors of pairs), the products are bf16 dot products with the queries' pairs (ws.q_bf16).
template <std::int64_t Rows, bool KeyPairs = false>
void score_tile_from_key_rows(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item,
                              std::int64_t j0, std::int64_t width, std::int64_t cols, float scale,
                              std::int64_t ahead_end) {
  constexpr std::int64_t kKeys = decode_keys_per_step(Rows);
  const detail::Problem& p = *plan.problem;
  const ConstTensorView& keys = p.k;
  const bool direct = keys.dtype() == DType::f32 && keys.stride(3) == 1;
  // bf16 and f16 rows of whole vectors are widened in registers, without a converted copy; int8 and
  // int4 rows (whole blocks) dequantised in registers.
  const bool widened = keys.stride(3) == 1 && ws.d_k % kLanes == 0 &&
                       (keys.dtype() == DType::bf16 || keys.dtype() == DType::f16 ||
                        (is_quantized(keys.dtype()) && ws.d_k == p.sizes.d_k));
  const std::int64_t vector_end = ws.d_k / kLanes * kLanes;
  const RowPrefetcher prefetch_key(keys, item.kv_head), prefetch_value(p.v, item.kv_head);
  const bool values_into_l2 = !plan.short_decode_blocks && p.v.dtype() == DType::f32;
  const bool value_records = is_quantized(p.v.dtype());
  // Where each key's rows lie (stored_row looks a cached key up in its block table), worked out once
  // for the block's keys and the few past it whose key rows are requested ahead: looked up at each
  // use (the key row, its request ahead, the value row's request), the addressing was a third of
  // the int8 score loop's samples on an Intel Xeon (docs/tuning.md, "Quantized caches").
  const std::int64_t ahead = std::clamp<std::int64_t>(ahead_end, width, width + kPrefetchRows);
  const char* key_at[kMaxKeyBlock + kPrefetchRows];
  const char* value_at[kMaxKeyBlock];
  for (std::int64_t j = 0; j < ahead; ++j) {
    const StoredRow at = stored_row(p, item.batch, j0 + j);
    key_at[j] = prefetch_key.row_begin(at);
    if (j < width) value_at[j] = prefetch_value.row_begin(at);
  }
  // The key rows' dtype as the dot products read them (other rows are converted to f32 first),
  // chosen once for the block.
  with_stored_dtype(widened ? keys.dtype() : DType::f32, [&](auto stored) {
    using Element = StoredElement<stored()>;
    // Key row j as the dot products read it; `slot` picks the converted copy's buffer.
    auto key_row = [&](std::int64_t j, std::int64_t slot) -> const Element* {
      // Decoding streams K and V from memory once: ask for rows ahead of use, so that their latency
      // overlaps the arithmetic (the hardware prefetcher alone leaves single-thread decode latency-bound).
      // Key rows a few ahead, across the end of the block; value row j now, read once the block's
      // scores are done, a block later. With the forward's blocks (256 KiB of f32 values at d = 128
      // on AVX-512), f32 value rows go to L2: requested into L1 they hold the miss buffers the key
      // rows need, for lines evicted before use. With short blocks (decode_key_block, Intel) they go
      // to L1. The distance and the levels were measured: docs/tuning.md, "Requesting rows ahead".
      if ((direct || widened) && j + kPrefetchRows < ahead) {
        if constexpr (stored() == DType::int8 || stored() == DType::int4) {
          prefetch_key.records(key_at[j + kPrefetchRows]);
        } else {
          prefetch_key(key_at[j + kPrefetchRows]);
        }
      }
      if (values_into_l2) {
        prefetch_value.into_l2(value_at[j]);
      } else if (value_records) {
        prefetch_value.records(value_at[j]);
      } else {
        prefetch_value(value_at[j]);
      }
      if constexpr (stored() != DType::f32) {
        return reinterpret_cast<const Element*>(key_at[j]);
      } else if (direct) {
        return reinterpret_cast<const float*>(key_at[j]);
      } else {
        float* row = ws.key_rows + slot * ws.d_k;
        const StoredRow at = stored_row(p, item.batch, j0 + j);
        load_row_f32(keys, at.outer, item.kv_head, at.row, row, ws.d_k);
        return row;
      }
    };
    // Scores of keys j .. j + Keys: the vector part by dot_with_rows, then a scalar tail of d_k.
    // Inlined into the key loop (GCC otherwise calls it once per step, its accumulators on the stack).
    auto score_keys = [&]<std::int64_t Keys>(std::int64_t j, std::integral_constant<std::int64_t, Keys>)
                          __attribute__((always_inline)) {
      const Element* k[Keys];
      for (std::int64_t t = 0; t < Keys; ++t) k[t] = key_row(j + t, t);
      Vec acc[Keys][Rows];
      if constexpr (KeyPairs && stored() == DType::bf16) {
        dot_pairs_with_rows<Rows, Keys>(reinterpret_cast<const std::uint32_t*>(ws.q_bf16), ws.d_k / 2, ws.d_k / 2, k, acc);
      } else {
        dot_with_rows<Rows, Keys, stored()>(ws.q, ws.d_k, vector_end, k, acc);
      }
      if constexpr (stored() == DType::f32) {  // widened rows are whole vectors: no tail
        if (vector_end < ws.d_k) {
          float sums[Keys][Rows];
          reduce_add_each<Keys * Rows>(&acc[0][0], &sums[0][0]);
          for (std::int64_t t = 0; t < Keys; ++t)
            for (std::int64_t r = 0; r < Rows; ++r) {
              for (std::int64_t c = vector_end; c < ws.d_k; ++c) sums[t][r] += ws.q[r * ws.d_k + c] * k[t][c];
              ws.scores[r * kKeyBlock + j + t] = sums[t][r] * scale;
            }
          return;
        }
      }
      store_scaled_sums<Rows, Keys>(&acc[0][0], scale, ws.scores + j);
    };
    std::int64_t j = 0;
    for (; j + kKeys <= width; j += kKeys) score_keys(j, std::integral_constant<std::int64_t, kKeys>{});
    for (; j < width; ++j) score_keys(j, std::integral_constant<std::int64_t, 1>{});
  });
  for (std::int64_t r = 0; r < Rows; ++r) std::fill(ws.scores + r * kKeyBlock + width, ws.scores + r * kKeyBlock + cols, 0.0f);
}

// acc[r][·] = acc[r][·] · alpha[r] + Σ_j p[r][j] · v[j][·] over the tile's first Rows rows and its
// `width` keys up to its last visible one (p is 0 past it: on the causal diagonal, summing only
// those rather than whole tiles of keys saves a tile's half on average).
template <std::int64_t Rows = kTileRows, class Between = NothingBetweenChunks>
void accumulate_pv(ForwardWorkspace& ws, std::int64_t tile, std::int64_t width, const float* alpha,
                   Between&& between = {}) {
  tile_a_b<Rows>(ws.scores, kKeyBlock, ws.v, ws.d_v, width, ws.d_v, alpha, ws.acc + tile * ws.d_v, ws.d_v, between);
}

// The same sum for a decode tile, straight from the value rows as stored (f32, or bf16 and f16
// widened in registers), without the copy pack_values makes: V is read from memory once either way,
// and the copy cost as much as the arithmetic. Only the first `width` keys of the block are summed:
// the tile's keys up to its last visible one (p is 0 past it, and not computed). Returns false,
// leaving acc as it was, if one of those values (or a sum) is NaN or ±inf: the caller then takes the
// seen-only sum, as for a packed block. Rows of unit stride and d_v equal to the padded d_v only.
template <std::int64_t Rows, DType Stored>
bool accumulate_pv_from_value_rows(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item,
                                   std::int64_t j0, std::int64_t width, const float* alpha) {
  const ConstTensorView& values = plan.problem->v;
  const StoredElement<Stored>* rows[kMaxKeyBlock];
  for (std::int64_t j = 0; j < width; ++j) {
    const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
    rows[j] = values.at<StoredElement<Stored>>({at.outer, item.kv_head, at.row, 0});
  }
  // acc as it was, kept in the (here unused) packed-value buffer in case a value is not finite.
  std::copy(ws.acc, ws.acc + Rows * ws.d_v, ws.v);
  // Quantized rows: every row's block parameters as floats, after the copy of acc in the same buffer
  // (kMaxKeyBlock rows of d_v floats hold kMaxTileRows of them, and a block's parameters, at most
  // 2 · d_v / 32 floats per key).
  static_assert(kMaxTileRows + kMaxKeyBlock * 2 / kQuantBlock <= kMaxKeyBlock, "acc's copy and the parameters fit ws.v");
  [[maybe_unused]] float* const params = ws.v + kMaxTileRows * ws.d_v;
  [[maybe_unused]] std::int64_t params_per_row = 0;
  if constexpr (Stored == DType::int8 || Stored == DType::int4) {
    params_per_row = ws.d_v / kQuantBlock * kParamsPerBlock<Stored>;
    for (std::int64_t j = 0; j < width; ++j) block_params_to_float<Stored>(rows[j], ws.d_v, 0, params_per_row, params + j * params_per_row);
  }
  // Whether a value is NaN or ±inf is read off the sums rather than the values: every one of the
  // `width` values enters every sum of its column with a finite p >= 0 (p · ±inf is ±inf, 0 · ±inf
  // and p · NaN are NaN), so a sum is finite only if its values are. A sum that is not finite for
  // another reason (overflow, a NaN carried from an earlier block) takes the seen-only sum too, which
  // gives the same answer more slowly.
  Vec differences = Isa::zero();  // a sum of zeros while every sum is finite, NaN after any other
  for (std::int64_t c0 = 0; c0 < ws.d_v; c0 += kTileCols) {
    float* c = ws.acc + c0;
    Vec acc[Rows][kTileVectors];
    for (std::int64_t r = 0; r < Rows; ++r) {
      const Vec scale = Isa::set1(alpha[r]);
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = Isa::mul(Isa::load(c + r * ws.d_v + v * kLanes), scale);
    }
    for (std::int64_t j = 0; j < width; ++j) {
      Vec bv[kTileVectors];
      if constexpr (Stored == DType::int8 || Stored == DType::int4) {  // a tile's columns lie in one block
        static_assert(kQuantBlock % kTileCols == 0);
        const BlockScale scale = block_scale<Stored>(params + j * params_per_row + c0 / kQuantBlock * kParamsPerBlock<Stored>);
        for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = load_quantized<Stored>(rows[j], c0 + v * kLanes, scale);
      } else {
        for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = load_stored<Stored>(rows[j] + c0 + v * kLanes);
      }
      for (std::int64_t r = 0; r < Rows; ++r) {
        const Vec pr = Isa::set1(ws.scores[r * kKeyBlock + j]);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = Isa::fma(pr, bv[v], acc[r][v]);
      }
    }
    for (std::int64_t r = 0; r < Rows; ++r)
      for (std::int64_t v = 0; v < kTileVectors; ++v) {
        differences = Isa::add(differences, Isa::sub(acc[r][v], acc[r][v]));  // x − x is NaN exactly for ±inf and NaN
        Isa::store(c + r * ws.d_v + v * kLanes, acc[r][v]);
      }
  }
  if (Isa::any_set(Isa::or_nan(Isa::zero(), differences))) {
    std::copy(ws.v, ws.v + Rows * ws.d_v, ws.acc);
    return false;
  }
  return true;
}

std::int64_t pair_count(std::int64_t elements) { return (elements + 1) / 2; }

// p_pairs ← the probabilities of the tile's first Rows rows rounded to bf16 as pairs of consecutive
// keys (one instruction per 32 probabilities on the real target), over its `width` keys up to its
// last visible one. The partner of an odd last key is the next column's p: 0 where the scores were
// masked past the tile's keys, otherwise the caller's to clear.
template <std::int64_t Rows = kTileRows, class I = Isa>
void round_tile_into_pairs(ForwardWorkspace& ws, std::int64_t width) {
  static_assert(kTileCols % (2 * kLanes) == 0, "a tile's columns are whole groups of 2·kLanes probabilities");
  const std::int64_t pairs = pair_count(width);
  for (std::int64_t r = 0; r < Rows; ++r)
    for (std::int64_t c0 = 0; c0 < 2 * pairs; c0 += 2 * kLanes)
      I::round_into_pairs(ws.scores + r * kKeyBlock + c0, ws.p_pairs + r * (kKeyBlock / 2) + c0 / 2);
}

// The same sum with bf16 dot products, for bf16 value rows on a bf16-dot target: the rows' values
// paired along keys in registers (pair_rows_32), p rounded to bf16 into pairs along keys. An odd last key
// pairs with itself and a zero probability. Returns false, leaving acc as it was, as the float32 sum.
template <std::int64_t Rows, class I = Isa>
bool accumulate_pv_pairs_from_value_rows(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item,
                                         std::int64_t j0, std::int64_t width, const float* alpha) {
  const ConstTensorView& values = plan.problem->v;
  const std::int64_t pairs = pair_count(width);
  const std::uint16_t* rows[kMaxKeyBlock + 1];
  for (std::int64_t j = 0; j < width; ++j) {
    const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
    rows[j] = values.at<std::uint16_t>({at.outer, item.kv_head, at.row, 0});
  }
  rows[width] = rows[width - 1];
  constexpr std::int64_t kHalfBlock = kKeyBlock / 2;
  round_tile_into_pairs<Rows, I>(ws, width);
  if (width % 2 != 0)
    for (std::int64_t r = 0; r < Rows; ++r) ws.p_pairs[r * kHalfBlock + width / 2] &= 0xFFFFu;  // the odd key's partner: probability 0
  std::copy(ws.acc, ws.acc + Rows * ws.d_v, ws.v);  // acc as it was, should a value not be finite
  Vec differences = I::zero();  // as in accumulate_pv_from_value_rows
  static_assert(kTileVectors == 2, "a tile row's columns are the 32 that pair_rows_32 pairs");
  for (std::int64_t c0 = 0; c0 < ws.d_v; c0 += kTileCols) {
    float* c = ws.acc + c0;
    Vec acc[Rows][kTileVectors];  // in the target's pair order
    for (std::int64_t r = 0; r < Rows; ++r) {
      const Vec scale = I::set1(alpha[r]);
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = I::mul(I::load(c + r * ws.d_v + v * kLanes), scale);
      I::to_pair_order(acc[r][0], acc[r][1]);
    }
    for (std::int64_t j = 0; j < pairs; ++j) {
      typename I::Pairs bv[kTileVectors];
      I::pair_rows_32(rows[2 * j] + c0, rows[2 * j + 1] + c0, bv);
      for (std::int64_t r = 0; r < Rows; ++r) {
        const typename I::Pairs pr = I::broadcast_pair(ws.p_pairs[r * kHalfBlock + j]);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = I::dot_bf16(acc[r][v], pr, bv[v]);
      }
    }
    for (std::int64_t r = 0; r < Rows; ++r) {
      I::from_pair_order(acc[r][0], acc[r][1]);
      for (std::int64_t v = 0; v < kTileVectors; ++v) {
        differences = I::add(differences, I::sub(acc[r][v], acc[r][v]));
        I::store(c + r * ws.d_v + v * kLanes, acc[r][v]);
      }
    }
  }
  if (I::any_set(I::or_nan(I::zero(), differences))) {
    std::copy(ws.v, ws.v + Rows * ws.d_v, ws.acc);
    return false;
  }
  return true;
}

// accumulate_pv_from_value_rows for the tile's live rows and the values' dtype.
// With value_pairs (bf16 values on a bf16-dot target), by bf16 dot products.
bool accumulate_pv_in_place(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
                            std::int64_t width, const float* alpha, std::int64_t live_rows, bool value_pairs) {
  bool finite = false;
  with_live_rows(live_rows, [&](auto rows) {
    if constexpr (Isa::kDotBf16) {
      if (value_pairs) {
        finite = accumulate_pv_pairs_from_value_rows<rows()>(plan, ws, item, j0, width, alpha);
        return;
      }
    }
    with_stored_dtype(plan.problem->v.dtype(), [&](auto stored) {
      finite = accumulate_pv_from_value_rows<rows(), stored()>(plan, ws, item, j0, width, alpha);
    });
  });
  return finite;
}

// The same sum for a value block holding NaN or ±inf: only keys the row can see contribute, so a
// masked key's values never reach the output (0 · NaN would). Rare, so plain loops.
void accumulate_pv_seen_only(ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, const float* alpha) {
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    float* a = ws.acc + (tile + r) * ws.d_v;
    for (std::int64_t c = 0; c < ws.d_v; ++c) a[c] *= alpha[r];
    for (std::int64_t j = 0; j < cols; ++j) {
      if (!ws.seen[r * kKeyBlock + j]) continue;
      const float p = ws.scores[r * kKeyBlock + j];
      for (std::int64_t c = 0; c < ws.d_v; ++c) a[c] += p * ws.v[j * ws.d_v + c];
    }
  }
}

// ---- packing: queries once per item, keys and values once per key block ----

// Fills row_info and the queries; rows past the item's last are empty (first > last).
void prepare_rows(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item) {
  const detail::Problem& p = *plan.problem;
  const std::int64_t used_rows = plan.group * item.queries;
  for (std::int64_t r = 0; r < ws.rows; ++r) {
    float* q_row = ws.q + r * ws.d_k;
    if (r >= used_rows) {
      ws.row_info[r] = RowInfo{};
      std::fill(q_row, q_row + ws.d_k, 0.0f);
      continue;
    }
    const std::int64_t head = item.kv_head * plan.group + r / item.queries, query = item.first_query + r % item.queries;
    ws.row_info[r] = make_row_info(p, item.batch, head, query);
    const StoredRow at = query_row(p, item.batch, query);
    load_row_f32(p.q, at.outer, head, at.row, q_row, ws.d_k);
  }
}

// Packs K[b, g, j0 .. j0 + width) into key panels, zero-padded to `cols` keys: kLanes × kLanes
// transposes in registers, reading f32 rows in place and other dtypes through a converted copy.
void pack_keys(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
               std::int64_t width, std::int64_t cols) {
  const ConstTensorView& keys = plan.problem->k;
  const bool in_place = keys.dtype() == DType::f32 && keys.stride(3) == 1;
  for (std::int64_t p0 = 0; p0 < cols; p0 += kTileCols) {
    const float* rows[kTileCols];
    for (std::int64_t t = 0; t < kTileCols; ++t) {
      const std::int64_t j = p0 + t;
      const StoredRow at = j < width ? stored_row(*plan.problem, item.batch, j0 + j) : StoredRow{};
      if (j >= width) {
        rows[t] = ws.zero_row;
      } else if (in_place) {
        rows[t] = keys.at<float>({at.outer, item.kv_head, at.row, 0});
      } else {
        load_row_f32(keys, at.outer, item.kv_head, at.row, ws.key_rows + t * ws.d_k, ws.d_k);
        rows[t] = ws.key_rows + t * ws.d_k;
      }
    }
    pack_panels(rows, kTileCols, ws.d_k, ws.k_t + p0 * ws.d_k);
  }
}

// v[j][c] = V[b, g, j0 + j, c], zero-padded to whole tiles. Rows of unit stride are read in
// place (f16 and bf16 widened in registers on the way), others through a converted copy. Returns
// whether every value is finite.
bool pack_values(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
                 std::int64_t width, std::int64_t cols) {
  const ConstTensorView& values = plan.problem->v;
  const std::int64_t d_v = plan.problem->sizes.d_v;
  const DType dtype = values.dtype();
  const bool in_place = value_rows_in_place(*plan.problem, ws);
  float* converted = reinterpret_cast<float*>(ws.bf16_rows);  // [d_v] floats of scratch
  Vec differences = Isa::zero();  // a sum of zeros while every value is finite, NaN after any other
  for (std::int64_t j = 0; j < cols; ++j) {
    const void* row = converted;
    DType row_dtype = DType::f32;
    if (j >= width) {
      std::fill(converted, converted + ws.d_v, 0.0f);
    } else {
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
      if (in_place) {
        row = static_cast<const char*>(values.data()) +
              (at.outer * values.stride(0) + item.kv_head * values.stride(1) + at.row * values.stride(2)) *
                  element_bytes(dtype);
        row_dtype = dtype;
      } else {
        load_row_f32(values, at.outer, item.kv_head, at.row, converted, d_v);
        std::fill(converted + d_v, converted + ws.d_v, 0.0f);
      }
    }
    float* out = ws.v + j * ws.d_v;
    const std::int64_t padded_d_v = ws.d_v;
    with_stored_dtype(row_dtype, [&](auto stored) {
      const auto* x = static_cast<const StoredElement<stored()>*>(row);
      for (std::int64_t c0 = 0; c0 < padded_d_v; c0 += kLanes) {
        const Vec v = load_row_vector<stored()>(x, padded_d_v, c0);
        Isa::store(out + c0, v);
        differences = Isa::add(differences, Isa::sub(v, v));  // x − x is NaN exactly for ±inf and NaN
      }
    });
  }
  return !Isa::any_set(Isa::or_nan(Isa::zero(), differences));
}

// ---- the bf16-dot path: targets with bf16 dot products (Isa::kDotBf16), when q, k and v are bf16 ----
//
// Q·Kᵀ and P·V take pairs of bf16 values straight from the inputs (products exact, sums in float32),
// K packed as pairs along d_k, V as pairs along keys, and P rounded to bf16 before P·V, as
// FlashAttention and torch do; the row sums l keep the unrounded P. The same rounding of P applies on
// every path of such a target (decode tiles read K and V where they are stored, as pairs when the
// rows allow it, else widened to float32 with the rounded P), so a target gives one answer whichever
// path a call takes.

bool uses_bf16_dot(const detail::Problem& p) {
  return Isa::kDotBf16 && p.q.dtype() == DType::bf16 && p.k.dtype() == DType::bf16 && p.v.dtype() == DType::bf16;
}

#include "cpu/bf16_bits.inl"

// `count` elements of row (b, h, i) of a bf16 tensor as bf16 bits, zero-padded to `padded`.
void load_row_bf16(const ConstTensorView& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t count,
                   std::int64_t padded, std::uint16_t* out) {
  const auto* row = static_cast<const std::uint16_t*>(t.data()) + b * t.stride(0) + h * t.stride(1) + i * t.stride(2);
  if (t.stride(3) == 1) {
    std::memcpy(out, row, static_cast<std::size_t>(count) * sizeof(std::uint16_t));
  } else {
    for (std::int64_t c = 0; c < count; ++c) out[c] = row[c * t.stride(3)];
  }
  std::fill(out + count, out + padded, std::uint16_t{0});
}

// The queries as bf16 rows of even length (prepare_rows has loaded them as float32 in ws.q).
void prepare_query_pairs(ForwardWorkspace& ws) {
  const std::int64_t stride = 2 * pair_count(ws.d_k);
  for (std::int64_t r = 0; r < ws.rows; ++r) {
    std::uint16_t* out = ws.q_bf16 + r * stride;
    bf16_bits_of_row(ws.q + r * ws.d_k, ws.d_k, out);
    std::fill(out + ws.d_k, out + stride, std::uint16_t{0});
  }
}

// Packs K[b, g, j0 .. j0 + width) into panels of pairs along d_k (zero keys up to `cols`): the same
// in-register transposes as pack_panels, moving 32-bit pairs instead of floats.
void pack_key_pairs(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
                    std::int64_t width, std::int64_t cols) {
  const ConstTensorView& keys = plan.problem->k;
  const std::int64_t pairs = pair_count(ws.d_k);
  const bool in_place = keys.stride(3) == 1 && ws.d_k % 2 == 0;
  float* converted = ws.key_rows;  // [kTileCols][d_k] floats: room for a row of pairs each
  for (std::int64_t p0 = 0; p0 < cols; p0 += kTileCols) {
    const float* rows[kTileCols];
    for (std::int64_t t = 0; t < kTileCols; ++t) {
      const std::int64_t j = p0 + t;
      if (j >= width) {
        rows[t] = ws.zero_row;
        continue;
      }
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
      if (in_place) {
        rows[t] = reinterpret_cast<const float*>(keys.at<bfloat16>({at.outer, item.kv_head, at.row, 0}));
      } else {
        auto* row = reinterpret_cast<std::uint16_t*>(converted + t * ws.d_k);
        load_row_bf16(keys, at.outer, item.kv_head, at.row, ws.d_k, 2 * pairs, row);
        rows[t] = reinterpret_cast<const float*>(row);
      }
    }
    pack_panels(rows, kTileCols, pairs, ws.k_t + p0 * pairs);
  }
}

// v[j/2][c] = (V[j][c], V[j + 1][c]) for even j < cols, c < the padded d_v (zeros past d_v and past
// width). Rows of unit stride whose d_v is whole tiles are read in place; others through a padded
// copy. Returns whether every value is finite (the interleave looks at each pair it writes).
template <class I = Isa>
bool pack_value_pairs(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
                      std::int64_t width, std::int64_t cols) {
  const ConstTensorView& values = plan.problem->v;
  const std::int64_t d_v = plan.problem->sizes.d_v;
  const bool in_place = values.stride(3) == 1 && d_v == ws.d_v;
  auto* out = reinterpret_cast<std::uint32_t*>(ws.v);
  std::uint16_t* copy[2] = {ws.bf16_rows, ws.bf16_rows + ws.d_v};
  bool special = false;
  for (std::int64_t j = 0; j < cols; j += 2) {
    const std::uint16_t* row[2];
    for (std::int64_t e = 0; e < 2; ++e) {
      row[e] = copy[e];
      if (j + e >= width) {
        std::fill(copy[e], copy[e] + ws.d_v, std::uint16_t{0});
        continue;
      }
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j + e);
      if (in_place) {
        row[e] = reinterpret_cast<const std::uint16_t*>(values.at<bfloat16>({at.outer, item.kv_head, at.row, 0}));
      } else {
        load_row_bf16(values, at.outer, item.kv_head, at.row, d_v, ws.d_v, copy[e]);
      }
    }
    for (std::int64_t c = 0; c < ws.d_v; c += kLanes) special |= I::interleave_bf16(row[0] + c, row[1] + c, out + (j / 2) * ws.d_v + c);
  }
  return !special;
}

// scores[r][·] = scale · q[r] · K_jᵀ for the tile's rows, from the pairs.
template <class I = Isa, class Between = NothingBetweenChunks>
void score_tile_bf16(const ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float scale,
                     Between&& between = {}) {
  const std::int64_t pairs = pair_count(ws.d_k);
  tile_a_bt_bf16<I>(ws.q_bf16 + tile * 2 * pairs, 2 * pairs, reinterpret_cast<const std::uint32_t*>(ws.k_t), pairs,
                    cols, scale, ws.scores, kKeyBlock, between);
}

// p ← p rounded to bf16, in place over the tile's rows, before P·V.
template <class I = Isa>
void round_probabilities(ForwardWorkspace& ws, std::int64_t cols) {
  for (std::int64_t r = 0; r < kTileRows; ++r)
    for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) {
      float* p = ws.scores + r * kKeyBlock + c0;
      I::store(p, I::round_to_bf16(I::load(p)));
    }
}

// acc[r][·] = acc[r][·] · alpha[r] + Σ_j p[r][j] · v[j][·] from the pairs of p (p_pairs) and of the
// value rows, over the tile's `width` keys, as accumulate_pv.
template <class I = Isa, class Between = NothingBetweenChunks>
void accumulate_pv_pairs(ForwardWorkspace& ws, std::int64_t tile, std::int64_t width, const float* alpha,
                         Between&& between = {}) {
  tile_a_b_bf16<I>(ws.p_pairs, kKeyBlock / 2, reinterpret_cast<const std::uint32_t*>(ws.v), ws.d_v, pair_count(width),
                   ws.d_v, alpha, ws.acc + tile * ws.d_v, ws.d_v, between);
}

// ---- biases and masks on one tile of scores ----

// The tile's rows' logits, each row as bias_and_mask_row makes them.
void apply_bias_and_mask(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t tile,
                         std::int64_t j0, std::int64_t width, std::int64_t cols, KeyRange keys) {
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    bias_and_mask_row(*plan.problem, item.batch, ws.row_info[tile + r], keys, j0, width, cols,
                      ws.scores + r * kKeyBlock, ws.mask_row, nullptr);
  }
}

// ---- online softmax ----

// Whether any of x[0 .. count) is NaN (count a multiple of kLanes).
bool has_nan(const float* x, std::int64_t count) {
  Vec nan_seen = Isa::zero();
  for (std::int64_t c0 = 0; c0 < count; c0 += kLanes) nan_seen = Isa::or_nan(nan_seen, Isa::load(x + c0));
  return Isa::any_set(nan_seen);
}

// alpha[r] = e^(old_max[r] − new_max[r]) for the tile's rows, the softmax partial's rescale
// (core/softmax_partial.hpp): 1 for a row with nothing visible yet (both −inf), 0 for its first
// visible block (old max −inf). The vector exp takes kLanes rows at a time: one std::exp per row and
// block took a quarter of the softmax's time (timed alone).
void rescale_factors(const float* old_max, const float* new_max, float* alpha) {
  constexpr std::int64_t kPadded = (kTileRows + kLanes - 1) / kLanes * kLanes;
  float difference[kPadded] = {}, factor[kPadded];
  for (std::int64_t r = 0; r < kTileRows; ++r) difference[r] = detail::SoftmaxPartial::rescale_exponent(old_max[r], new_max[r]);
  for (std::int64_t r = 0; r < kPadded; r += kLanes) Isa::store(factor + r, exp_of_nonpositive<Isa>(Isa::load(difference + r)));
  std::copy(factor, factor + kTileRows, alpha);
}

// For each row of the tile, the block's max merged into the row's running max (new_max) and the
// rescale factor alpha of the old partial: the first half of the online softmax.
void merge_block_max(const ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float* new_max, float* alpha) {
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    const float* s = ws.scores + r * kKeyBlock;
    Vec block_max = Isa::set1(kMinusInf);
    for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) block_max = Isa::max(block_max, Isa::load(s + c0));
    // (+ headroom: 0 but in a redone item, see run_item; −inf + headroom stays −inf)
    const float old_max = ws.row_max[tile + r], candidate = Isa::reduce_max(block_max) + ws.headroom;
    // A NaN score makes the row NaN. The vector max may keep or drop it (it returns its second
    // operand when either is NaN), and either way the row ends NaN: a NaN max makes every p NaN; a
    // finite one leaves p = e^(NaN − max) = NaN in the sum and, through P·V, in every output element.
    // Only a NaN beside scores that are all −inf, with nothing seen before, needs looking for.
    new_max[r] = detail::SoftmaxPartial::merged_max(old_max, candidate);
    if (new_max[r] == kMinusInf && has_nan(s, cols)) new_max[r] = NAN;
  }
  rescale_factors(ws.row_max + tile, new_max, alpha);
}

// The second half: for each row, p = e^(s − new_max) of its cols scores, handed two vectors at a
// time to put(r, c0, p[c0 ..], p[c0 + kLanes ..]) (the second zero past cols), and the row's running
// sum and max updated. A row with nothing visible yet gets p = 0 (its zero accumulator stays).
template <class Put>
void exponentiate_rows(ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, const float* new_max,
                       const float* alpha, Put&& put) {
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    if (new_max[r] == kMinusInf) {
      for (std::int64_t c0 = 0; c0 < cols; c0 += 2 * kLanes) put(r, c0, Isa::zero(), Isa::zero());
      continue;
    }
    const float* s = ws.scores + r * kKeyBlock;
    const Vec m = Isa::set1(new_max[r]);
    auto p_at = [&](std::int64_t c) {  // s − m <= 0: m is the row's max
      return c < cols ? exp_of_nonpositive<Isa>(Isa::sub(Isa::load(s + c), m)) : Isa::zero();
    };
    Vec sum_low = Isa::zero(), sum_high = Isa::zero();  // two sums: neither addition waits on the other
    for (std::int64_t c0 = 0; c0 < cols; c0 += 2 * kLanes) {
      const Vec low = p_at(c0), high = p_at(c0 + kLanes);
      sum_low = Isa::add(sum_low, low);
      sum_high = Isa::add(sum_high, high);
      put(r, c0, low, high);
    }
    ws.row_sum[tile + r] = ws.row_sum[tile + r] * alpha[r] + Isa::reduce_add(Isa::add(sum_low, sum_high));
    ws.row_max[tile + r] = new_max[r];
  }
}

// The block merged into each row's running softmax partial (core/softmax_partial.hpp): new running
// max, the rescale factor alpha of the old accumulator, the probabilities e^(s − max) in place of the
// scores, and the running sum. The accumulator's own update, acc · alpha + P·V, is the P·V
// micro-kernel's.
void online_softmax(ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float* alpha) {
  float new_max[kTileRows];
  merge_block_max(ws, tile, cols, new_max, alpha);
  exponentiate_rows(ws, tile, cols, new_max, alpha, [&](std::int64_t r, std::int64_t c0, Vec low, Vec high) {
    float* p = ws.scores + r * kKeyBlock + c0;
    Isa::store(p, low);
    if (c0 + kLanes < cols) Isa::store(p + kLanes, high);
  });
}

// The same with p rounded to bf16 straight into the pairs P·V reads (round_tile_into_pairs), never
// stored as floats and read back to be rounded: used on the bf16-dot path without dropout, where it
// measured 1.01–1.03× at d = 64 on an AVX-512 Zen 5. See docs/tuning.md, "The online softmax and its
// exp".
template <class I = Isa>
void online_softmax_into_pairs(ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float* alpha) {
  float new_max[kTileRows];
  merge_block_max(ws, tile, cols, new_max, alpha);
  exponentiate_rows(ws, tile, cols, new_max, alpha, [&](std::int64_t r, std::int64_t c0, Vec low, Vec high) {
    I::round_into_pairs(low, high, ws.p_pairs + r * (kKeyBlock / 2) + c0 / 2);
  });
}

// p[r][j] ← p[r][j] · dropout(b, h, i, j0 + j): 1/(1 − p_drop) if kept, 0 if dropped. The row sums
// already hold the undropped probabilities, as the softmax's normaliser must.
void apply_dropout(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t tile,
                   std::int64_t j0, std::int64_t width) {
  const detail::Problem& o = *plan.problem;
  const float keep_scale = o.f32.keep_scale, threshold = o.f32.dropout_threshold;
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    const RowInfo& info = ws.row_info[tile + r];
    if (info.first > info.last) continue;
    float* p = ws.scores + r * kKeyBlock;
    for (std::int64_t j = 0; j < width; j += 4) {  // one Philox call draws four consecutive keys
      const detail::Philox4x32 bits = detail::philox4x32_10(
          {static_cast<std::uint32_t>((j0 + j) >> 2), static_cast<std::uint32_t>(info.query),
           static_cast<std::uint32_t>(info.head), static_cast<std::uint32_t>(item.batch)},
          o.seed);
      for (std::int64_t t = 0; t < 4 && j + t < width; ++t) {
        const bool keep = detail::uniform_from_bits(bits[static_cast<std::size_t>(t)]) >= threshold;
        p[j + t] = keep ? p[j + t] * keep_scale : 0.0f;
      }
    }
  }
}

// ---- one work item ----

// Streams the item's key blocks within the split and leaves (row_max, row_sum, acc) in the workspace.
void stream_key_blocks(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, KeyRange keys) {
  const detail::Problem& p = *plan.problem;
  std::int64_t lo = keys.end, hi = keys.begin - 1;  // union of the rows' visible keys in this split
  for (std::int64_t r = 0; r < ws.rows; ++r) {
    const RowInfo& info = ws.row_info[r];
    if (first_seen(info, keys) > last_seen(info, keys)) continue;
    lo = std::min(lo, first_seen(info, keys));
    hi = std::max(hi, last_seen(info, keys));
  }
  const bool dropout = p.dropout_p > 0;
  const bool bf16_dot = uses_bf16_dot(p);
  // One tile (decoding): scores straight from the key rows, then the values, whose rows the score
  // loop has already requested (in blocks of decode_key_block keys where the plan says so:
  // forward_key_block, geometry.hpp); only the tile's live rows are computed. Several tiles: keys and
  // values are packed once per block for all of them (as bf16 pairs on the bf16-dot path, falling
  // back to float32 values for a block holding NaN or ±inf), and the queries are taken as pairs.
  const bool single_tile = ws.rows == kTileRows;
  const std::int64_t live_rows = plan.group * item.queries;  // of a single tile: the rest are padding
  const bool values_in_place = single_tile && value_rows_in_place(p, ws);
  // Decoding bf16 on a bf16-dot target: bf16 dot products straight from the rows as stored (keys of
  // unit stride, d_k whole vectors of pairs, values read in place), as the packed path multiplies.
  const bool decode_pairs = bf16_dot && values_in_place && p.k.stride(3) == 1 && ws.d_k % (2 * kLanes) == 0;
  if (bf16_dot && (!single_tile || decode_pairs)) prepare_query_pairs(ws);
  float alpha[kTileRows];
  const std::int64_t block = forward_key_block(Isa::kGeometry, single_tile, plan.short_decode_blocks);
  // Blocks start at multiples of `block` from the split's start: the same blocks for any item.
  for (std::int64_t j0 = keys.begin + (lo - keys.begin) / block * block; j0 <= hi; j0 += block) {
    // Keys past the last one any row sees are neither packed nor computed: on the causal diagonal
    // an item's last block is seen only up to its last row.
    const std::int64_t width = std::min(block, hi + 1 - j0);
    const std::int64_t cols = round_up(width, kTileCols);
    bool values_finite = true, value_pairs = false;
    if constexpr (Isa::kDotBf16) {
      if (!single_tile && bf16_dot) {
        pack_key_pairs(plan, ws, item, j0, width, cols);
        value_pairs = pack_value_pairs(plan, ws, item, j0, width, cols);
        if (!value_pairs) values_finite = pack_values(plan, ws, item, j0, width, cols);
      }
    }
    if (!single_tile && !bf16_dot) {
      pack_keys(plan, ws, item, j0, width, cols);
      values_finite = pack_values(plan, ws, item, j0, width, cols);
    }
    // While this block's tiles compute, the next block's key and value rows are requested, a share
    // per tile, so that packing it finds them in cache rather than waiting on memory.
    const std::int64_t next = j0 + block, next_width = std::min(block, std::min(keys.end, hi + 1) - next);
    const std::int64_t tiles = ws.rows / kTileRows, rows_per_tile = next_width > 0 ? (next_width + tiles - 1) / tiles : 0;
    const RowPrefetcher prefetch_key(p.k, item.kv_head), prefetch_value(p.v, item.kv_head);
    for (std::int64_t tile = 0; tile < ws.rows; tile += kTileRows) {
      // Columns past the tile's last visible key, from the next vector on, are not computed at all.
      const std::int64_t tile_width = seen_width(ws.row_info + tile, kTileRows, keys, j0, width);
      const std::int64_t tile_cols = round_up(tile_width, kLanes);
      // This tile's share of the next block's rows, spread over its score and P·V column chunks.
      const std::int64_t first = tile / kTileRows * rows_per_tile;
      SpreadRowPrefetch prefetch_next(p, item.batch, prefetch_key, prefetch_value, next, first,
                                      single_tile ? first : std::min(next_width, first + rows_per_tile),
                                      (tile_cols + ws.d_v) / kTileCols);
      if (tile_width == 0) continue;  // a fully masked tile: skipped without computing
      // A tile whose rows' scores are all their logits skips the rows' bias-and-mask calls.
      bool logits = true;
      for (std::int64_t r = 0; r < kTileRows && logits; ++r)
        logits = scores_are_logits(p, ws.row_info[tile + r], keys, j0, tile_width, tile_cols);
      if (single_tile) {
        with_live_rows(live_rows, [&](auto rows) {
          if constexpr (Isa::kDotBf16) {
            if (decode_pairs) return score_tile_from_key_rows<rows(), true>(plan, ws, item, j0, width, cols, p.f32.scale, hi + 1 - j0);
          }
          score_tile_from_key_rows<rows()>(plan, ws, item, j0, width, cols, p.f32.scale, hi + 1 - j0);
        });
        if (!values_in_place) values_finite = pack_values(plan, ws, item, j0, width, cols);
      } else if (bf16_dot) {
        if constexpr (Isa::kDotBf16) score_tile_bf16(ws, tile, tile_cols, p.f32.scale, prefetch_next);
      } else {
        score_tile(ws, tile, tile_cols, p.f32.scale, prefetch_next);
      }
      if (!logits) apply_bias_and_mask(plan, ws, item, tile, j0, tile_width, tile_cols, keys);
      if (!values_finite || values_in_place) {  // in place, whether values are finite is known only later
        // A decode tile's rows past its live ones see nothing (their scores are all −inf).
        const std::int64_t seen_rows = single_tile ? live_rows : kTileRows;
        for (std::int64_t r = 0; r < kTileRows; ++r) {
          std::uint8_t* seen = ws.seen + r * kKeyBlock;
          const float* scores = ws.scores + r * kKeyBlock;
          if (r >= seen_rows) {
            std::fill(seen, seen + tile_cols, std::uint8_t{0});
            continue;
          }
          for (std::int64_t j = 0; j < tile_cols; ++j) seen[j] = scores[j] != kMinusInf;
        }
      }
      if constexpr (Isa::kDotBf16) {
        if (value_pairs && !dropout) {
          online_softmax_into_pairs(ws, tile, tile_cols, alpha);
          accumulate_pv_pairs(ws, tile, tile_width, alpha, prefetch_next);
          continue;
        }
      }
      online_softmax(ws, tile, tile_cols, alpha);
      if (dropout) apply_dropout(plan, ws, item, tile, j0, tile_width);
      if constexpr (Isa::kDotBf16) {
        if (value_pairs) {  // p rounded after the dropout
          round_tile_into_pairs(ws, tile_width);
          accumulate_pv_pairs(ws, tile, tile_width, alpha, prefetch_next);
          continue;
        }
        if (bf16_dot && !decode_pairs) round_probabilities(ws, tile_cols);  // decode_pairs rounds into pairs
      }
      if (values_in_place) {
        if (!accumulate_pv_in_place(plan, ws, item, j0, tile_width, alpha, live_rows, decode_pairs)) {
          if constexpr (Isa::kDotBf16) {
            if (decode_pairs) round_probabilities(ws, tile_cols);
          }
          pack_values(plan, ws, item, j0, width, cols);
          accumulate_pv_seen_only(ws, tile, tile_cols, alpha);
        }
      } else if (values_finite && single_tile) {
        with_live_rows(live_rows, [&](auto rows) { accumulate_pv<rows()>(ws, tile, tile_width, alpha); });
      } else if (values_finite) {
        accumulate_pv(ws, tile, tile_width, alpha, prefetch_next);
      } else {
        accumulate_pv_seen_only(ws, tile, tile_cols, alpha);
      }
    }
  }
}

void run_item(const ForwardPlan& plan, std::int64_t item_index, std::int64_t split) {
  const ItemCoordinates item = item_coordinates(plan, item_index);
  if (split >= item.splits) return;  // a packed sequence split into fewer key ranges than the most
  ForwardWorkspace& ws = thread_workspace();
  ws.prepare(round_up(plan.group * item.queries, kTileRows), plan.problem->sizes.d_k, plan.padded_d_v);
  prepare_rows(plan, ws, item);
  // Keys past the entry's own count (a cached or packed sequence shorter than m) are never touched:
  // they may lie in blocks the sequence does not hold, or belong to the next sequence.
  const std::int64_t begin = split_begin(item, split);
  const std::int64_t key_end = std::min(split_end(plan, item, split), plan.problem->key_count(item.batch));
  const KeyRange keys{begin, std::max(key_end, begin)};
  const std::int64_t live_rows = plan.group * item.queries;
  auto stream = [&](float headroom) {
    ws.headroom = headroom;
    std::fill(ws.row_max, ws.row_max + ws.rows, kMinusInf);
    std::fill(ws.row_sum, ws.row_sum + ws.rows, 0.0f);
    std::fill(ws.acc, ws.acc + ws.rows * ws.d_v, 0.0f);
    stream_key_blocks(plan, ws, item, keys);
    ws.headroom = 0;
  };
  stream(0);
  // Σ p·v of large finite values can overflow although the output, a weighted mean, is finite: the
  // item is then streamed again with headroom (core/softmax_partial.hpp), which scales every p down
  // so that no sum can. Checking costs a pass over the accumulators; only items with a non-finite
  // one (overflow, or NaN and ±inf from the inputs, which the second pass reproduces) pay twice.
  if (!all_finite(ws.acc, live_rows * ws.d_v)) {
    stream(detail::SoftmaxPartial::headroom_for(keys.end - keys.begin, plan.problem->f32.keep_scale));
  }

  for (std::int64_t r = 0; r < live_rows; ++r) {
    float* acc = ws.acc + r * ws.d_v;
    if (item.splits > 1) {
      float* out = plan.partial(item_index, split, r);
      out[0] = ws.row_max[r];
      out[1] = ws.row_sum[r];
      std::copy(acc, acc + ws.d_v, out + 2);
    } else {
      finalize_row(plan, item_index, r, ws.row_info[r].head, ws.row_info[r].query,
                   {.max = ws.row_max[r], .sum = ws.row_sum[r], .acc = acc});
    }
  }
}

// probs[b, h, i, j] = exp(s_ij − lse_i) for every key, after the item's log-sum-exp is known:
// a second sweep that recomputes the scores (probabilities are for inspection, not the hot path).
void run_probs_item(const ForwardPlan& plan, std::int64_t item_index) {
  const detail::Problem& p = *plan.problem;
  const ItemCoordinates item = item_coordinates(plan, item_index);
  ForwardWorkspace& ws = thread_workspace();
  ws.prepare(round_up(plan.group * item.queries, kTileRows), p.sizes.d_k, plan.padded_d_v);
  prepare_rows(plan, ws, item);
  const TensorView& probs = *plan.outputs->probs;
  const std::int64_t key_count = p.key_count(item.batch);  // m, or a packed sequence's own (the rest is zeroed)
  const KeyRange keys{0, key_count};
  for (std::int64_t j0 = 0; j0 < key_count; j0 += kKeyBlock) {
    const std::int64_t width = std::min(kKeyBlock, key_count - j0);
    const std::int64_t cols = round_up(width, kTileCols);
    pack_keys(plan, ws, item, j0, width, cols);
    for (std::int64_t tile = 0; tile < ws.rows; tile += kTileRows) {
      score_tile(ws, tile, cols, p.f32.scale);
      apply_bias_and_mask(plan, ws, item, tile, j0, width, cols, keys);
      for (std::int64_t r = 0; r < kTileRows && tile + r < plan.group * item.queries; ++r) {
        const RowInfo& info = ws.row_info[tile + r];
        const float row_lse = plan.row_lse[item_index * plan.padded_rows + tile + r];
        float* s = ws.scores + r * kKeyBlock;
        if (row_lse == kMinusInf) {  // no visible key: probabilities are 0, not exp(−inf + inf)
          std::fill(s, s + cols, 0.0f);
        } else {
          const Vec lse = Isa::set1(row_lse);
          for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) Isa::store(s + c0, exp_of_difference<Isa>(Isa::load(s + c0), lse));
        }
        store_row_part(s, probs, item.batch, info.head, info.query, j0, width);
      }
    }
  }
}

// out[i] = in[i] rounded to bf16 as bf16_bits_nearest_even rounds it: the output rows of bf16 calls
// (finalize_row), a vector at a time.
void round_to_bf16(const float* in, std::uint16_t* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) Isa::store_bf16(out + i, Isa::load(in + i));
  for (; i < count; ++i) out[i] = detail::bf16_bits_nearest_even(std::bit_cast<std::uint32_t>(in[i]));
}

// out[i] = Exp(in[i]) with one of the vector exps of simd/math.hpp, for the tests of their error.
template <Vec (*Exp)(Vec)>
void exp_array(const float* in, float* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) Isa::store(out + i, Exp(Isa::load(in + i)));
  for (; i < count; ++i) {  // the tail through a padded vector
    float lane_in[kLanes] = {}, lane_out[kLanes];
    lane_in[0] = in[i];
    Isa::store(lane_out, Exp(Isa::load(lane_in)));
    out[i] = lane_out[0];
  }
}

}  // namespace attnkit::cpu::ATTNKIT_ISA_NAMESPACE

