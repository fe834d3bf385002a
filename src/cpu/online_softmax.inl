// The online softmax of one register tile of scores (core/softmax_partial.hpp says what it keeps),
// dropout, and the rounding of probabilities to bf16 for the bf16-dot products. Included by
// flash_forward.inl inside the target's namespace; no include guard on purpose.

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
// rescale factor alpha of the old partial: the first half of the online softmax. With a `scale`
// other than 1, the scores are dot products still to be multiplied by it, which this pass does in
// place (the tile path's, whose scale pass would read the scores once more).
void merge_block_max(ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float* new_max, float* alpha,
                     float scale = 1.0f) {
  const Vec scale_v = Isa::set1(scale);
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    float* s = ws.scores + r * kKeyBlock;
    Vec block_max = Isa::set1(kMinusInf);
    if (scale != 1.0f) {
      for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) {
        const Vec x = Isa::mul(Isa::load(s + c0), scale_v);
        Isa::store(s + c0, x);
        block_max = Isa::max(block_max, x);
      }
    } else {
      for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) block_max = Isa::max(block_max, Isa::load(s + c0));
    }
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

// The same with p rounded to the pairs' format (bf16, or f16 on the f16 tile path) straight into the
// pairs P·V reads (round_tile_into_pairs), never stored as floats and read back to be rounded (and
// the scores multiplied by `scale` first, as merge_block_max says): used
// on the pair paths without dropout; on the bf16-dot path it
// measured 1.01–1.03× at d = 64 on an AVX-512 Zen 5. See docs/tuning.md, "The online softmax and its
// exp".
template <class Format = Bf16Pairs<>>
void online_softmax_into_pairs(ForwardWorkspace& ws, std::int64_t tile, std::int64_t cols, float* alpha,
                               float scale = 1.0f) {
  float new_max[kTileRows];
  merge_block_max(ws, tile, cols, new_max, alpha, scale);
  exponentiate_rows(ws, tile, cols, new_max, alpha, [&](std::int64_t r, std::int64_t c0, Vec low, Vec high) {
    Format::round_into_pairs(low, high, ws.p_pairs + r * (kKeyBlock / 2) + c0 / 2);
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
      const std::array<float, 4> u = detail::dropout_uniforms(o.seed, item.batch, info.head, info.query, j0 + j);
      for (std::int64_t t = 0; t < 4 && j + t < width; ++t) {
        const bool keep = u[static_cast<std::size_t>(t)] >= threshold;
        p[j + t] = keep ? p[j + t] * keep_scale : 0.0f;
      }
    }
  }
}

// x[r][0 .. cols) ← scale · x[r][·] for `rows` rows ld apart (cols a multiple of kLanes): dot
// products made logits, in place.
void scale_rows(float* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, float scale) {
  const Vec scale_v = Isa::set1(scale);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ld;
    for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) Isa::store(row + c0, Isa::mul(Isa::load(row + c0), scale_v));
  }
}

// p ← p rounded to the pairs' format (bf16 unless told), in place over the tile's rows, before P·V.
template <class Format = Bf16Pairs<>>
void round_probabilities(ForwardWorkspace& ws, std::int64_t cols) {
  for (std::int64_t r = 0; r < kTileRows; ++r)
    for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) {
      float* p = ws.scores + r * kKeyBlock + c0;
      Isa::store(p, Format::round(Isa::load(p)));
    }
}

// p_pairs ← the probabilities of the tile's first Rows rows rounded to the format as pairs of consecutive
// keys (one instruction per 32 probabilities on the real target), over its `width` keys up to its
// last visible one. The partner of an odd last key is the next column's p: 0 where the scores were
// masked past the tile's keys, otherwise the caller's to clear.
template <std::int64_t Rows = kTileRows, class Format = Bf16Pairs<>>
void round_tile_into_pairs(ForwardWorkspace& ws, std::int64_t width) {
  static_assert(kTileCols % (2 * kLanes) == 0, "a tile's columns are whole groups of 2·kLanes probabilities");
  const std::int64_t pairs = pair_count(width);
  for (std::int64_t r = 0; r < Rows; ++r)
    for (std::int64_t c0 = 0; c0 < 2 * pairs; c0 += 2 * kLanes)
      Format::round_into_pairs(ws.scores + r * kKeyBlock + c0, ws.p_pairs + r * (kKeyBlock / 2) + c0 / 2);
}
