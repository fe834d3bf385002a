// The paths a forward work item can take through the key loop (flash_forward.inl), each a policy
// chosen once per item that supplies the loop's steps for one key block and one register tile:
//
//   bool pack(block)                       K and V of the block for every tile (paths with kPacked);
//                                          false when a value is NaN or ±inf (the block then takes
//                                          SeenValuesOnly)
//   void scores(block, tile, between)      the tile's scores, scale · Q·Kᵀ
//   void probabilities(block, tile, alpha) the online softmax of the logits and dropout, into what
//                                          accumulate reads; alpha is the old accumulator's rescale
//   void accumulate(block, tile, alpha, between)   acc = alpha · acc + P·V
// and PackedTiles also pair_scores, pair_probabilities and pair_accumulate, for two tiles at once.
//
// `between` runs between a product's column chunks (the next block's row requests). The paths:
//   PackedF32             several tiles: K as panels, V as rows of float32, packed once per block;
//   PackedPairs           the same on a bf16-dot target when q, k and v are bf16: bf16 pairs;
//   PackedTiles           the same pairs on a tile target (AMX), both products on matrix tiles (and
//                         f16 pairs on a target with f16 tile products when q, k and v are f16);
//   DecodeFromRows        one tile (decoding): K and V read where they are stored, only the live
//                         rows computed (with Pairs, as bf16 pairs on a bf16-dot target);
//   SeenValuesOnly        a packed block holding NaN or ±inf: only the keys a row sees contribute.
// Included by flash_forward.inl inside the target's namespace; no include guard on purpose.

// What every step of an item's key loop reads: the plan, the thread's workspace, the item, the keys
// of its split, and the span of them some row sees.
struct ItemStream {
  const ForwardPlan& plan;
  ForwardWorkspace& ws;
  const ItemCoordinates& item;
  KeyRange keys;
  std::int64_t first_seen, last_seen;  // union of the rows' visible keys in the split (empty: first > last)
  const detail::Problem& problem() const { return *plan.problem; }
  bool dropout() const { return plan.problem->dropout_p > 0; }
};

// Keys [j0, j0 + width) of a block, as many as some row sees, padded to `cols` (whole tiles).
struct KeyBlock {
  std::int64_t j0, width, cols;
};

// Rows [row, row + kTileRows) of the item on one block, up to the last key one of them sees
// (`width`, padded to a vector: `cols`). Columns past it are neither computed nor summed.
struct Tile {
  std::int64_t row, width, cols;
};

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

// ---- the f16 tile path: targets with f16 tile products (Isa::kTilesF16), when q, k and v are f16 ----
//
// The tile path of bf16 with pairs of halves (tdpfp16ps): P rounded to f16 before P·V. P ≤ 1 fits
// f16; dropout's 1/(1 − p_drop) scales a kept p past f16's largest value (65504) only when p_drop >
// 1 − 2^−16, and the infinite accumulator then has the item redone with headroom (run_item), which
// scales every p down as for any overflow.
bool uses_f16_tiles(const detail::Problem& p) {
  return Isa::kTilesF16 && p.q.dtype() == DType::f16 && p.k.dtype() == DType::f16 && p.v.dtype() == DType::f16;
}

// ---- the products of a packed block ----

// scores[r][·] = scale · q[r] · K_jᵀ for the kTileRows rows of the tile and `cols` keys.
template <class Between = NothingBetweenChunks>
void score_tile(const ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float scale, Between&& between = {}) {
  tile_a_bt(ws.q + tile * ws.d_k, ws.d_k, ws.k_t, ws.d_k, cols, scale, ws.scores, kKeyBlock, between);
}

// acc[r][·] = acc[r][·] · alpha[r] + Σ_j p[r][j] · v[j][·] over the tile's first Rows rows and its
// `width` keys up to its last visible one (p is 0 past it: on the causal diagonal, summing only
// those rather than whole tiles of keys saves a tile's half on average).
template <std::int64_t Rows = kTileRows, class Between = NothingBetweenChunks>
void accumulate_pv(ForwardWorkspace& ws, std::int64_t tile, std::int64_t width, const float* alpha,
                   Between&& between = {}) {
  tile_a_b<Rows>(ws.scores, kKeyBlock, ws.v, ws.d_v, width, ws.d_v, alpha, ws.acc + tile * ws.d_v, ws.d_v, between);
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

// scores[r][·] = scale · q[r] · K_jᵀ for the tile's rows, from the pairs.
template <class I = Isa, class Between = NothingBetweenChunks>
void score_tile_bf16(const ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float scale,
                     Between&& between = {}) {
  const std::int64_t pairs = pair_count(ws.d_k);
  tile_a_bt<Bf16PairOperands<I>>(ws.q_bf16 + tile * 2 * pairs, 2 * pairs, reinterpret_cast<const std::uint32_t*>(ws.k_t),
                                 pairs, cols, scale, ws.scores, kKeyBlock, between);
}

// acc[r][·] = acc[r][·] · alpha[r] + Σ_j p[r][j] · v[j][·] from the pairs of p (p_pairs) and of the
// value rows, over the tile's `width` keys, as accumulate_pv.
template <class I = Isa, class Between = NothingBetweenChunks>
void accumulate_pv_pairs(ForwardWorkspace& ws, std::int64_t tile, std::int64_t width, const float* alpha,
                         Between&& between = {}) {
  tile_a_b<kTileRows, Bf16PairOperands<I>>(bf16_values(ws.p_pairs), kKeyBlock, reinterpret_cast<const std::uint32_t*>(ws.v),
                                           ws.d_v, pair_count(width), ws.d_v, alpha, ws.acc + tile * ws.d_v, ws.d_v,
                                           between);
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

void apply_bias_and_mask(const ItemStream& s, const KeyBlock& block, const Tile& tile) {
  apply_bias_and_mask(s.plan, s.ws, s.item, tile.row, block.j0, tile.width, tile.cols, s.keys);
}

// seen[r][j] ← whether row r of the tile sees key j (its logit is not −inf), for the seen-only sum;
// rows from `rows` on (a decode tile's padding) see nothing.
void mark_seen(ForwardWorkspace& ws, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    std::uint8_t* seen = ws.seen + r * kKeyBlock;
    const float* scores = ws.scores + r * kKeyBlock;
    if (r >= rows) {
      std::fill(seen, seen + cols, std::uint8_t{0});
      continue;
    }
    for (std::int64_t j = 0; j < cols; ++j) seen[j] = scores[j] != kMinusInf;
  }
}

// The online softmax of the tile's logits, then dropout: P as float32 in ws.scores.
void softmax_and_dropout(const ItemStream& s, const KeyBlock& block, const Tile& tile, float* alpha) {
  online_softmax(s.ws, tile.row, tile.cols, alpha);
  if (s.dropout()) apply_dropout(s.plan, s.ws, s.item, tile.row, block.j0, tile.width);
}

// ---- the paths ----

struct PackedF32 {
  static constexpr bool kPacked = true;
  static constexpr std::int64_t kColumnPad = kLanes;  // a tile's columns: its width rounded up to this
  const ItemStream& s;

  bool pack(const KeyBlock& b) {
    pack_keys<F32KeyPanels>(s.plan, s.ws, s.item, b.j0, b.width, b.cols);
    return pack_values<F32ValueBlock>(s.plan, s.ws, s.item, b.j0, b.width, b.cols);
  }
  template <class Between>
  void scores(const KeyBlock&, const Tile& t, Between& between) {
    score_tile(s.ws, t.row, t.cols, s.problem().f32.scale, between);
  }
  void probabilities(const KeyBlock& b, const Tile& t, float* alpha) { softmax_and_dropout(s, b, t, alpha); }
  void float_probabilities(const KeyBlock& b, const Tile& t, float* alpha) { softmax_and_dropout(s, b, t, alpha); }
  template <class Between>
  void accumulate(const KeyBlock&, const Tile& t, const float* alpha, Between& between) {
    accumulate_pv(s.ws, t.row, t.width, alpha, between);
  }
};

// P is rounded to the Format (bf16; f16 only on the f16 tile path) into pairs along keys for P·V:
// straight from the exponentials without dropout (online_softmax_into_pairs), after it with dropout.
// KeyPanels: the kind of key panels packed (PackedTiles pads them to whole tile rows). The products
// here are vdpbf16ps's; PackedTiles replaces them.
template <class I = Isa, class KeyPanels = PairKeyPanels, class Format = Bf16Pairs<I>>
struct PackedPairs {
  static constexpr bool kPacked = true;
  static constexpr std::int64_t kColumnPad = kLanes;
  const ItemStream& s;

  // Values holding NaN or ±inf are packed as float32 for SeenValuesOnly.
  bool pack(const KeyBlock& b) {
    pack_keys<KeyPanels>(s.plan, s.ws, s.item, b.j0, b.width, b.cols);
    if (pack_values<PairValueBlock<I, Format>>(s.plan, s.ws, s.item, b.j0, b.width, b.cols)) return true;
    pack_values<F32ValueBlock>(s.plan, s.ws, s.item, b.j0, b.width, b.cols);
    return false;
  }
  template <class Between>
  void scores(const KeyBlock&, const Tile& t, Between& between) {
    score_tile_bf16<I>(s.ws, t.row, t.cols, s.problem().f32.scale, between);
  }
  void probabilities(const KeyBlock& b, const Tile& t, float* alpha) {
    if (!s.dropout()) return online_softmax_into_pairs<Format>(s.ws, t.row, t.cols, alpha);
    softmax_and_dropout(s, b, t, alpha);
    round_tile_into_pairs<kTileRows, Format>(s.ws, t.width);
  }
  // P as float32 rounded to the Format, for the float32 values of SeenValuesOnly.
  void float_probabilities(const KeyBlock& b, const Tile& t, float* alpha) {
    softmax_and_dropout(s, b, t, alpha);
    round_probabilities<Format>(s.ws, t.cols);
  }
  template <class Between>
  void accumulate(const KeyBlock&, const Tile& t, const float* alpha, Between& between) {
    accumulate_pv_pairs<I>(s.ws, t.row, t.width, alpha, between);
  }
};

// The tile path (targets with Isa::kTiles, when q, k and v are bf16; with Isa::kTilesF16 also when
// they are f16, Format F16Pairs): PackedPairs' packing and probabilities with both products on
// matrix tiles (tile_products.inl). A tile's columns are whole tile rows of keys (kTileDepth), so P·V
// never reads probabilities past the ones the softmax wrote; the keys past the last visible one are
// masked to −inf, so their p is 0.
template <class I = Isa, class Format = Bf16Pairs<I>>
struct PackedTiles {
  static constexpr bool kPacked = true;
  static constexpr std::int64_t kColumnPad = kTileDepth;
  const ItemStream& s;
  PackedPairs<I, TilePairKeyPanels, Format> pairs{s};

  bool pack(const KeyBlock& b) { return pairs.pack(b); }
  template <class Between>
  void scores(const KeyBlock&, const Tile& t, Between& between) {
    score_tile_tiles<I, Format>(s.ws, t.row, t.cols, s.problem().f32.scale, between);
  }
  void probabilities(const KeyBlock& b, const Tile& t, float* alpha) { pairs.probabilities(b, t, alpha); }
  void float_probabilities(const KeyBlock& b, const Tile& t, float* alpha) { pairs.float_probabilities(b, t, alpha); }
  template <class Between>
  void accumulate(const KeyBlock&, const Tile& t, const float* alpha, Between& between) {
    accumulate_pv_tiles<I, Format>(s.ws, t.row, t.cols, alpha, between);
  }
  // Two tiles at once (stream_tile_pair): the dot products of rows [row, row + 2·kTileRows) over
  // `cols` keys into ws.scores' two tiles, not yet scaled; then, per tile, the scale, bias and mask
  // and the softmax (the scale in the softmax's first pass where the scores are the logits, without
  // dropout); then their P·V from ws.p_pairs' two tiles. Each key and value tile feeds both tiles'
  // products (tile_products.inl).
  template <class Between>
  void pair_scores(std::int64_t row, std::int64_t cols, Between& between) {
    score_tile_tiles<I, Format, 2>(s.ws, row, cols, 1.0f, between);
  }
  void pair_probabilities(const KeyBlock& b, const Tile& t, float* alpha, bool scores_are_logits) {
    const float scale = s.problem().f32.scale;
    if (scores_are_logits && !s.dropout()) return online_softmax_into_pairs<Format>(s.ws, t.row, t.cols, alpha, scale);
    scale_rows(s.ws.scores, kKeyBlock, kTileRows, t.cols, scale);
    if (!scores_are_logits) apply_bias_and_mask(s, b, t);
    probabilities(b, t, alpha);
  }
  template <class Between>
  void pair_accumulate(std::int64_t row, std::int64_t cols, const float* alpha, Between& between) {
    accumulate_pv_tiles<I, Format, 2>(s.ws, row, cols, alpha, between);
  }
};

// A packed block whose values hold NaN or ±inf: each row sums only the values of keys it sees, so a
// masked key's values never reach the output (0 · NaN would). Rare, so plain loops.
template <class Path>
struct SeenValuesOnly {
  static constexpr bool kPacked = true;
  static constexpr std::int64_t kColumnPad = Path::kColumnPad;
  Path& path;

  template <class Between>
  void scores(const KeyBlock& b, const Tile& t, Between& between) {
    path.scores(b, t, between);
  }
  void probabilities(const KeyBlock& b, const Tile& t, float* alpha) {
    mark_seen(path.s.ws, kTileRows, t.cols);
    path.float_probabilities(b, t, alpha);
  }
  template <class Between>
  void accumulate(const KeyBlock&, const Tile& t, const float* alpha, Between&) {
    accumulate_pv_seen_only(path.s.ws, t.row, t.cols, alpha);
  }
};

// Decoding: the item is a single tile of Rows live rows. Scores come from the key rows as stored
// (score_tile_from_key_rows, which also requests the rows ahead); V is read in place where its
// layout allows, else packed after the scores (its rows then already requested). Whether the values
// are finite is known only once they are read, so each block marks the keys its rows see and falls
// back to the seen-only sum there. With Pairs (bf16 rows on a bf16-dot target), the products are
// bf16 dot products; without, a bf16-dot target still rounds P to bf16, as its other paths do.
template <std::int64_t Rows, bool Pairs = false>
struct DecodeFromRows {
  static constexpr bool kPacked = false;
  static constexpr std::int64_t kColumnPad = kLanes;
  const ItemStream& s;
  bool values_in_place = value_rows_in_place(s.problem(), s.ws);
  bool rounds_p = uses_bf16_dot(s.problem());
  bool values_finite = true;  // of the block's packed copy

  template <class Between>
  void scores(const KeyBlock& b, const Tile&, Between&) {
    score_tile_from_key_rows<Rows, Pairs>(s.plan, s.ws, s.item, b.j0, b.width, b.cols, s.problem().f32.scale,
                                          s.last_seen + 1 - b.j0);
    if (!values_in_place) values_finite = pack_values<F32ValueBlock>(s.plan, s.ws, s.item, b.j0, b.width, b.cols);
  }
  void probabilities(const KeyBlock& b, const Tile& t, float* alpha) {
    if (!values_finite || values_in_place) mark_seen(s.ws, Rows, t.cols);
    softmax_and_dropout(s, b, t, alpha);
    if constexpr (Isa::kDotBf16 && !Pairs) {
      if (rounds_p) round_probabilities(s.ws, t.cols);  // Pairs rounds into pairs as it sums
    }
  }
  template <class Between>
  void accumulate(const KeyBlock& b, const Tile& t, const float* alpha, Between&) {
    if (values_in_place) {
      if (accumulate_pv_in_place<Rows, Pairs>(s.plan, s.ws, s.item, b.j0, t.width, alpha)) return;
      if constexpr (Pairs) round_probabilities(s.ws, t.cols);
      pack_values<F32ValueBlock>(s.plan, s.ws, s.item, b.j0, b.width, b.cols);
      accumulate_pv_seen_only(s.ws, t.row, t.cols, alpha);
    } else if (values_finite) {
      accumulate_pv<Rows>(s.ws, t.row, t.width, alpha);
    } else {
      accumulate_pv_seen_only(s.ws, t.row, t.cols, alpha);
    }
  }
};
