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

// The operand kinds the products take, each a way to load a vector of B, broadcast one element of
// A and multiply-add them into float32 accumulators:
//   F32Operands        floats: an FMA per element;
//   Bf16PairOperands   pairs of consecutive bf16 values packed in 32 bits (targets whose
//                      Isa::kDotBf16): both products of a pair added into float32 (Isa::dot_bf16).
// A's rows are addressed in their own elements (floats, or bf16 values of which element x of the
// depth is the pair 2x, 2x + 1) and B's in its own (floats or pairs).
template <class I = Isa>
struct F32Operands {
  using AElement = float;
  using BElement = float;
  static Vec load(const BElement* b) { return I::load(b); }
  static Vec broadcast(const AElement* row, std::int64_t x) { return I::set1(row[x]); }
  static Vec multiply_add(Vec acc, Vec a, Vec b) { return I::fma(a, b, acc); }
};

// Two consecutive bf16 values as one pair (read as bytes: the array holds 16-bit elements).
inline std::uint32_t pair_at(const std::uint16_t* p) {
  std::uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return pair;
}

// Rows of pairs as the bf16 values they hold, for Bf16PairOperands' A.
inline const std::uint16_t* bf16_values(const std::uint32_t* pairs) { return reinterpret_cast<const std::uint16_t*>(pairs); }

template <class I = Isa>
struct Bf16PairOperands {
  using AElement = std::uint16_t;
  using BElement = std::uint32_t;
  // (Deduced return types: the class may be named on targets without pairs, in code they discard.)
  static auto load(const BElement* b) { return I::load_pairs(b); }
  static auto broadcast(const AElement* row, std::int64_t x) { return I::broadcast_pair(pair_at(row + 2 * x)); }
  static Vec multiply_add(Vec acc, auto a, auto b) { return I::dot_bf16(acc, a, b); }
};

// c[r][0 .. cols) = alpha · Σ_x a[r][x] · b[x][·] for the kTileRows rows of a, where b is given as
// panels (pack_panels) of kTileCols columns: the A·Bᵀ of scores (Q·Kᵀ) and of dP (dO·Vᵀ). cols is a
// multiple of kLanes: a last chunk narrower than a tile takes only its vectors of the panel (on the
// causal diagonal, a tile's columns end at its last row's key, rounded up to a vector rather than
// a tile). between() runs after each chunk.
template <class Operands = F32Operands<>, class Between = NothingBetweenChunks>
void tile_a_bt(const typename Operands::AElement* a, std::int64_t lda, const typename Operands::BElement* panels,
               std::int64_t depth, std::int64_t cols, float alpha, float* c, std::int64_t ldc, Between&& between = {}) {
  using Operand = decltype(Operands::load(nullptr));
  const Vec alpha_v = Isa::set1(alpha);
  // Inlined into the chunk loop: called, each chunk pays a call, its accumulators zeroed on the stack
  // and its loop's set-up, a tenth of its 64 steps at d = 64 (inlined, the AVX2 forward at d = 64
  // measured 1.02–1.05× on a Zen 3; see docs/tuning.md, "The micro-kernels").
  auto chunk = [&]<std::int64_t Vectors>(std::int64_t c0, std::integral_constant<std::int64_t, Vectors>)
                   __attribute__((always_inline)) {
    Vec acc[kTileRows][Vectors];
    for (auto& row : acc)
      for (Vec& x : row) x = Isa::zero();
    const typename Operands::BElement* b = panels + c0 * depth;
    // Unrolled: a step is only 12 FMAs and 8 loads on AVX2, so without unrolling the loop's own 3
    // instructions per step are 8% of the forward's instructions (docs/tuning.md, "The
    // micro-kernels").
#pragma GCC unroll 4
    for (std::int64_t x = 0; x < depth; ++x, b += kTileCols) {
      Operand bv[Vectors];
      for (std::int64_t v = 0; v < Vectors; ++v) bv[v] = Operands::load(b + v * kLanes);
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const Operand ar = Operands::broadcast(a + r * lda, x);
        for (std::int64_t v = 0; v < Vectors; ++v) acc[r][v] = Operands::multiply_add(acc[r][v], ar, bv[v]);
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
// kTileCols; row_scale nullptr: 1): the A·B of P·V and of dQ = dS·K. between() runs after each chunk
// of kTileCols columns. For pairs, a holds each row's pairs (a[r][j], a[r][j + 1]) and b row j/2 the
// pairs (b[j][·], b[j + 1][·]), over `depth` pairs of j.
template <std::int64_t Rows = kTileRows, class Operands = F32Operands<>, class Between = NothingBetweenChunks>
void tile_a_b(const typename Operands::AElement* a, std::int64_t lda, const typename Operands::BElement* b,
              std::int64_t ldb, std::int64_t depth, std::int64_t width, const float* row_scale, float* c,
              std::int64_t ldc, Between&& between = {}) {
  static_assert(Rows >= 1 && Rows <= kTileRows);
  using Operand = decltype(Operands::load(nullptr));
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[Rows][kTileVectors];
    for (std::int64_t r = 0; r < Rows; ++r) {
      const Vec scale = Isa::set1(row_scale != nullptr ? row_scale[r] : 1.0f);
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = Isa::mul(Isa::load(c + r * ldc + c0 + v * kLanes), scale);
    }
    const typename Operands::BElement* bj = b + c0;
#pragma GCC unroll 4  // as tile_a_bt's
    for (std::int64_t j = 0; j < depth; ++j, bj += ldb) {
      Operand bv[kTileVectors];
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = Operands::load(bj + v * kLanes);
      for (std::int64_t r = 0; r < Rows; ++r) {
        const Operand ar = Operands::broadcast(a + r * lda, j);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[r][v] = Operands::multiply_add(acc[r][v], ar, bv[v]);
      }
    }
    for (std::int64_t r = 0; r < Rows; ++r) {
      for (std::int64_t v = 0; v < kTileVectors; ++v) Isa::store(c + r * ldc + c0 + v * kLanes, acc[r][v]);
    }
    between();
  }
}

// f(std::integral_constant<std::int64_t, rows>{}) for 1 <= rows <= MaxRows: a micro-kernel unrolled
// for the live rows of a decode tile (a GQA group of 4 on a 6-row tile computes 4 rows, not 6).
template <std::int64_t MaxRows = kTileRows, class F>
void with_live_rows(std::int64_t rows, F&& f) {
  [&]<std::int64_t... R>(std::integer_sequence<std::int64_t, R...>) {
    (void)((rows == R + 1 ? (f(std::integral_constant<std::int64_t, R + 1>{}), true) : false) || ...);
  }(std::make_integer_sequence<std::int64_t, MaxRows>{});
}

// c[t][0 .. width) += Σ_r a[r][t] · b[r][·] for the kTileRows columns t of a and `depth` rows r:
// the Aᵀ·B of the backward's dV = Pᵀ·dO and dK = dSᵀ·Q, summed over a block of query rows. For
// pairs, over `depth` pairs of rows r: a row r/2 holds the pairs (a[r][t], a[r + 1][t]) for each t
// (so column t is element t of the row's pairs), b row r/2 the pairs (b[r][·], b[r + 1][·]).
template <class Operands = F32Operands<>>
void tile_at_b(const typename Operands::AElement* a, std::int64_t lda, const typename Operands::BElement* b,
               std::int64_t ldb, std::int64_t depth, std::int64_t width, float* c, std::int64_t ldc) {
  using Operand = decltype(Operands::load(nullptr));
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[kTileRows][kTileVectors];
    for (std::int64_t t = 0; t < kTileRows; ++t) {
      for (std::int64_t v = 0; v < kTileVectors; ++v) acc[t][v] = Isa::load(c + t * ldc + c0 + v * kLanes);
    }
    const typename Operands::BElement* br = b + c0;
    const typename Operands::AElement* ar = a;
    for (std::int64_t r = 0; r < depth; ++r, br += ldb, ar += lda) {
      Operand bv[kTileVectors];
      for (std::int64_t v = 0; v < kTileVectors; ++v) bv[v] = Operands::load(br + v * kLanes);
      for (std::int64_t t = 0; t < kTileRows; ++t) {
        const Operand at = Operands::broadcast(ar, t);
        for (std::int64_t v = 0; v < kTileVectors; ++v) acc[t][v] = Operands::multiply_add(acc[t][v], at, bv[v]);
      }
    }
    for (std::int64_t t = 0; t < kTileRows; ++t) {
      for (std::int64_t v = 0; v < kTileVectors; ++v) Isa::store(c + t * ldc + c0 + v * kLanes, acc[t][v]);
    }
  }
}
