// The fast backward kernel, FlashAttention-2 style, written once over an ISA wrapper.
//
// Included by src/cpu/kernels_<target>.cpp after flash_forward.inl, inside the same namespace, whose
// packing, micro-kernels and bias code it shares. No include guard on purpose.
//
// For one work item (a chunk of keys of one KV head, see backward_plan.hpp), with the forward's
// LSE and D = rowsum(dO ∘ O) prepared per row:
//
//   for each key block K_j, V_j of the chunk:
//     pack K_j, V_j;  dK_j = dV_j = 0
//     for each query head of the group, each block of query rows that sees K_j:
//       S  = Q · K_jᵀ · scale, then biases and masks       (the forward's logits, recomputed)
//       P  = exp(S − LSE)                                  (the forward's probabilities)
//       dP = (dO · V_jᵀ) ∘ dropout
//       dS = P ∘ (dP − D) ∘ softcap′ · scale               (softmax, softcap and scale in reverse)
//       dV_j += (P ∘ dropout)ᵀ · dO                          tile_at_b
//       dK_j += dSᵀ · Q                                      tile_at_b
//       dQ   += dS · K_j            (this chunk's copy)      tile_a_b
//     dK[j], dV[j] ← dK_j, dV_j
//
// No n×m matrix: P and dS exist one block of kBackwardQueryBlock × kBackwardKeyBlock at a time. On
// the causal diagonal (any block some rows see only in part), each tile's S, dP and dQ stop at its
// last visible key, and the dV, dK sums of a tile of keys start at the first row that sees one.
// Masked entries get P = dS = 0 exactly, and when an operand holds NaN or ±inf the products skip
// them outright (as the reference does), so a masked key's NaN never reaches a gradient.
//
// With bf16 inputs on a target with bf16 dot products (Isa::kDotBf16), the five products take pairs
// of bf16 values and sum in float32: S and dP with pairs along the feature dimension (as the
// forward's scores), dQ += dS·K_j with pairs along keys, dV_j += Pᵀ·dO and dK_j += dSᵀ·Q with pairs
// along query rows; on a target with matrix tiles (Isa::kTiles), the same operands on the tiles
// (TileProducts). dropout(P) and dS are rounded to bf16 before they multiply, as FlashAttention
// does, on every block of such a call: a block holding NaN or ±inf takes the float32 products (which
// skip masked entries) with the same rounded values.

namespace attnkit::cpu::ATTNKIT_ISA_NAMESPACE {

struct BackwardItem {
  std::int64_t batch = 0, kv_head = 0, chunk = 0;
  KeyRange keys{0, 0};
};

BackwardItem backward_item(const BackwardPlan& plan, std::int64_t item) {
  const detail::Problem& p = *plan.problem;
  const detail::Sizes& s = p.sizes;
  BackwardItem c;
  if (plan.packed_entries != nullptr) {
    // The last sequence whose first item is at or before this one (sequences without items share
    // their successor's first item).
    const BackwardEntry* next = std::upper_bound(plan.packed_entries, plan.packed_entries + s.batch, item,
                                                 [](std::int64_t i, const BackwardEntry& e) { return i < e.first_item; });
    c.batch = next - plan.packed_entries - 1;
  } else {
    c.batch = item / (s.kv_heads * plan.uniform.chunks);
  }
  const BackwardEntry e = plan.entry(c.batch);
  const std::int64_t local = item - e.first_item;
  c.chunk = local % e.chunks;
  c.kv_head = local / e.chunks;
  c.keys = {c.chunk * e.chunk_keys, std::min(p.key_count(c.batch), (c.chunk + 1) * e.chunk_keys)};
  return c;
}

// ---- the bf16-dot path's operands ----

// Pairs of rows and of keys: whole tiles of rows and padded key blocks are even.
static_assert(!Isa::kDotBf16 || (kTileRows % 2 == 0 && kBackwardKeyPad % (2 * kLanes) == 0 && kBackwardQueryBlock % 2 == 0),
              "the bf16-dot backward pairs rows and keys, whole vectors of pairs along a padded key block");

// The call takes bf16 dot products: bf16 inputs on such a target, for which backward.cpp has
// prepared Q and dO as bf16 rows and row pairs in the plan, once per call.
bool backward_uses_bf16_dot(const BackwardPlan& plan) { return Isa::kDotBf16 && plan.q_bf16 != nullptr; }

// x[c] rounded to the nearest bf16 value (ties to even), in place.
template <class I = Isa>
void round_to_bf16_in_place(float* x, std::int64_t count) {
  for (std::int64_t c0 = 0; c0 < count; c0 += kLanes) I::store(x + c0, I::round_to_bf16(I::load(x + c0)));
}

// K_j and V_j (ws.k_rows, ws.v_rows, finite bf16 values) as pairs along the features, in panels for
// the scores and dP, and K_j as pairs along keys for dQ.
void pack_key_block_pairs(BackwardWorkspace& ws, std::int64_t cols) {
  const std::int64_t widest = std::max(ws.d_k, ws.d_v);
  const struct {
    const float* rows;
    std::int64_t d;
    std::uint32_t* panels;
  } operands[] = {{ws.k_rows, ws.d_k, ws.k_pair_panels}, {ws.v_rows, ws.d_v, ws.v_pair_panels}};
  for (const auto& o : operands) {
    const std::int64_t pairs = o.d / 2;  // d is whole tiles: even
    for (std::int64_t p0 = 0; p0 < cols; p0 += kTileCols) {
      const float* rows[kTileCols];  // rows of pairs, moved by pack_panels as 32-bit elements
      for (std::int64_t t = 0; t < kTileCols; ++t) {
        std::uint16_t* bits = ws.pair_rows + t * widest;
        bf16_bits_of_row(o.rows + (p0 + t) * o.d, o.d, bits);
        rows[t] = reinterpret_cast<const float*>(bits);
      }
      pack_panels(rows, kTileCols, pairs, reinterpret_cast<float*>(o.panels + p0 * pairs));
    }
  }
  for (std::int64_t j = 0; j < cols; j += 2)
    pairs_of_rows(ws.k_rows + j * ws.d_k, ws.k_rows + (j + 1) * ws.d_k, ws.d_k, ws.k_key_pairs + j / 2 * ws.d_k);
}

// ---- packing a key block ----

// k_rows[j] = K[b, g, j0 + j] (zero rows past width) and the same keys in panels for the scores;
// likewise V. Returns whether K and V hold only finite values (bit 0: K, bit 1: V).
std::uint8_t pack_key_block(const BackwardPlan& plan, BackwardWorkspace& ws, const BackwardItem& item,
                            std::int64_t j0, std::int64_t width, std::int64_t cols) {
  const detail::Problem& p = *plan.problem;
  const std::int64_t d_k = p.sizes.d_k, d_v = p.sizes.d_v;
  bool keys_finite = true, values_finite = true;
  const float* k_rows[kBackwardKeyBlock];
  const float* v_rows[kBackwardKeyBlock];
  for (std::int64_t j = 0; j < cols; ++j) {
    float* k = ws.k_rows + j * ws.d_k;
    float* v = ws.v_rows + j * ws.d_v;
    if (j < width) {
      const StoredRow at = stored_row(p, item.batch, j0 + j);
      load_row_f32(p.k, at.outer, item.kv_head, at.row, k, d_k);
      load_row_f32(p.v, at.outer, item.kv_head, at.row, v, d_v);
      keys_finite = all_finite(k, d_k) && keys_finite;
      values_finite = all_finite(v, d_v) && values_finite;
    } else {
      std::fill(k, k + d_k, 0.0f);
      std::fill(v, v + d_v, 0.0f);
    }
    std::fill(k + d_k, k + ws.d_k, 0.0f);
    std::fill(v + d_v, v + ws.d_v, 0.0f);
    k_rows[j] = k;
    v_rows[j] = v;
  }
  pack_panels(k_rows, cols, d_k, ws.k_panels);
  pack_panels(v_rows, cols, d_v, ws.v_panels);
  return static_cast<std::uint8_t>((keys_finite ? 1 : 0) | (values_finite ? 2 : 0));
}

// ---- one row: probabilities and score gradients ----

// keep[j] = the dropout multiplier of (b, h, i, j0 + j): 1/(1 − p) if kept, 0 if dropped, drawn from
// the same Philox stream as the forward.
void dropout_row(const BackwardPlan& plan, std::int64_t batch, const RowInfo& info, std::int64_t j0, std::int64_t cols,
                 float* keep) {
  const detail::Problem& p = *plan.problem;
  for (std::int64_t j = 0; j < cols; j += 4) {  // one Philox call draws four consecutive keys
    const std::array<float, 4> u = detail::dropout_uniforms(p.seed, batch, info.head, info.query, j0 + j);
    for (std::int64_t t = 0; t < 4; ++t) {
      const bool kept = u[static_cast<std::size_t>(t)] >= p.f32.dropout_threshold;
      keep[j + t] = kept ? p.f32.keep_scale : 0.0f;
    }
  }
}

// In place over one row of the block: logits → dropout(P) and dP → dS, where
//   P = exp(s − lse),  dS = P · (dP · keep − D) · (1 − t²) · scale,
// and both are exactly 0 where the logit is −inf (masked), whatever lse and dP hold.
void row_gradients(const BackwardPlan& plan, BackwardWorkspace& ws, std::int64_t batch, std::int64_t r,
                   std::int64_t j0, std::int64_t cols, float lse, float delta) {
  float* p = ws.p + r * kBackwardKeyBlock;
  float* ds = ws.ds + r * kBackwardKeyBlock;
  const float* t = ws.tanh_s + r * kBackwardKeyBlock;
  const bool dropout = plan.problem->f32.dropout_threshold > 0, capped = plan.problem->f32.softcap > 0;
  if (dropout) dropout_row(plan, batch, ws.row_info[r], j0, cols, ws.keep);
  const Vec lse_v = Isa::set1(lse), delta_v = Isa::set1(delta), scale = Isa::set1(plan.problem->f32.scale);
  const Vec minus_inf = Isa::set1(kMinusInf), zero = Isa::zero(), one = Isa::set1(1.0f);
  for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) {
    const Vec logit = Isa::load(p + c0);
    Vec prob = exp_of_difference<Isa>(logit, lse_v);
    Vec d_prob = Isa::load(ds + c0);
    if (dropout) {
      const Vec keep = Isa::load(ws.keep + c0);
      d_prob = Isa::mul(d_prob, keep);
      Isa::store(p + c0, Isa::select_equal(logit, minus_inf, zero, Isa::mul(prob, keep)));
    } else {
      Isa::store(p + c0, Isa::select_equal(logit, minus_inf, zero, prob));
    }
    Vec d_score = Isa::mul(Isa::mul(prob, Isa::sub(d_prob, delta_v)), scale);
    if (capped) {  // d(c·tanh(s/c))/ds = 1 − tanh²(s/c)
      const Vec tanh_v = Isa::load(t + c0);
      d_score = Isa::mul(d_score, Isa::sub(one, Isa::mul(tanh_v, tanh_v)));
    }
    Isa::store(ds + c0, Isa::select_equal(logit, minus_inf, zero, d_score));
  }
  if constexpr (Isa::kDotBf16) {
    if (backward_uses_bf16_dot(plan)) {  // the operands of the products, as bf16 values
      round_to_bf16_in_place(p, cols);
      round_to_bf16_in_place(ds, cols);
    }
  }
}

// The bf16 operands of one tile's rows, from their rounded dropout(P) and dS: dS with pairs along
// keys (for dQ), and dropout(P) and dS with pairs of rows (for dV and dK, summed over rows).
template <class I = Isa>
void pair_tile_operands(BackwardWorkspace& ws, std::int64_t tile, std::int64_t cols) {
  for (std::int64_t r = tile; r < tile + kTileRows; ++r)
    for (std::int64_t c0 = 0; c0 < cols; c0 += 2 * kLanes)  // exact: the values are bf16 already
      I::round_into_pairs(ws.ds + r * kBackwardKeyBlock + c0, ws.ds_pairs + r * (kBackwardKeyBlock / 2) + c0 / 2);
  for (std::int64_t r = tile; r < tile + kTileRows; r += 2)
    for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) {
      const std::int64_t at = r * kBackwardKeyBlock + c0, pair_at = r / 2 * kBackwardKeyBlock + c0;
      I::store_row_pairs(I::load(ws.p + at), I::load(ws.p + at + kBackwardKeyBlock), ws.p_row_pairs + pair_at);
      I::store_row_pairs(I::load(ws.ds + at), I::load(ws.ds + at + kBackwardKeyBlock), ws.ds_row_pairs + pair_at);
    }
}

// ---- the products that skip masked entries, for operands holding NaN or ±inf (rare) ----

// c[r][·] += Σ_{j seen} a[r][j] · b[j][·] for the tile's rows.
void tile_a_b_seen_only(const BackwardWorkspace& ws, std::int64_t tile, const float* a, const float* b, std::int64_t ldb,
                        std::int64_t cols, std::int64_t width, float* c, std::int64_t ldc) {
  for (std::int64_t r = tile; r < tile + kTileRows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) {
      if (!ws.seen[r * kBackwardKeyBlock + j]) continue;
      const float x = a[r * kBackwardKeyBlock + j];
      for (std::int64_t e = 0; e < width; ++e) c[(r - tile) * ldc + e] += x * b[j * ldb + e];
    }
}

// c[j][·] += Σ_{r seen} a[r][j] · b[r][·] over the block's rows.
void tile_at_b_seen_only(const BackwardWorkspace& ws, const float* a, const float* b, std::int64_t ldb,
                         std::int64_t rows, std::int64_t cols, std::int64_t width, float* c, std::int64_t ldc) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) {
      if (!ws.seen[r * kBackwardKeyBlock + j]) continue;
      const float x = a[r * kBackwardKeyBlock + j];
      for (std::int64_t e = 0; e < width; ++e) c[j * ldc + e] += x * b[r * ldb + e];
    }
}

// ---- one block of query rows against one key block ----

// The first of the block's `rows` rows that sees one of its keys [t, t + kTileRows) (`rows` when none
// does: keys past width included).
std::int64_t first_row_seeing(const BackwardWorkspace& ws, std::int64_t rows, KeyRange keys, std::int64_t j0,
                              std::int64_t width, std::int64_t t) {
  if (t >= width) return rows;
  for (std::int64_t r = 0; r < rows; ++r)
    if (row_sees_block(ws.row_info[r], keys, j0 + t, std::min(kTileRows, width - t))) return r;
  return rows;
}

// One block of query rows (of one query head) against one key block, and what its products read.
struct QueryBlock {
  const BackwardPlan& plan;
  BackwardWorkspace& ws;
  const BackwardItem& item;
  std::int64_t j0, width, cols;  // the key block: keys [j0, j0 + width), padded to cols
  std::int64_t rows, padded_rows, first_row;  // the query rows and the plan's row of the first
  std::uint8_t kv_finite;        // bit 0: K_j holds only finite values, bit 1: V_j
  bool rows_finite;              // every row's q and dO are finite
  bool all_inputs_finite() const { return rows_finite && kv_finite == 3; }
  const float* q() const { return plan.q + first_row * plan.padded_d_k; }
  const float* d_out() const { return plan.d_out + first_row * plan.padded_d_v; }
};

// Products on float32 operands. Where an operand holds NaN or ±inf they skip masked entries
// (the seen-only loops), so that a masked key's NaN never reaches a gradient.
struct FloatProducts {
  const QueryBlock& b;
  float* dq;  // the chunk's copy of dQ, at the block's first row

  // S = Q·K_jᵀ·scale into ws.p and dP = dO·V_jᵀ into ws.ds, for the tile's rows.
  void scores(std::int64_t tile, std::int64_t tile_cols) {
    const BackwardPlan& plan = b.plan;
    tile_a_bt(b.q() + tile * plan.padded_d_k, plan.padded_d_k, b.ws.k_panels, plan.problem->sizes.d_k, tile_cols,
              plan.problem->f32.scale, b.ws.p + tile * kBackwardKeyBlock, kBackwardKeyBlock);
    tile_a_bt(b.d_out() + tile * plan.padded_d_v, plan.padded_d_v, b.ws.v_panels, plan.problem->sizes.d_v, tile_cols,
              1.0f, b.ws.ds + tile * kBackwardKeyBlock, kBackwardKeyBlock);
  }
  // dQ += dS·K_j for the tile's rows.
  void dq_sum(std::int64_t tile, std::int64_t tile_cols) {
    const std::int64_t ld = b.plan.padded_d_k;
    if (b.kv_finite & 1) {
      tile_a_b(b.ws.ds + tile * kBackwardKeyBlock, kBackwardKeyBlock, b.ws.k_rows, b.ws.d_k, tile_cols, ld, nullptr,
               dq + tile * ld, ld);
    } else {
      tile_a_b_seen_only(b.ws, tile, b.ws.ds, b.ws.k_rows, b.ws.d_k, b.cols, ld, dq + tile * ld, ld);
    }
  }
  // dV_j += dropout(P)ᵀ·dO and dK_j += dSᵀ·Q over the block's rows: with finite inputs, for each tile
  // of keys only from the first row that sees one of them, and not at all for keys no row sees (the
  // rows left out hold P = dS = 0 there).
  void dk_dv_sums() {
    const BackwardPlan& plan = b.plan;
    BackwardWorkspace& ws = b.ws;
    const bool gradients_finite = b.rows_finite || rows_have(kGradientFinite);
    const bool queries_finite = b.rows_finite || rows_have(kQueryFinite);
    for (std::int64_t t = 0; t < b.cols; t += kTileRows) {
      const std::int64_t r0 = b.all_inputs_finite() ? first_row_seeing(ws, b.padded_rows, b.item.keys, b.j0, b.width, t) : 0;
      if (r0 >= b.padded_rows) continue;
      if (gradients_finite) {
        tile_at_b(ws.p + r0 * kBackwardKeyBlock + t, kBackwardKeyBlock, b.d_out() + r0 * plan.padded_d_v, plan.padded_d_v,
                  b.padded_rows - r0, plan.padded_d_v, ws.dv_acc + t * ws.d_v, ws.d_v);
      }
      if (queries_finite) {
        tile_at_b(ws.ds + r0 * kBackwardKeyBlock + t, kBackwardKeyBlock, b.q() + r0 * plan.padded_d_k, plan.padded_d_k,
                  b.padded_rows - r0, plan.padded_d_k, ws.dk_acc + t * ws.d_k, ws.d_k);
      }
    }
    if (!gradients_finite)
      tile_at_b_seen_only(ws, ws.p, b.d_out(), plan.padded_d_v, b.padded_rows, b.cols, plan.padded_d_v, ws.dv_acc, ws.d_v);
    if (!queries_finite)
      tile_at_b_seen_only(ws, ws.ds, b.q(), plan.padded_d_k, b.padded_rows, b.cols, plan.padded_d_k, ws.dk_acc, ws.d_k);
  }
  // Whether every row of the block has the finite input `flag` says (kQueryFinite, kGradientFinite).
  bool rows_have(std::uint8_t flag) const {
    for (std::int64_t r = 0; r < b.padded_rows; ++r)
      if (!(b.plan.finite[b.first_row + r] & flag)) return false;
    return true;
  }
};

// Products on bf16 pairs (a bf16-dot target, bf16 inputs, every operand of the block finite): S and
// dP with pairs along the features, dQ with pairs along keys, dV and dK with pairs of rows, from
// whole tiles starting at an even row so that the pairs never straddle two blocks or heads.
template <class I = Isa>
struct PairProducts {
  const QueryBlock& b;
  float* dq;

  void scores(std::int64_t tile, std::int64_t tile_cols) {
    const BackwardPlan& plan = b.plan;
    const std::int64_t at_q = (b.first_row + tile) * plan.padded_d_k, at_d_out = (b.first_row + tile) * plan.padded_d_v;
    tile_a_bt<Bf16PairOperands<I>>(plan.q_bf16 + at_q, plan.padded_d_k, b.ws.k_pair_panels, b.ws.d_k / 2, tile_cols,
                                   plan.problem->f32.scale, b.ws.p + tile * kBackwardKeyBlock, kBackwardKeyBlock);
    tile_a_bt<Bf16PairOperands<I>>(plan.d_out_bf16 + at_d_out, plan.padded_d_v, b.ws.v_pair_panels, b.ws.d_v / 2,
                                   tile_cols, 1.0f, b.ws.ds + tile * kBackwardKeyBlock, kBackwardKeyBlock);
  }
  void dq_sum(std::int64_t tile, std::int64_t tile_cols) {
    const std::int64_t ld = b.plan.padded_d_k;
    pair_tile_operands<I>(b.ws, tile, b.cols);
    tile_a_b<kTileRows, Bf16PairOperands<I>>(bf16_values(b.ws.ds_pairs + tile * (kBackwardKeyBlock / 2)),
                                             kBackwardKeyBlock, b.ws.k_key_pairs, b.ws.d_k, tile_cols / 2, ld, nullptr,
                                             dq + tile * ld, ld);
  }
  void dk_dv_sums() {
    const BackwardPlan& plan = b.plan;
    BackwardWorkspace& ws = b.ws;
    const std::uint32_t* q_row_pairs = plan.q_row_pairs + b.first_row / 2 * plan.padded_d_k;
    const std::uint32_t* d_out_row_pairs = plan.d_out_row_pairs + b.first_row / 2 * plan.padded_d_v;
    for (std::int64_t t = 0; t < b.cols; t += kTileRows) {
      const std::int64_t r0 = first_row_seeing(ws, b.padded_rows, b.item.keys, b.j0, b.width, t) / 2 * 2;
      if (r0 >= b.padded_rows) continue;
      const std::int64_t pair_rows = (b.padded_rows - r0) / 2;
      tile_at_b<Bf16PairOperands<I>>(bf16_values(ws.p_row_pairs + r0 / 2 * kBackwardKeyBlock + t), 2 * kBackwardKeyBlock,
                                     d_out_row_pairs + r0 / 2 * plan.padded_d_v, plan.padded_d_v, pair_rows, ws.d_v,
                                     ws.dv_acc + t * ws.d_v, ws.d_v);
      tile_at_b<Bf16PairOperands<I>>(bf16_values(ws.ds_row_pairs + r0 / 2 * kBackwardKeyBlock + t), 2 * kBackwardKeyBlock,
                                     q_row_pairs + r0 / 2 * plan.padded_d_k, plan.padded_d_k, pair_rows, ws.d_k,
                                     ws.dk_acc + t * ws.d_k, ws.d_k);
    }
  }
};

// Products on matrix tiles (a tile target, bf16 inputs, every operand of the block finite): the
// operands of PairProducts, S and dP (tiles_a_bt) and dQ (tiles_a_b) straight from them. dV and dK
// sum over the block's rows, so their operands are transposed once per block: P and dS as pairs of
// rows per key (p_row_pairs and ds_row_pairs through pack_panels), the rows of dO and Q as pairs,
// zero past the block's rows so that no tile reads a row of another block or head.
template <class I = Isa>
struct TileProducts {
  const QueryBlock& b;
  float* dq;

  void scores(std::int64_t tile, std::int64_t tile_cols) {
    const BackwardPlan& plan = b.plan;
    const std::int64_t at_q = (b.first_row + tile) * plan.padded_d_k, at_d_out = (b.first_row + tile) * plan.padded_d_v;
    tiles_a_bt<I>(plan.q_bf16 + at_q, plan.padded_d_k, b.ws.k_pair_panels, b.ws.d_k / 2, tile_cols, plan.problem->f32.scale,
                  b.ws.p + tile * kBackwardKeyBlock, kBackwardKeyBlock);
    tiles_a_bt<I>(plan.d_out_bf16 + at_d_out, plan.padded_d_v, b.ws.v_pair_panels, b.ws.d_v / 2, tile_cols, 1.0f,
                  b.ws.ds + tile * kBackwardKeyBlock, kBackwardKeyBlock);
  }
  // The tile's dS past tile_cols is 0 up to the block's columns (block_row), so the depth rounds up
  // to whole tile rows of keys.
  void dq_sum(std::int64_t tile, std::int64_t tile_cols) {
    const std::int64_t ld = b.plan.padded_d_k;
    pair_tile_operands<I>(b.ws, tile, b.cols);
    tiles_a_b<I>(bf16_values(b.ws.ds_pairs + tile * (kBackwardKeyBlock / 2)), kBackwardKeyBlock, b.ws.k_key_pairs, b.ws.d_k,
                 round_up(tile_cols, kTileDepth), ld, dq + tile * ld, ld);
  }
  void dk_dv_sums() {
    static_assert(!I::kTiles || (kBlockRowPairs == kTileCols && kBackwardKeyPad % kTileDepth == 0),
                  "one panel of pairs of rows per key; key blocks of whole tile rows");
    const BackwardPlan& plan = b.plan;
    BackwardWorkspace& ws = b.ws;
    const std::int64_t pairs = b.padded_rows / 2;
    transpose_row_pairs(ws.p_row_pairs, ws.p_key_pairs);
    transpose_row_pairs(ws.ds_row_pairs, ws.ds_key_pairs);
    copy_row_pairs(plan.d_out_row_pairs + b.first_row / 2 * plan.padded_d_v, plan.padded_d_v, pairs, ws.d_out_block_pairs);
    copy_row_pairs(plan.q_row_pairs + b.first_row / 2 * plan.padded_d_k, plan.padded_d_k, pairs, ws.q_block_pairs);
    for (std::int64_t t = 0; t < b.cols; t += kTileRows) {  // a tile of keys
      if (first_row_seeing(ws, b.padded_rows, b.item.keys, b.j0, b.width, t) >= b.padded_rows) continue;
      tiles_a_b<I>(bf16_values(ws.p_key_pairs + t * kBlockRowPairs), 2 * kBlockRowPairs, ws.d_out_block_pairs, plan.padded_d_v,
                   2 * kBlockRowPairs, ws.d_v, ws.dv_acc + t * ws.d_v, ws.d_v);
      tiles_a_b<I>(bf16_values(ws.ds_key_pairs + t * kBlockRowPairs), 2 * kBlockRowPairs, ws.q_block_pairs, plan.padded_d_k,
                   2 * kBlockRowPairs, ws.d_k, ws.dk_acc + t * ws.d_k, ws.d_k);
    }
  }
  // out[j][x] = row_pairs[x][j] for the block's keys j and pairs of rows x, 0 for x past them.
  void transpose_row_pairs(const std::uint32_t* row_pairs, std::uint32_t* out) const {
    const float* rows[kBlockRowPairs];
    for (std::int64_t x = 0; x < kBlockRowPairs; ++x)
      rows[x] = x < b.padded_rows / 2 ? reinterpret_cast<const float*>(row_pairs + x * kBackwardKeyBlock) : b.ws.zero_row;
    pack_panels(rows, kBlockRowPairs, b.cols, reinterpret_cast<float*>(out));
  }
  // The block's `pairs` rows of pairs (ld apart) into kBlockRowPairs rows, zero past them. With
  // d_v = 0 there are no dO pairs (`from` is null), and memcpy may not be handed null even for 0 bytes.
  static void copy_row_pairs(const std::uint32_t* from, std::int64_t ld, std::int64_t pairs, std::uint32_t* out) {
    if (pairs * ld > 0) std::memcpy(out, from, static_cast<std::size_t>(pairs * ld) * sizeof(std::uint32_t));
    std::fill(out + pairs * ld, out + kBlockRowPairs * ld, std::uint32_t{0});
  }
};

// Row r of the block, between its products: the logits (biases and masks on the recomputed S), which
// keys it sees (for the seen-only products), then P and dS in place of S and dP (row_gradients), zero
// from the tile's last column to the block's.
void block_row(const QueryBlock& b, std::int64_t r, std::int64_t tile_cols) {
  BackwardWorkspace& ws = b.ws;
  const detail::Problem& p = *b.plan.problem;
  float* row = ws.p + r * kBackwardKeyBlock;
  bias_and_mask_row(p, b.item.batch, ws.row_info[r], b.item.keys, b.j0, b.width, tile_cols, row, ws.mask_row,
                    p.f32.softcap > 0 ? ws.tanh_s + r * kBackwardKeyBlock : nullptr);
  if (!b.all_inputs_finite())
    for (std::int64_t j = 0; j < b.cols; ++j) ws.seen[r * kBackwardKeyBlock + j] = row[j] != kMinusInf;
  row_gradients(b.plan, ws, b.item.batch, r, b.j0, tile_cols, b.plan.lse[b.first_row + r], b.plan.delta[b.first_row + r]);
  std::fill(row + tile_cols, row + b.cols, 0.0f);
  std::fill(ws.ds + r * kBackwardKeyBlock + tile_cols, ws.ds + r * kBackwardKeyBlock + b.cols, 0.0f);
}

// The block's contributions to dK_j, dV_j and the chunk's dQ, through `products`: the backward of
// FlashAttention-2 on one block, each step a call.
template <class Products>
void block_gradients(Products& products, const QueryBlock& b) {
  for (std::int64_t tile = 0; tile < b.padded_rows; tile += kTileRows) {
    // With finite inputs, the tile's columns end at its last visible key, rounded up to a vector (on
    // the causal diagonal, about half the block), and P and dS past them are zeros for the dV and dK
    // sums. A block holding NaN or ±inf keeps whole blocks: its seen-only products read every column.
    const std::int64_t tile_cols =
        b.all_inputs_finite() ? round_up(seen_width(b.ws.row_info + tile, kTileRows, b.item.keys, b.j0, b.width), kLanes)
                              : b.cols;
    products.scores(tile, tile_cols);                                               // S, dP
    for (std::int64_t r = tile; r < tile + kTileRows; ++r) block_row(b, r, tile_cols);  // P, dS
    products.dq_sum(tile, tile_cols);                                               // dQ += dS·K_j
  }
  products.dk_dv_sums();  // dV_j += dropout(P)ᵀ·dO, dK_j += dSᵀ·Q
}

// Adds the contributions of query rows [i0, i0 + kBackwardQueryBlock) of `head` to dK_j, dV_j and the
// chunk's dQ. Returns false, touching nothing, when no row of the block sees a key of the block.
bool query_block(const BackwardPlan& plan, BackwardWorkspace& ws, const BackwardItem& item, std::int64_t head,
                 std::int64_t i0, std::int64_t j0, std::int64_t width, std::int64_t cols, std::uint8_t kv_finite) {
  const detail::Problem& p = *plan.problem;
  const std::int64_t rows = std::min(kBackwardQueryBlock, p.query_count(item.batch) - i0);
  QueryBlock b{plan, ws, item, j0, width, cols, rows, round_up(rows, kTileRows), plan.row(item.batch, head, i0),
               kv_finite, true};
  bool any_seen = false;
  for (std::int64_t r = 0; r < b.padded_rows; ++r) {
    ws.row_info[r] = r < rows ? make_row_info(p, item.batch, head, i0 + r) : RowInfo{};
    any_seen = any_seen || row_sees_block(ws.row_info[r], item.keys, j0, width);
    b.rows_finite = b.rows_finite && plan.finite[b.first_row + r] == (kQueryFinite | kGradientFinite);
  }
  if (!any_seen) return false;
  float* dq = plan.dq_partial(item.chunk, b.first_row);
  if constexpr (Isa::kTiles) {
    if (backward_uses_bf16_dot(plan) && b.all_inputs_finite()) {
      TileProducts<> products{b, dq};
      block_gradients(products, b);
      return true;
    }
  } else if constexpr (Isa::kDotBf16) {
    if (backward_uses_bf16_dot(plan) && b.all_inputs_finite()) {
      PairProducts<> products{b, dq};
      block_gradients(products, b);
      return true;
    }
  }
  FloatProducts products{b, dq};
  block_gradients(products, b);
  return true;
}

// ---- one work item ----

void run_backward_item(const BackwardPlan& plan, std::int64_t item_index) {
  const detail::Problem& p = *plan.problem;
  const detail::Sizes& s = p.sizes;
  const BackwardItem item = backward_item(plan, item_index);
  const std::int64_t chunk = item.chunk;
  BackwardWorkspace& ws = thread_backward_workspace();
  ws.prepare(plan.padded_d_k, plan.padded_d_v);

  // This chunk's copy of dQ starts at zero for every row of the group.
  const std::int64_t first_head = item.kv_head * plan.group;
  float* dq = plan.dq_partial(chunk, plan.row(item.batch, first_head, 0));
  std::fill(dq, dq + plan.group * plan.entry(item.batch).padded_n * plan.padded_d_k, 0.0f);

  if constexpr (Isa::kTiles) {
    if (backward_uses_bf16_dot(plan)) configure_tiles();
  }
  for (std::int64_t j0 = item.keys.begin; j0 < item.keys.end; j0 += kBackwardKeyBlock) {
    const std::int64_t width = std::min(kBackwardKeyBlock, item.keys.end - j0);
    const std::int64_t cols = round_up(width, kBackwardKeyPad);
    const std::uint8_t kv_finite = pack_key_block(plan, ws, item, j0, width, cols);
    if (backward_uses_bf16_dot(plan) && kv_finite == 3) pack_key_block_pairs(ws, cols);
    std::fill(ws.dk_acc, ws.dk_acc + cols * ws.d_k, 0.0f);
    std::fill(ws.dv_acc, ws.dv_acc + cols * ws.d_v, 0.0f);
    for (std::int64_t head = first_head; head < first_head + plan.group; ++head)
      for (std::int64_t i0 = 0; i0 < p.query_count(item.batch); i0 += kBackwardQueryBlock)
        query_block(plan, ws, item, head, i0, j0, width, cols, kv_finite);
    for (std::int64_t j = 0; j < width; ++j) {
      const StoredRow at = stored_row(p, item.batch, j0 + j);
      finish_gradient_row(plan, ws.dk_acc + j * ws.d_k, s.d_k);
      finish_gradient_row(plan, ws.dv_acc + j * ws.d_v, s.d_v);
      store_row_part(ws.dk_acc + j * ws.d_k, plan.io->dk, at.outer, item.kv_head, at.row, 0, s.d_k);
      store_row_part(ws.dv_acc + j * ws.d_v, plan.io->dv, at.outer, item.kv_head, at.row, 0, s.d_v);
    }
  }
  if constexpr (Isa::kTiles) {
    if (backward_uses_bf16_dot(plan)) release_tiles();
  }
}

}  // namespace attnkit::cpu::ATTNKIT_ISA_NAMESPACE
