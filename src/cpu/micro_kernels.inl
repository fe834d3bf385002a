// The register-tiled products every fast kernel is made of, written once over an ISA wrapper:
// kTileRows × kTileCols accumulators (6 × 16 on AVX2: 12 of the 16 vector registers), one or two
// loads and a broadcast per step. Included inside the target's namespace; no include guard on purpose.

// c[r][0 .. cols) = alpha · Σ_x a[r][x] · b[x][·] for the kTileRows rows of a, where b is given as
// panels (pack_panels) of kTileCols columns: the A·Bᵀ of scores (Q·Kᵀ) and of dP (dO·Vᵀ).
void tile_a_bt(const float* a, std::int64_t lda, const float* panels, std::int64_t depth, std::int64_t cols,
               float alpha, float* c, std::int64_t ldc) {
  const Vec alpha_v = Isa::set1(alpha);
  for (std::int64_t c0 = 0; c0 < cols; c0 += kTileCols) {
    Vec acc[kTileRows][2];
    for (auto& row : acc) row[0] = row[1] = Isa::zero();
    const float* b = panels + c0 * depth;
    for (std::int64_t x = 0; x < depth; ++x, b += kTileCols) {
      const Vec b0 = Isa::load(b), b1 = Isa::load(b + kLanes);
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const Vec ar = Isa::set1(a[r * lda + x]);
        acc[r][0] = Isa::fma(ar, b0, acc[r][0]);
        acc[r][1] = Isa::fma(ar, b1, acc[r][1]);
      }
    }
    for (std::int64_t r = 0; r < kTileRows; ++r) {
      Isa::store(c + r * ldc + c0, Isa::mul(acc[r][0], alpha_v));
      Isa::store(c + r * ldc + c0 + kLanes, Isa::mul(acc[r][1], alpha_v));
    }
  }
}

// c[r][0 .. width) = c[r][·] · row_scale[r] + Σ_j a[r][j] · b[j][·] for the kTileRows rows of a and
// `depth` values of j (width a multiple of kTileCols): the A·B of P·V and of dQ = dS·K.
void tile_a_b(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, std::int64_t depth,
              std::int64_t width, const float* row_scale, float* c, std::int64_t ldc) {
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[kTileRows][2];
    for (std::int64_t r = 0; r < kTileRows; ++r) {
      const Vec scale = Isa::set1(row_scale != nullptr ? row_scale[r] : 1.0f);
      acc[r][0] = Isa::mul(Isa::load(c + r * ldc + c0), scale);
      acc[r][1] = Isa::mul(Isa::load(c + r * ldc + c0 + kLanes), scale);
    }
    const float* bj = b + c0;
    for (std::int64_t j = 0; j < depth; ++j, bj += ldb) {
      const Vec b0 = Isa::load(bj), b1 = Isa::load(bj + kLanes);
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const Vec ar = Isa::set1(a[r * lda + j]);
        acc[r][0] = Isa::fma(ar, b0, acc[r][0]);
        acc[r][1] = Isa::fma(ar, b1, acc[r][1]);
      }
    }
    for (std::int64_t r = 0; r < kTileRows; ++r) {
      Isa::store(c + r * ldc + c0, acc[r][0]);
      Isa::store(c + r * ldc + c0 + kLanes, acc[r][1]);
    }
  }
}

// c[t][0 .. width) += Σ_r a[r][t] · b[r][·] for the kTileRows columns t of a and `depth` rows r:
// the Aᵀ·B of the backward's dV = Pᵀ·dO and dK = dSᵀ·Q, summed over a block of query rows.
void tile_at_b(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, std::int64_t depth,
               std::int64_t width, float* c, std::int64_t ldc) {
  for (std::int64_t c0 = 0; c0 < width; c0 += kTileCols) {
    Vec acc[kTileRows][2];
    for (std::int64_t t = 0; t < kTileRows; ++t) {
      acc[t][0] = Isa::load(c + t * ldc + c0);
      acc[t][1] = Isa::load(c + t * ldc + c0 + kLanes);
    }
    const float* br = b + c0;
    const float* ar = a;
    for (std::int64_t r = 0; r < depth; ++r, br += ldb, ar += lda) {
      const Vec b0 = Isa::load(br), b1 = Isa::load(br + kLanes);
      for (std::int64_t t = 0; t < kTileRows; ++t) {
        const Vec at = Isa::set1(ar[t]);
        acc[t][0] = Isa::fma(at, b0, acc[t][0]);
        acc[t][1] = Isa::fma(at, b1, acc[t][1]);
      }
    }
    for (std::int64_t t = 0; t < kTileRows; ++t) {
      Isa::store(c + t * ldc + c0, acc[t][0]);
      Isa::store(c + t * ldc + c0 + kLanes, acc[t][1]);
    }
  }
}
