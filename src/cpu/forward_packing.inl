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

std::int64_t pair_count(std::int64_t elements) { return (elements + 1) / 2; }

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

// The kinds of key panels the forward packs: float32 (F32KeyPanels), or pairs of bf16 values along
// d_k moved as 32-bit elements (Bf16PairKeyPanels, the bf16-dot path). Each says which rows are read
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

struct Bf16PairKeyPanels {
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

// Packs K[b, g, j0 .. j0 + width) into key panels of the given kind, zero-padded to `cols` keys:
// kLanes × kLanes transposes in registers, reading rows in place where the kind allows and others
// through a converted copy.
template <class Panels>
void pack_keys(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, std::int64_t j0,
               std::int64_t width, std::int64_t cols) {
  const ConstTensorView& keys = plan.problem->k;
  const bool in_place = Panels::in_place(keys, ws.d_k);
  const std::int64_t depth = Panels::depth(ws.d_k);
  for (std::int64_t p0 = 0; p0 < cols; p0 += kTileCols) {
    const float* rows[kTileCols];
    for (std::int64_t t = 0; t < kTileCols; ++t) {
      const std::int64_t j = p0 + t;
      if (j >= width) {
        rows[t] = ws.zero_row;
        continue;
      }
      const StoredRow at = stored_row(*plan.problem, item.batch, j0 + j);
      rows[t] = in_place ? Panels::row(keys, at, item.kv_head)
                         : Panels::converted(keys, at, item.kv_head, ws.d_k, ws.key_rows + t * ws.d_k);
    }
    pack_panels(rows, kTileCols, depth, ws.k_t + p0 * depth);
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
