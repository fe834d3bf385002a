// Decoding: the scores and the P·V sum of an item of a single tile, read from the key and value rows
// where they are stored (f32, bf16, f16, int8, int4, fp8), without packing: with one tile there is no
// reuse to pay for a copy. Included by flash_forward.inl inside the target's namespace; no include
// guard on purpose.

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
// The live rows up to which a tile target decodes bf16 from the rows, on vectors, rather than on its
// tiles: a single tile of a GQA group reads each key and value once for a few query rows, too little
// work per byte to fill a tile, and on an Intel Xeon with AMX (Sapphire Rapids) the vector path's
// pair products decoded 1.5x faster than the tiles (m = 32768, 4 rows; docs/tuning.md, "AMX tiles"). Up to
// AVX-512's 8 rows, whose accumulators fit the registers; larger groups keep the tiles.
inline constexpr std::int64_t kTileTargetVectorDecodeRows = 8;
constexpr std::int64_t kDecodeRows = Isa::kTiles ? kTileTargetVectorDecodeRows : kTileRows;

// For every live row count, its accumulators, key vectors and query vector fit the registers.
constexpr bool decode_steps_fit_registers() {
  for (std::int64_t rows = 1; rows <= kDecodeRows; ++rows) {
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

// The operand kinds of decoding's dot products, each a way to load a vector of a query row and of a
// key row where it is stored and multiply-add them into float32 accumulators:
//   F32RowOperands<Stored>  query rows of float32, key rows of `Stored` (f32, bf16, f16) widened
//                           to float32 in registers; an FMA per element;
//   Bf16PairRowOperands     query rows of bf16 pairs (ws.q_bf16) and bf16 key rows read as pairs
//                           along d_k (targets whose Isa::kDotBf16).
// Column c counts the query's elements (float32) or pairs (bf16 pairs).
template <DType Stored>
struct F32RowOperands {
  using Query = float;
  using Key = StoredElement<Stored>;
  static Vec load_query(const Query* row, std::int64_t c) { return Isa::load(row + c); }
  static Vec load_key(const Key* row, std::int64_t c) { return load_stored<Stored>(row + c); }
  static Vec multiply_add(Vec acc, Vec q, Vec k) { return Isa::fma(q, k, acc); }
};

template <class I = Isa>
struct Bf16PairRowOperands {
  using Query = std::uint32_t;
  using Key = std::uint16_t;
  // (Deduced return types: the class may be named on targets without pairs, in code they discard.)
  static auto load_query(const Query* row, std::int64_t c) { return I::load_pairs(row + c); }
  static auto load_key(const Key* row, std::int64_t c) { return I::load_pairs(reinterpret_cast<const std::uint32_t*>(row + 2 * c)); }
  static Vec multiply_add(Vec acc, auto q, auto k) { return I::dot_bf16(acc, q, k); }
};

// acc[t][r] = q[r] · k[t] as kLanes partial sums, over the first `count` columns (a multiple of
// kLanes) for the Rows query rows, `stride` columns apart, and the Keys key rows k[t]. Each sum runs
// over the vectors in the same order whatever Keys is, so a score does not depend on how keys are
// grouped. Inlined into the key loop: called, a step (16 vectors at d_k = 128) pays a call and its
// accumulators zeroed on the stack (bf16 decoding measured 1.13x from cache, 1.07x from memory on a
// Zen 3; see docs/tuning.md, "The score loop").
template <std::int64_t Rows, std::int64_t Keys, class Operands>
__attribute__((always_inline)) inline void dot_with_rows(const typename Operands::Query* q, std::int64_t stride,
                                                         std::int64_t count, const typename Operands::Key* const* k,
                                                         Vec (&acc)[Keys][Rows]) {
  for (auto& key : acc)
    for (Vec& a : key) a = Isa::zero();
  for (std::int64_t c = 0; c < count; c += kLanes) {
    decltype(Operands::load_key(k[0], 0)) kc[Keys];
    for (std::int64_t t = 0; t < Keys; ++t) kc[t] = Operands::load_key(k[t], c);
    for (std::int64_t r = 0; r < Rows; ++r) {
      const auto qr = Operands::load_query(q + r * stride, c);
      for (std::int64_t t = 0; t < Keys; ++t) acc[t][r] = Operands::multiply_add(acc[t][r], qr, kc[t]);
    }
  }
}

// The same partial sums from quantized key rows (int8, int4 or fp8, whole blocks): each key's block
// parameters converted a group of blocks at a time, then each block's vectors in the order above.
template <std::int64_t Rows, std::int64_t Keys, DType Stored>
__attribute__((always_inline)) inline void dot_with_quantized_rows(const float* q, std::int64_t d_k, std::int64_t count,
                                                                   const std::byte* const* k, Vec (&acc)[Keys][Rows]) {
  for (auto& key : acc)
    for (Vec& a : key) a = Isa::zero();
  constexpr std::int64_t kGroupBlocks = 4, kPerBlock = kParamsPerBlock<Stored>;
  for (std::int64_t g0 = 0; g0 < count; g0 += kGroupBlocks * kQuantBlock) {
    const std::int64_t blocks = std::min(kGroupBlocks, (count - g0) / kQuantBlock);
    float params[Keys][kGroupBlocks * kPerBlock];
    for (std::int64_t t = 0; t < Keys; ++t) block_params_to_float<Stored>(k[t], d_k, g0 / kQuantBlock, blocks * kPerBlock, params[t]);
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
}

// The same partial sums from key rows of one group quantised per channel: the group's scale (and
// offset) vectors loaded once per column vector for all Keys keys, the vectors in the order above.
template <std::int64_t Rows, std::int64_t Keys, DType Stored>
__attribute__((always_inline)) inline void dot_with_channel_group_rows(const float* q, std::int64_t d_k,
                                                                       const std::byte* const* k, const float* scale,
                                                                       const float* offset, Vec (&acc)[Keys][Rows]) {
  for (auto& key : acc)
    for (Vec& a : key) a = Isa::zero();
  // The records' last lines, which the codes may not reach (the parameter bytes lie there): asked
  // for first, as reading a per-token record's parameters does. Without it, int8 keys per channel
  // decoded from memory at 0.85x the per-token step on a Zen 4 (docs/tuning.md).
  for (std::int64_t t = 0; t < Keys; ++t) __builtin_prefetch(k[t] + quantized_row_bytes(Stored, d_k) - 1);
  for (std::int64_t c = 0; c < d_k; c += kLanes) {
    Vec kc[Keys];
    for (std::int64_t t = 0; t < Keys; ++t) kc[t] = load_channel_quantized<Stored>(k[t], c, scale, offset);
    for (std::int64_t r = 0; r < Rows; ++r) {
      const Vec qr = Isa::load(q + r * d_k + c);
      for (std::int64_t t = 0; t < Keys; ++t) acc[t][r] = Isa::fma(qr, kc[t], acc[t][r]);
    }
  }
}

// How decoding reads the key rows: in place (f32 of unit stride; bf16 and f16 rows of whole vectors,
// widened in registers; quantized rows of whole blocks, dequantised in registers), or through a
// float32 copy (any other layout). `dtype` is the rows' dtype as the dot products read them.
struct KeyRowReads {
  bool in_place;
  DType dtype;
};
KeyRowReads key_row_reads(const detail::Problem& p, const ForwardWorkspace& ws) {
  const ConstTensorView& keys = p.k;
  const bool direct = keys.dtype() == DType::f32 && keys.stride(3) == 1;
  const bool widened = keys.stride(3) == 1 && ws.d_k % kLanes == 0 &&
                       (keys.dtype() == DType::bf16 || keys.dtype() == DType::f16 ||
                        (is_quantized(keys.dtype()) && ws.d_k == p.sizes.d_k));
  return {direct || widened, widened ? keys.dtype() : DType::f32};
}

// Decoding streams K and V from memory once: it asks for rows ahead of use, so that their latency
// overlaps the arithmetic (the hardware prefetcher alone leaves single-thread decode latency-bound).
// Before key j is read: key row j + kPrefetchRows (across the end of the block; rows read in place
// only), and value row j, read once the block's scores are done, a block later. With the forward's
// blocks (256 KiB of f32 values at d = 128 on AVX-512), f32 value rows go to L2: requested into L1
// they hold the miss buffers the key rows need, for lines evicted before use. With short blocks
// (decode_key_block, Intel) they go to L1. The distance and the levels were measured: docs/tuning.md,
// "Requesting rows ahead".
//
// Where each key's rows lie (stored_row looks a cached key up in its block table) is worked out once
// for the block's keys and the few past it whose key rows are requested ahead: looked up at each use
// (the key row, its request ahead, the value row's request), the addressing was a third of the int8
// score loop's samples on an Intel Xeon (docs/tuning.md, "Quantized caches").
class DecodeRowRequests {
 public:
  DecodeRowRequests(const ForwardPlan& plan, const ItemCoordinates& item, std::int64_t j0, std::int64_t width,
                    std::int64_t ahead_end, bool keys_in_place)
      : keys_(plan.problem->k, item.kv_head),
        values_(plan.problem->v, item.kv_head),
        ahead_(std::clamp<std::int64_t>(ahead_end, width, width + kPrefetchRows)),
        keys_in_place_(keys_in_place),
        values_into_l2_(!plan.short_decode_blocks && plan.problem->v.dtype() == DType::f32),
        value_records_(is_quantized(plan.problem->v.dtype())) {
    for (std::int64_t j = 0; j < ahead_; ++j) {
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
      key_at_[j] = keys_.row_begin(at);
      if (j < width) value_at_[j] = values_.row_begin(at);
    }
  }
  // Key row j where it is stored.
  const char* key(std::int64_t j) const { return key_at_[j]; }
  // The requests before key j is read; quantized key rows are records of any byte length. Inlined
  // from the start: GCC deletes a call whose only effects are prefetches, as if it had none
  // (tests/cpu/check_row_requests.sh checks that the requests are in the code).
  template <bool KeyRecords>
  __attribute__((always_inline)) void before_key(std::int64_t j) const {
    if (keys_in_place_ && j + kPrefetchRows < ahead_) {
      if constexpr (KeyRecords) {
        keys_.records(key_at_[j + kPrefetchRows]);
      } else {
        keys_(key_at_[j + kPrefetchRows]);
      }
    }
    if (values_into_l2_) {
      values_.into_l2(value_at_[j]);
    } else if (value_records_) {
      values_.records(value_at_[j]);
    } else {
      values_(value_at_[j]);
    }
  }

 private:
  RowPrefetcher keys_, values_;
  std::int64_t ahead_;
  bool keys_in_place_, values_into_l2_, value_records_;
  const char* key_at_[kMaxKeyBlock + kPrefetchRows];
  const char* value_at_[kMaxKeyBlock];
};

// acc[t][r] = q[r] · k[t] as kLanes partial sums over the vector part of d_k, by the dot products of
// the key rows' kind: bf16 pairs (KeyPairs), quantized blocks, or float32.
template <std::int64_t Rows, std::int64_t Keys, bool KeyPairs, DType Stored>
__attribute__((always_inline)) inline void key_dot_products(const ForwardWorkspace& ws, std::int64_t vector_end,
                                                            const StoredElement<Stored>* const* k, Vec (&acc)[Keys][Rows]) {
  if constexpr (KeyPairs && Stored == DType::bf16) {
    dot_with_rows<Rows, Keys, Bf16PairRowOperands<>>(reinterpret_cast<const std::uint32_t*>(ws.q_bf16), ws.d_k / 2,
                                                     ws.d_k / 2, k, acc);
  } else if constexpr (is_quantized(Stored)) {
    dot_with_quantized_rows<Rows, Keys, Stored>(ws.q, ws.d_k, vector_end, k, acc);
  } else {
    dot_with_rows<Rows, Keys, F32RowOperands<Stored>>(ws.q, ws.d_k, vector_end, k, acc);
  }
}

// scores[r][j + t] = scale · (the lane sums of acc[t][r] + the scalar tail of d_k past vector_end).
template <std::int64_t Rows, std::int64_t Keys, DType Stored>
__attribute__((always_inline)) inline void store_key_scores(ForwardWorkspace& ws, std::int64_t j, std::int64_t vector_end,
                                                            const StoredElement<Stored>* const* k, const Vec (&acc)[Keys][Rows],
                                                            float scale) {
  if constexpr (Stored == DType::f32) {  // widened rows are whole vectors: no tail
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
}

// The scores of a single-tile item (decoding) read from the key rows as stored, without packing:
// packing the keys would cost more than the arithmetic on them. A few keys per step
// (decode_keys_per_step): vectors along the feature dimension, one accumulator per row and key,
// summed across lanes at the end. Only the tile's Rows live rows are computed (the rest are masked
// whole by apply_bias_and_mask). Rows are requested ahead up to `ahead_end` (keys from j0 the item
// reads, past this block). With KeyPairs (bf16 keys of unit stride on a bf16-dot target, d_k whole
// vectors of pairs), the products are bf16 dot products with the queries' pairs (ws.q_bf16).
template <std::int64_t Rows, bool KeyPairs = false>
void score_tile_from_key_rows(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item,
                              std::int64_t j0, std::int64_t width, std::int64_t cols, float scale_of_scores,
                              std::int64_t ahead_end) {
  constexpr std::int64_t kKeys = decode_keys_per_step(Rows);
  const KeyRowReads reads = key_row_reads(*plan.problem, ws);
  const DecodeRowRequests requests(plan, item, j0, width, ahead_end, reads.in_place);
  const std::int64_t vector_end = ws.d_k / kLanes * kLanes;
  with_stored_dtype(reads.dtype, [&](auto stored) {  // chosen once for the block
    using Element = StoredElement<stored()>;
    // Key row j as the dot products read it; `slot` picks the converted copy's buffer.
    auto key_row = [&](std::int64_t j, std::int64_t slot) -> const Element* {
      requests.before_key<is_quantized(stored())>(j);
      if (stored() != DType::f32 || reads.in_place) return reinterpret_cast<const Element*>(requests.key(j));
      float* row = ws.key_rows + slot * ws.d_k;
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
      load_row_f32(plan.problem->k, at.outer, item.kv_head, at.row, row, ws.d_k);
      return reinterpret_cast<const Element*>(row);
    };
    // Scores of keys j .. j + Keys. Inlined into the key loop (GCC otherwise calls it once per step,
    // its accumulators on the stack).
    auto score_keys = [&]<std::int64_t Keys>(std::int64_t j, std::integral_constant<std::int64_t, Keys>)
                          __attribute__((always_inline)) {
      const Element* k[Keys];
      for (std::int64_t t = 0; t < Keys; ++t) k[t] = key_row(j + t, t);
      Vec acc[Keys][Rows];
      key_dot_products<Rows, Keys, KeyPairs, stored()>(ws, vector_end, k, acc);
      store_key_scores<Rows, Keys, stored()>(ws, j, vector_end, k, acc, scale_of_scores);
    };
    std::int64_t j = 0;
    if constexpr (has_channel_groups(stored())) {
      // Keys in groups quantised per channel, a group's run at a time: its parameters converted
      // once, then its keys a step at a time as below.
      const float* scale = ws.channel_params;
      const float* offset = ws.channel_params + ws.d_k;
      auto score_grouped_keys = [&]<std::int64_t Keys>(std::int64_t j, std::integral_constant<std::int64_t, Keys>)
                                    __attribute__((always_inline)) {
        const std::byte* k[Keys];
        for (std::int64_t t = 0; t < Keys; ++t) k[t] = key_row(j + t, t);
        Vec acc[Keys][Rows];
        dot_with_channel_group_rows<Rows, Keys, stored()>(ws.q, ws.d_k, k, scale, offset, acc);
        store_key_scores<Rows, Keys, stored()>(ws, j, vector_end, k, acc, scale_of_scores);
      };
      const std::int64_t all_grouped = grouped_keys(*plan.problem, item.batch);
      const std::int64_t grouped = std::clamp<std::int64_t>(all_grouped - j0, 0, width);
      while (j < grouped) {
        const std::int64_t first = (j0 + j) - (j0 + j) % kChannelGroup;  // the group's first key
        const std::int64_t run_end = std::min(grouped, first + kChannelGroup - j0);
        const std::byte* rows[kChannelGroup];
        channel_group_rows(*plan.problem, item.batch, item.kv_head, first, rows);
        channel_group_params_to_float<stored()>(rows, ws.d_k, ws.channel_params, ws.channel_params + ws.d_k,
                                                ws.channel_params + 2 * ws.d_k);
        // A group's parameters are read all at once when it starts, up to 31 rows ahead of the rows'
        // requests: those of the group after next are asked for while this one is scored, a row's
        // with each key (all at once, or one group ahead, measured no faster).
        const bool next_group = first + 3 * kChannelGroup <= all_grouped;
        if (next_group) channel_group_rows(*plan.problem, item.batch, item.kv_head, first + 2 * kChannelGroup, rows);
        const std::int64_t params_at = quantized_block_params_at(stored(), ws.d_k, 0);
        for (; j + kKeys <= run_end; j += kKeys) {
          if (next_group)
            for (std::int64_t t = 0; t < kKeys; ++t) __builtin_prefetch(rows[(j0 + j + t) % kChannelGroup] + params_at);
          score_grouped_keys(j, std::integral_constant<std::int64_t, kKeys>{});
        }
        for (; j < run_end; ++j) score_grouped_keys(j, std::integral_constant<std::int64_t, 1>{});
      }
    }
    for (; j + kKeys <= width; j += kKeys) score_keys(j, std::integral_constant<std::int64_t, kKeys>{});
    for (; j < width; ++j) score_keys(j, std::integral_constant<std::int64_t, 1>{});
  });
  for (std::int64_t r = 0; r < Rows; ++r) std::fill(ws.scores + r * kKeyBlock + width, ws.scores + r * kKeyBlock + cols, 0.0f);
}

// The kinds of value rows decoding's P·V reads where they are stored, each a way through one step
// of keys: the values of the step's keys for a tile row's kTileVectors vectors of columns, the
// step's probability of a row, and their multiply-add into float32 accumulators.
//   F32ValueRows<Stored>  one key per step; f32 rows, bf16 and f16 widened in registers, quantized
//                         rows dequantised with their block parameters (converted once per call
//                         into `params`, after acc's copy in the unused packed-value buffer);
//   Bf16PairValueRows     two keys per step: the bf16 values of two rows paired along keys in
//                         registers (pair_rows_32), p rounded to bf16 into pairs along keys, the
//                         accumulators in the target's pair order while they sum.
template <DType Stored>
struct F32ValueRows {
  using Row = const StoredElement<Stored>*;
  static constexpr bool kQuantized = is_quantized(Stored);
  float* params = nullptr;
  std::int64_t params_per_row = 0;

  F32ValueRows(ForwardWorkspace& ws, Row* rows, std::int64_t width) {
    if constexpr (kQuantized) {
      // kMaxKeyBlock rows of d_v floats hold kMaxTileRows of acc's copy and a block's parameters, at
      // most 2 · d_v / 32 floats per key.
      static_assert(kMaxTileRows + kMaxKeyBlock * 2 / kQuantBlock <= kMaxKeyBlock, "acc's copy and the parameters fit ws.v");
      params = ws.v + kMaxTileRows * ws.d_v;
      params_per_row = ws.d_v / kQuantBlock * kParamsPerBlock<Stored>;
      for (std::int64_t j = 0; j < width; ++j) block_params_to_float<Stored>(rows[j], ws.d_v, 0, params_per_row, params + j * params_per_row);
    }
  }
  static std::int64_t steps(std::int64_t width) { return width; }
  void load_values(const Row* rows, std::int64_t j, std::int64_t c0, Vec (&bv)[kTileVectors]) const {
    if constexpr (kQuantized) {  // a tile's columns lie in one block
      static_assert(kQuantBlock % kTileCols == 0);
      const BlockScale scale = block_scale<Stored>(params + j * params_per_row + c0 / kQuantBlock * kParamsPerBlock<Stored>);
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = load_quantized<Stored>(rows[j], c0 + v * kLanes, scale);
    } else {
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = load_stored<Stored>(rows[j] + c0 + v * kLanes);
    }
  }
  static Vec probability(const ForwardWorkspace& ws, std::int64_t r, std::int64_t j) { return Isa::set1(ws.scores[r * kKeyBlock + j]); }
  static Vec multiply_add(Vec acc, Vec p, Vec v) { return Isa::fma(p, v, acc); }
  static void to_accumulator_order(Vec&, Vec&) {}
  static void from_accumulator_order(Vec&, Vec&) {}
};

template <std::int64_t Rows, class I = Isa>
struct Bf16PairValueRows {
  using Row = const std::uint16_t*;
  using Pairs = decltype(I::load_pairs(nullptr));
  static_assert(kTileVectors == 2, "a tile row's columns are the 32 that pair_rows_32 pairs");

  // p rounded into pairs along keys; an odd last key pairs with itself (rows[width]) and a zero
  // probability.
  Bf16PairValueRows(ForwardWorkspace& ws, Row* rows, std::int64_t width) {
    rows[width] = rows[width - 1];
    round_tile_into_pairs<Rows, Bf16Pairs<I>>(ws, width);
    if (width % 2 != 0)
      for (std::int64_t r = 0; r < Rows; ++r) ws.p_pairs[r * (kKeyBlock / 2) + width / 2] &= 0xFFFFu;
  }
  static std::int64_t steps(std::int64_t width) { return pair_count(width); }
  static void load_values(const Row* rows, std::int64_t j, std::int64_t c0, Pairs (&bv)[kTileVectors]) {
    I::pair_rows_32(rows[2 * j] + c0, rows[2 * j + 1] + c0, bv);
  }
  static Pairs probability(const ForwardWorkspace& ws, std::int64_t r, std::int64_t j) {
    return I::broadcast_pair(ws.p_pairs[r * (kKeyBlock / 2) + j]);
  }
  static Vec multiply_add(Vec acc, Pairs p, Pairs v) { return I::dot_bf16(acc, p, v); }
  static void to_accumulator_order(Vec& a, Vec& b) { I::to_pair_order(a, b); }
  static void from_accumulator_order(Vec& a, Vec& b) { I::from_pair_order(a, b); }
};

// The P·V sum of a decode tile, straight from the value rows as stored, without the copy pack_values
// makes: V is read from memory once either way, and the copy cost as much as the arithmetic. Only the
// first `width` keys of the block are summed: the tile's keys up to its last visible one (p is 0 past
// it, and not computed). Returns false, leaving acc as it was, if one of those values (or a sum) is
// NaN or ±inf: the caller then takes the seen-only sum, as for a packed block. Rows of unit stride and
// d_v equal to the padded d_v only. `rows` holds room for width + 1 rows (the pairs' partner of an
// odd last key).
template <std::int64_t Rows, class ValueRows>
bool accumulate_pv_from_rows(ForwardWorkspace& ws, typename ValueRows::Row* rows, std::int64_t width, const float* alpha) {
  // acc as it was, kept in the (here unused) packed-value buffer in case a value is not finite.
  std::copy(ws.acc, ws.acc + Rows * ws.d_v, ws.v);
  const ValueRows values(ws, rows, width);
  const std::int64_t steps = ValueRows::steps(width);
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
      if constexpr (kTileVectors == 2) ValueRows::to_accumulator_order(acc[r][0], acc[r][1]);
    }
    for (std::int64_t j = 0; j < steps; ++j) {
      decltype(ValueRows::probability(ws, 0, 0)) bv[kTileVectors];
      values.load_values(rows, j, c0, bv);
      for (std::int64_t r = 0; r < Rows; ++r) {
        const auto pr = ValueRows::probability(ws, r, j);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = ValueRows::multiply_add(acc[r][v], pr, bv[v]);
      }
    }
    for (std::int64_t r = 0; r < Rows; ++r) {
      if constexpr (kTileVectors == 2) ValueRows::from_accumulator_order(acc[r][0], acc[r][1]);
      for (std::int64_t v = 0; v < kTileVectors; ++v) {
        differences = Isa::add(differences, Isa::sub(acc[r][v], acc[r][v]));  // x − x is NaN exactly for ±inf and NaN
        Isa::store(c + r * ws.d_v + v * kLanes, acc[r][v]);
      }
    }
  }
  if (Isa::any_set(Isa::or_nan(Isa::zero(), differences))) {
    std::copy(ws.v, ws.v + Rows * ws.d_v, ws.acc);
    return false;
  }
  return true;
}

// The P·V sum of a decode tile from the value rows of keys [j0, j0 + width) where they are stored:
// as bf16 pairs with Pairs (bf16 values on a bf16-dot target), else as float32 of the values' dtype.
template <std::int64_t Rows, bool Pairs>
bool accumulate_pv_in_place(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
                            std::int64_t width, const float* alpha) {
  const auto with_rows = [&]<class Element>(auto sum) {
    const Element* rows[kMaxKeyBlock + 1];
    for (std::int64_t j = 0; j < width; ++j) {
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
      rows[j] = plan.problem->v.at<Element>({at.outer, item.kv_head, at.row, 0});
    }
    return sum(rows);
  };
  if constexpr (Pairs) {
    return with_rows.template operator()<std::uint16_t>(
        [&](const std::uint16_t** rows) { return accumulate_pv_from_rows<Rows, Bf16PairValueRows<Rows>>(ws, rows, width, alpha); });
  } else {
    bool finite = false;
    with_stored_dtype(plan.problem->v.dtype(), [&](auto stored) {
      using Element = StoredElement<stored()>;
      finite = with_rows.template operator()<Element>(
          [&](const Element** rows) { return accumulate_pv_from_rows<Rows, F32ValueRows<stored()>>(ws, rows, width, alpha); });
    });
    return finite;
  }
}
