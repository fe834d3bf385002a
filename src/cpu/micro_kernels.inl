// The register-tiled products every fast kernel is made of, written once over an ISA wrapper:
// kTileRows × kTileVectors vectors of accumulators (geometry.hpp: 6 × 2 on AVX2, 8 × 2 on AVX-512),
// kTileVectors loads and kTileRows broadcasts per step. Included inside the target's namespace; no include guard on purpose.

// What a micro-kernel runs between two column chunks of its tile when the caller has nothing to
// interleave (the forward spreads its prefetches of the next key block there).
struct NothingBetweenChunks {
  void operator()() const {}
};

// chunk(c0, std::integral_constant<std::int64_t, v>{}) for the column chunks of `cols` (a multiple of
// kLanes): whole tiles of v = kTileVectors vectors, then a narrower last chunk of the remaining
// v = (cols − c0) / kLanes vectors, if any.
template <class Chunk>
void for_each_column_chunk(std::int64_t cols, Chunk&& chunk) {
  std::int64_t c0 = 0;
  for (; c0 + kTileCols <= cols; c0 += kTileCols) chunk(c0, std::integral_constant<std::int64_t, kTileVectors>{});
  [&]<std::int64_t... V>(std::integer_sequence<std::int64_t, V...>) {
    (void)((cols - c0 == (V + 1) * kLanes ? (chunk(c0, std::integral_constant<std::int64_t, V + 1>{}), true) : false) ||
           ...);
  }(std::make_integer_sequence<std::int64_t, kTileVectors - 1>{});
}

// c[r][0 .. cols) = alpha · Σ_x a[r][x] · b[x][·] for the kTileRows rows of a, where b is given as
// panels (pack_panels) of kTileCols columns: the A·Bᵀ of scores (Q·Kᵀ) and of dP (dO·Vᵀ). cols is a
// multiple of kLanes: a last chunk narrower than a tile takes only its vectors of the panel (on the
// causal diagonal, a tile's columns end at its last row's key, rounded up to a vector rather than
// a tile). between() runs after each chunk.
template <class Between = NothingBetweenChunks>
void tile_a_bt(const float* a, std::int64_t lda, const float* panels, std::int64_t depth, std::int64_t cols,
               float alpha, float* c, std::int64_t ldc, Between&& between = {}) {
  const Vec alpha_v = Isa::set1(alpha);
  // Inlined into the chunk loop: called, each chunk pays a call, its accumulators zeroed on the stack
  // and its loop's set-up, a tenth of its 64 steps at d = 64 (inlined, the AVX2 forward at d = 64
  // measured 1.02–1.05× on a Zen 3; see docs/tuning.md, "The micro-kernels").
  auto chunk = [&]<std::int64_t Vectors>(std::int64_t c0, std::integral_constant<std::int64_t, Vectors>)
                   __attribute__((always_inline)) {
    Vec acc[kTileRows][Vectors];
    for (auto& row : acc)
      for (Vec& a : row) a = Isa::zero();
    const float* b = panels + c0 * depth;
    // Unrolled: a step is only 12 FMAs and 8 loads on AVX2, so without unrolling the loop's own 3
    // instructions per step are 8% of the forward's instructions (docs/tuning.md, "The
    // micro-kernels").
#pragma GCC unroll 4
    for (std::int64_t x = 0; x < depth; ++x, b += kTileCols) {
      Vec bv[Vectors];
      for (std::int64_t v = 0; v < Vectors; ++v) bv[v] = Isa::load(b + v * kLanes);
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const Vec ar = Isa::set1(a[r * lda + x]);
        for (std::int64_t v = 0; v < Vectors; ++v) acc[r][v] = Isa::fma(ar, bv[v], acc[r][v]);
      }
    }
    for (std::int64_t r = 0; r < kTileRows; ++r) {
      for (std::int64_t v = 0; v < Vectors; ++v) Isa::store(c + r * ldc + c0 + v * kLanes, Isa::mul(acc[r][v], alpha_v));
    }
    between();
  };
  for_each_column_chunk(cols, chunk);
}

// c[r][0 .. width) = c[r][·] · row_scale[r] + Σ_j a[r][j] · b[j][·] for the Rows rows of a (a whole
// tile unless a decode tile has fewer live rows) and `depth` values of j (width a multiple of
// kTileCols): the A·B of P·V and of dQ = dS·K. between() runs after each chunk of kTileCols columns.
template <std::int64_t Rows = kTileRows, class Between = NothingBetweenChunks>
void tile_a_b(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, std::int64_t depth,
              std::int64_t width, const float* row_scale, float* c, std::int64_t ldc, Between&& between = {}) {
  static_assert(Rows >= 1 && Rows <= kTileRows);
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[Rows][kTileVectors];
    for (std::int64_t r = 0; r < Rows; ++r) {
      const Vec scale = Isa::set1(row_scale != nullptr ? row_scale[r] : 1.0f);
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = Isa::mul(Isa::load(c + r * ldc + c0 + v * kLanes), scale);
    }
    const float* bj = b + c0;
#pragma GCC unroll 4  // as tile_a_bt's
    for (std::int64_t j = 0; j < depth; ++j, bj += ldb) {
      Vec bv[kTileVectors];
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = Isa::load(bj + v * kLanes);
      for (std::int64_t r = 0; r < Rows; ++r) {
        const Vec ar = Isa::set1(a[r * lda + j]);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = Isa::fma(ar, bv[v], acc[r][v]);
      }
    }
    for (std::int64_t r = 0; r < Rows; ++r) {
      for (std::int64_t v = 0; v < kTileVectors; ++v) Isa::store(c + r * ldc + c0 + v * kLanes, acc[r][v]);
    }
    between();
  }
}

// f(std::integral_constant<std::int64_t, rows>{}) for 1 <= rows <= kTileRows: a micro-kernel unrolled
// for the live rows of a decode tile (a GQA group of 4 on a 6-row tile computes 4 rows, not 6).
template <class F>
void with_live_rows(std::int64_t rows, F&& f) {
  [&]<std::int64_t... R>(std::integer_sequence<std::int64_t, R...>) {
    (void)((rows == R + 1 ? (f(std::integral_constant<std::int64_t, R + 1>{}), true) : false) || ...);
  }(std::make_integer_sequence<std::int64_t, kTileRows>{});
}

// c[t][0 .. width) += Σ_r a[r][t] · b[r][·] for the kTileRows columns t of a and `depth` rows r:
// the Aᵀ·B of the backward's dV = Pᵀ·dO and dK = dSᵀ·Q, summed over a block of query rows.
void tile_at_b(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, std::int64_t depth,
               std::int64_t width, float* c, std::int64_t ldc) {
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[kTileRows][kTileVectors];
    for (std::int64_t t = 0; t < kTileRows; ++t) {
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[t][v] = Isa::load(c + t * ldc + c0 + v * kLanes);
    }
    const float* br = b + c0;
    const float* ar = a;
    for (std::int64_t r = 0; r < depth; ++r, br += ldb, ar += lda) {
      Vec bv[kTileVectors];
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = Isa::load(br + v * kLanes);
      for (std::int64_t t = 0; t < kTileRows; ++t) {
        const Vec at = Isa::set1(ar[t]);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[t][v] = Isa::fma(at, bv[v], acc[t][v]);
      }
    }
    for (std::int64_t t = 0; t < kTileRows; ++t) {
      for (std::int64_t v = 0; v < kTileVectors; ++v) Isa::store(c + t * ldc + c0 + v * kLanes, acc[t][v]);
    }
  }
}

// ---- the same products with bf16 dot products (targets whose Isa::kDotBf16; templates, so that other
// targets never instantiate them) ----
// Operands are pairs of bf16 values packed in 32 bits; each step multiplies kLanes pairs and adds
// both products into float32 accumulators (Isa::dot_bf16).

// Two consecutive bf16 values as one pair (read as bytes: the array holds 16-bit elements).
inline std::uint32_t pair_at(const std::uint16_t* p) {
  std::uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return pair;
}

// c[r][0 .. cols) = alpha · Σ_x a[r][x] · b[x][·], as tile_a_bt (a narrower last chunk too), where a
// holds each row's elements as bf16 values (`depth` pairs, rows lda elements apart) and the panels
// hold pairs of consecutive elements of kTileCols rows of b.
template <class I = Isa, class Between = NothingBetweenChunks>
void tile_a_bt_bf16(const std::uint16_t* a, std::int64_t lda, const std::uint32_t* panels, std::int64_t depth,
                    std::int64_t cols, float alpha, float* c, std::int64_t ldc, Between&& between = {}) {
  const Vec alpha_v = I::set1(alpha);
  auto chunk = [&]<std::int64_t Vectors>(std::int64_t c0, std::integral_constant<std::int64_t, Vectors>) {
    Vec acc[kTileRows][Vectors];
    for (auto& row : acc)
      for (Vec& x : row) x = I::zero();
    const std::uint32_t* b = panels + c0 * depth;
    for (std::int64_t x = 0; x < depth; ++x, b += kTileCols) {
      typename I::Pairs bv[Vectors];
      for (std::int64_t v = 0; v < Vectors; ++v) bv[v] = I::load_pairs(b + v * kLanes);
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const typename I::Pairs ar = I::broadcast_pair(pair_at(a + r * lda + 2 * x));
        for (std::int64_t v = 0; v < Vectors; ++v) acc[r][v] = I::dot_bf16(acc[r][v], ar, bv[v]);
      }
    }
    for (std::int64_t r = 0; r < kTileRows; ++r)
      for (std::int64_t v = 0; v < Vectors; ++v) I::store(c + r * ldc + c0 + v * kLanes, I::mul(acc[r][v], alpha_v));
    between();
  };
  for_each_column_chunk(cols, chunk);
}

// c[r][0 .. width) = c[r][·] · row_scale[r] + Σ_j a[r][j] · b[j][·], as tile_a_b (row_scale nullptr:
// 1), over `depth` pairs of j: a holds each row's pairs (a[r][j], a[r][j + 1]), b row j/2 the pairs
// (b[j][·], b[j + 1][·]).
template <class I = Isa, class Between = NothingBetweenChunks>
void tile_a_b_bf16(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b, std::int64_t ldb,
                   std::int64_t depth, std::int64_t width, const float* row_scale, float* c, std::int64_t ldc,
                   Between&& between = {}) {
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[kTileRows][kTileVectors];
    for (std::int64_t r = 0; r < kTileRows; ++r) {
      const Vec scale = I::set1(row_scale != nullptr ? row_scale[r] : 1.0f);
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = I::mul(I::load(c + r * ldc + c0 + v * kLanes), scale);
    }
    const std::uint32_t* bj = b + c0;
    for (std::int64_t j = 0; j < depth; ++j, bj += ldb) {
      typename I::Pairs bv[kTileVectors];
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = I::load_pairs(bj + v * kLanes);
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const typename I::Pairs ar = I::broadcast_pair(a[r * lda + j]);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = I::dot_bf16(acc[r][v], ar, bv[v]);
      }
    }
    for (std::int64_t r = 0; r < kTileRows; ++r)
      for (std::int64_t v = 0; v < kTileVectors; ++v) I::store(c + r * ldc + c0 + v * kLanes, acc[r][v]);
    between();
  }
}

// c[t][0 .. width) += Σ_r a[r][t] · b[r][·], as tile_at_b, over `depth` pairs of rows r: a row r/2
// holds the pairs (a[r][t], a[r + 1][t]) for each t, b row r/2 the pairs (b[r][·], b[r + 1][·]).
template <class I = Isa>
void tile_at_b_bf16(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b, std::int64_t ldb,
                    std::int64_t depth, std::int64_t width, float* c, std::int64_t ldc) {
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[kTileRows][kTileVectors];
    for (std::int64_t t = 0; t < kTileRows; ++t)
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[t][v] = I::load(c + t * ldc + c0 + v * kLanes);
    const std::uint32_t* br = b + c0;
    const std::uint32_t* ar = a;
    for (std::int64_t r = 0; r < depth; ++r, br += ldb, ar += lda) {
      typename I::Pairs bv[kTileVectors];
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = I::load_pairs(br + v * kLanes);
      for (std::int64_t t = 0; t < kTileRows; ++t) {
        const typename I::Pairs at = I::broadcast_pair(ar[t]);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[t][v] = I::dot_bf16(acc[t][v], at, bv[v]);
      }
    }
    for (std::int64_t t = 0; t < kTileRows; ++t)
      for (std::int64_t v = 0; v < kTileVectors; ++v) I::store(c + t * ldc + c0 + v * kLanes, acc[t][v]);
  }
}
