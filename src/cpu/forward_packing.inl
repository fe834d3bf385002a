// The forward's packing: the queries once per work item, keys and values once per key block, as
// float32 panels and rows or, on the bf16-dot path, as bf16 pairs. Included by flash_forward.inl
// inside the target's namespace; no include guard on purpose.

// The value block is stored row by row, v[j · d_v + c]. (Panels of one tile's columns, which tile_a_b
// would stream front to back, measured no faster for the forward and 10% slower for decoding; see
// docs/tuning.md, "Block geometry".)

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

std::int64_t pair_count(std::int64_t elements) { return (elements + 1) / 2; }

#include "cpu/bf16_bits.inl"
#include "cpu/pair_formats.inl"

// `count` elements of row (b, h, i) of a bf16 or f16 tensor as their bits, zero-padded to `padded`.
void load_row_bf16(const ConstTensorView& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t count,
                   std::int64_t padded, std::uint16_t* out) {
  const auto* row = static_cast<const std::uint16_t*>(t.data()) + b * t.stride(0) + h * t.stride(1) + i * t.stride(2);
  if (t.stride(3) == 1) {
    if (count > 0) std::memcpy(out, row, static_cast<std::size_t>(count) * sizeof(std::uint16_t));  // never null for 0
  } else {
    for (std::int64_t c = 0; c < count; ++c) out[c] = row[c * t.stride(3)];
  }
  std::fill(out + count, out + padded, std::uint16_t{0});
}

// The queries as rows of `stride` values of the pairs' format (prepare_rows has loaded them as
// float32 in ws.q), zero-padded: d_k rounded up to even, or to whole tile rows (tile_query_stride).
template <class Format = Bf16Pairs<>>
void prepare_query_pairs(ForwardWorkspace& ws, std::int64_t stride) {
  for (std::int64_t r = 0; r < ws.rows; ++r) {
    std::uint16_t* out = ws.q_bf16 + r * stride;
    Format::bits_of_row(ws.q + r * ws.d_k, ws.d_k, out);
    std::fill(out + ws.d_k, out + stride, std::uint16_t{0});
  }
}

// The kinds of key panels the forward packs: float32 (F32KeyPanels), or pairs of 16-bit values (bf16,
// or f16 on the f16 tile path) along d_k moved as 32-bit elements (PairKeyPanels, the pair paths). Each says which rows are read
// in place, the panels' depth per key, and how another row is converted into a buffer of d_k floats.
struct F32KeyPanels {
  static bool in_place(const ConstTensorView& keys, std::int64_t) { return keys.dtype() == DType::f32 && keys.stride(3) == 1; }
  static std::int64_t depth(std::int64_t d_k) { return d_k; }
  static const float* row(const ConstTensorView& keys, StoredRow at, std::int64_t kv_head) {
    return keys.at<float>({at.outer, kv_head, at.row, 0});
  }
  static const float* converted(const ConstTensorView& keys, StoredRow at, std::int64_t kv_head, std::int64_t d_k, float* buffer) {
    load_row_f32(keys, at.outer, kv_head, at.row, buffer, d_k);
    return buffer;
  }
};

// Pairs per key of the tile targets' key panels: d_k padded to whole tile rows (kTileDepth values).
std::int64_t tile_key_depth(std::int64_t d_k) { return round_up(pair_count(d_k), kTileDepth / 2); }
std::int64_t tile_query_stride(std::int64_t d_k) { return 2 * tile_key_depth(d_k); }

struct PairKeyPanels {
  static bool in_place(const ConstTensorView& keys, std::int64_t d_k) { return keys.stride(3) == 1 && d_k % 2 == 0; }
  static std::int64_t depth(std::int64_t d_k) { return pair_count(d_k); }
  static const float* row(const ConstTensorView& keys, StoredRow at, std::int64_t kv_head) {
    return reinterpret_cast<const float*>(keys.at<bfloat16>({at.outer, kv_head, at.row, 0}));
  }
  static const float* converted(const ConstTensorView& keys, StoredRow at, std::int64_t kv_head, std::int64_t d_k, float* buffer) {
    auto* bits = reinterpret_cast<std::uint16_t*>(buffer);  // room for a row of pairs
    load_row_bf16(keys, at.outer, kv_head, at.row, d_k, 2 * pair_count(d_k), bits);
    return reinterpret_cast<const float*>(bits);
  }
};

// The tile targets' panels: PairKeyPanels' pairs with the depth padded to whole tile rows, so a
// B tile of 16 keys' pairs never reads past a panel. Rows are read in place when d_k fills the tile
// rows exactly; others are copied with zeros after d_k.
struct TilePairKeyPanels : PairKeyPanels {
  static bool in_place(const ConstTensorView& keys, std::int64_t d_k) { return keys.stride(3) == 1 && d_k % kTileDepth == 0; }
  static std::int64_t depth(std::int64_t d_k) { return tile_key_depth(d_k); }
  static const float* converted(const ConstTensorView& keys, StoredRow at, std::int64_t kv_head, std::int64_t d_k, float* buffer) {
    auto* bits = reinterpret_cast<std::uint16_t*>(buffer);  // room for d_k + kTileDepth floats
    load_row_bf16(keys, at.outer, kv_head, at.row, d_k, 2 * tile_key_depth(d_k), bits);
    return reinterpret_cast<const float*>(bits);
  }
};

// Key j of an entry whose keys lie in groups quantised per channel (j < grouped_keys), dequantised
// into `buffer`: the group's parameters are converted into ws.channel_params when the group is not
// the one `loaded` names (its first key; −1: none yet).
template <DType Stored>
const float* channel_grouped_key(const detail::Problem& p, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j,
                                 std::int64_t& loaded, float* buffer) {
  const std::int64_t first = j - j % kChannelGroup;
  float* scale = ws.channel_params;
  float* offset = ws.channel_params + ws.d_k;
  if (loaded != first) {
    const std::byte* rows[kChannelGroup];
    channel_group_rows(p, item.batch, item.kv_head, first, rows);
    channel_group_params_to_float<Stored>(rows, ws.d_k, scale, offset, ws.channel_params + 2 * ws.d_k);
    loaded = first;
  }
  const StoredRow at = stored_row(p, item.batch, j);
  const std::byte* row = p.k.at<std::byte>({at.outer, item.kv_head, at.row, 0});
  for (std::int64_t c = 0; c < ws.d_k; c += kLanes) Isa::store(buffer + c, load_channel_quantized<Stored>(row, c, scale, offset));
  return buffer;
}

// Packs K[b, g, j0 .. j0 + width) into key panels of the given kind, zero-padded to `cols` keys:
// kLanes × kLanes transposes in registers, reading rows in place where the kind allows and others
// through a converted copy.
template <class Panels>
void pack_keys(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
               std::int64_t width, std::int64_t cols) {
  const ConstTensorView& keys = plan.problem->k;
  const bool in_place = Panels::in_place(keys, ws.d_k);
  const std::int64_t depth = Panels::depth(ws.d_k);
  // Keys of a KV cache quantised per channel (float32 panels only: such keys are int8 or int4).
  const std::int64_t grouped = grouped_keys(*plan.problem, item.batch);
  std::int64_t loaded_group = -1;
  for (std::int64_t p0 = 0; p0 < cols; p0 += kTileCols) {
    const float* rows[kTileCols];
    for (std::int64_t t = 0; t < kTileCols; ++t) {
      const std::int64_t j = p0 + t;
      if (j >= width) {
        rows[t] = ws.zero_row;
        continue;
      }
      float* buffer = ws.key_rows + t * (ws.d_k + kTileDepth);
      if (j0 + j < grouped) {
        rows[t] = keys.dtype() == DType::int8
                      ? channel_grouped_key<DType::int8>(*plan.problem, ws, item, j0 + j, loaded_group, buffer)
                      : channel_grouped_key<DType::int4>(*plan.problem, ws, item, j0 + j, loaded_group, buffer);
        continue;
      }
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
      rows[t] = in_place ? Panels::row(keys, at, item.kv_head) : Panels::converted(keys, at, item.kv_head, ws.d_k, buffer);
    }
    pack_panels(rows, kTileCols, depth, ws.k_t + p0 * depth);
  }
}

// The kinds of value blocks the forward packs, each taking kKeys keys per step: it finds each key's
// row (in place, or converted into its scratch slot, or zeros past the block's keys), then writes
// the step's part of the block and notes in the caller's `Check` whether a value is NaN or ±inf (kept
// by the caller, so that it stays in a register).
//   F32ValueBlock       v[j][c] = V[j][c] as float32, a key per step; rows of unit stride are read
//                       in place (f16, bf16 and quantized rows widened in registers on the way);
//   PairValueBlock      v[j/2][c] = (V[j][c], V[j + 1][c]), pairs of 16-bit values of the Format
//                       along keys, two keys per step (the pair paths); rows of unit stride whose
//                       d_v is whole tiles are read in place.
// Both are zero-padded to the padded d_v and to `cols` keys.
class F32ValueBlock {
 public:
  static constexpr std::int64_t kKeys = 1;
  struct Row {
    const void* data;
    DType dtype;
  };
  F32ValueBlock(const detail::Problem& p, ForwardWorkspace& ws)
      : values_(p.v), ws_(ws), d_v_(p.sizes.d_v), in_place_(value_rows_in_place(p, ws)),
        converted_(reinterpret_cast<float*>(ws.bf16_rows)) {}
  Row zeros(std::int64_t) {
    std::fill(converted_, converted_ + ws_.d_v, 0.0f);
    return {converted_, DType::f32};
  }
  Row row(StoredRow at, std::int64_t kv_head, std::int64_t) {
    if (in_place_) {
      return {static_cast<const char*>(values_.data()) +
                  (at.outer * values_.stride(0) + kv_head * values_.stride(1) + at.row * values_.stride(2)) *
                      element_bytes(values_.dtype()),
              values_.dtype()};
    }
    load_row_f32(values_, at.outer, kv_head, at.row, converted_, d_v_);
    std::fill(converted_ + d_v_, converted_ + ws_.d_v, 0.0f);
    return {converted_, DType::f32};
  }
  using Check = Vec;  // a sum of zeros while every value is finite, NaN after any other
  static Check no_value_yet() { return Isa::zero(); }
  static bool finite(Check check) { return !Isa::any_set(Isa::or_nan(Isa::zero(), check)); }
  void write(const Row (&rows)[kKeys], std::int64_t j, Check& differences) {
    float* out = ws_.v + j * ws_.d_v;
    const std::int64_t padded_d_v = ws_.d_v;
    with_stored_dtype(rows[0].dtype, [&](auto stored) {
      const auto* x = static_cast<const StoredElement<stored()>*>(rows[0].data);
      for (std::int64_t c0 = 0; c0 < padded_d_v; c0 += kLanes) {
        const Vec v = load_row_vector<stored()>(x, padded_d_v, c0);
        Isa::store(out + c0, v);
        differences = Isa::add(differences, Isa::sub(v, v));  // x − x is NaN exactly for ±inf and NaN
      }
    });
  }

 private:
  const ConstTensorView& values_;
  ForwardWorkspace& ws_;
  std::int64_t d_v_;
  bool in_place_;
  float* converted_;  // [d_v] floats of scratch
};

template <class I = Isa, class Format = Bf16Pairs<I>>
class PairValueBlock {
 public:
  static constexpr std::int64_t kKeys = 2;
  using Row = const std::uint16_t*;
  PairValueBlock(const detail::Problem& p, ForwardWorkspace& ws)
      : values_(p.v), ws_(ws), d_v_(p.sizes.d_v), in_place_(p.v.stride(3) == 1 && p.sizes.d_v == ws.d_v),
        copy_{ws.bf16_rows, ws.bf16_rows + ws.d_v} {}
  Row zeros(std::int64_t e) {
    std::fill(copy_[e], copy_[e] + ws_.d_v, std::uint16_t{0});
    return copy_[e];
  }
  Row row(StoredRow at, std::int64_t kv_head, std::int64_t e) {
    if (in_place_) return reinterpret_cast<const std::uint16_t*>(values_.at<bfloat16>({at.outer, kv_head, at.row, 0}));
    load_row_bf16(values_, at.outer, kv_head, at.row, d_v_, ws_.d_v, copy_[e]);
    return copy_[e];
  }
  using Check = bool;  // whether a value seen so far is NaN or ±inf
  static Check no_value_yet() { return false; }
  static bool finite(Check special) { return !special; }
  // The interleave looks at each pair it writes.
  void write(const Row (&rows)[kKeys], std::int64_t j, Check& special) {
    auto* out = reinterpret_cast<std::uint32_t*>(ws_.v) + (j / 2) * ws_.d_v;
    for (std::int64_t c = 0; c < ws_.d_v; c += kLanes) special |= Format::interleave(rows[0] + c, rows[1] + c, out + c);
  }

 private:
  const ConstTensorView& values_;
  ForwardWorkspace& ws_;
  std::int64_t d_v_;
  bool in_place_;
  std::uint16_t* copy_[kKeys];  // [d_v] 16-bit values of scratch per key of a step
};

// Packs V[b, g, j0 .. j0 + width) as a value block of the given kind, zero-padded to `cols` keys.
// Returns whether every value is finite.
template <class Block>
bool pack_values(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
                 std::int64_t width, std::int64_t cols) {
  Block block(*plan.problem, ws);
  typename Block::Check check = Block::no_value_yet();
  for (std::int64_t j = 0; j < cols; j += Block::kKeys) {
    typename Block::Row rows[Block::kKeys];
    for (std::int64_t e = 0; e < Block::kKeys; ++e)
      rows[e] = j + e < width ? block.row(stored_row(*plan.problem, item.batch, j0 + j + e), item.kv_head, e) : block.zeros(e);
    block.write(rows, j, check);
  }
  return Block::finite(check);
}
