// The products of attention on matrix tiles (targets with Isa::kTiles: AMX), written once over the
// target's tile interface (Isa::Tiles: the instructions, simd/amx.hpp, or their model,
// simd/amx_model.hpp). A tile of sums is 16 rows × 16 floats; an operand tile is 16 rows of 32 bf16
// values, pairs along the inner dimension. The register tile of the vector code between the products
// is 16 rows (kAmxGeometry), so one tile of sums covers its rows.
//
//   scores = scale · Q·Kᵀ   A: 32 values of d_k for the 16 query rows,  B: 16 keys' pairs of them
//   acc   += P·V            A: 32 keys of P (rounded to bf16),          B: 16 columns of V's key pairs
//
// on two shapes, tiles_a_bt and tiles_a_b, which the backward's five products share
// (flash_backward.inl's TileProducts). Four tiles of sums are live at a time, over one or two row
// tiles (RowTiles): 16 rows × 64 columns from one A tile and four B tiles loaded in turn into two
// registers, or 32 rows × 32 columns from two A tiles and two B tiles (2 × 2), where each B tile
// feeds two products. The B operand (the key or value block) streams from L2, which takes about 1.5
// products' time to deliver a tile: with two products per B tile the products keep their rate, with
// one they ran at two thirds of it (docs/tuning.md, "AMX tiles"). Tile registers: sums 0–3, A 4 and
// 5, B 6 and 7.
// Included by flash_forward.inl inside the target's namespace; no include guard on purpose.

inline constexpr std::int64_t kSumColumns = 16;  // floats per row of a tile of sums
inline constexpr std::int64_t kSumTiles = 4;     // tiles of sums live at a time
inline constexpr int kOperandA = 4;  // the A tile of the first row tile; the second's is kOperandA + 1

// Every tile 16 rows of 64 bytes: the sums 16 × 16 floats, the operands 16 rows of 32 bf16 values.
// Loaded at the start of each work item, as other code on the thread may have configured the tiles
// otherwise in between (another library's AMX kernels).
template <class I = Isa>
void configure_tiles() {
  static_assert(!I::kTiles || (kTileRows == kTileMaxRows && kTileDepth * 2 == kTileRowBytes && kTileCols % (2 * kSumColumns) == 0));
  I::Tiles::configure(uniform_tile_config(kTileMaxRows, kTileRowBytes));
}

// The tile state back to its initial one (tilerelease), which the operating system saves cheaply.
template <class I = Isa>
void release_tiles() {
  I::Tiles::release();
}

// f(std::integral_constant<int, t>{}) for t = 0 .. Count − 1.
template <int Count, class F>
void for_each_sum_tile(F&& f) {
  [&]<int... T>(std::integer_sequence<int, T...>) { (f(std::integral_constant<int, T>{}), ...); }(
      std::make_integer_sequence<int, Count>{});
}

// chunk(c0, std::integral_constant<int, tiles>{}) over `columns` (a multiple of kSumColumns) in
// groups of up to MaxTiles tiles of sums.
template <int MaxTiles = kSumTiles, class Chunk>
void for_each_sum_chunk(std::int64_t columns, Chunk&& chunk) {
  static_assert(MaxTiles >= 1 && MaxTiles <= kSumTiles);
  for (std::int64_t c0 = 0; c0 < columns; c0 += MaxTiles * kSumColumns) {
    switch (std::min<std::int64_t>(MaxTiles, (columns - c0) / kSumColumns)) {
      case 1: chunk(c0, std::integral_constant<int, 1>{}); break;
      case 2: if constexpr (MaxTiles >= 2) chunk(c0, std::integral_constant<int, 2>{}); break;
      case 3: if constexpr (MaxTiles >= 3) chunk(c0, std::integral_constant<int, 3>{}); break;
      default: if constexpr (MaxTiles >= 4) chunk(c0, std::integral_constant<int, 4>{}); break;
    }
  }
}

// The B register of the t-th tile of sums: two in turn, so that a load overlaps the product before it.
template <int T>
constexpr int operand_b() {
  return T % 2 == 0 ? 6 : 7;
}

// One step of the products over RowTiles row tiles and Cols column tiles: for each column tile its B
// tile is loaded (load_b(ct, register)), and multiplied by each row tile's A tile, loaded with the
// first column tile (load_a(rt, register)), into sum tile rt·Cols + ct. With one row tile the B
// registers alternate, so that a load overlaps the product before it.
template <class Format, int RowTiles, int Cols, class LoadA, class LoadB>
void tile_step(LoadA&& load_a, LoadB&& load_b) {
  for_each_sum_tile<Cols>([&](auto c) {
    constexpr int kC = decltype(c)::value;
    load_b(kC, std::integral_constant<int, operand_b<kC>()>{});
    for_each_sum_tile<RowTiles>([&](auto r) {
      constexpr int kR = decltype(r)::value;
      if constexpr (kC == 0) load_a(kR, std::integral_constant<int, kOperandA + kR>{});
      Format::template tile_dot<kR * Cols + kC, kOperandA + kR, operand_b<kC>()>();
    });
  });
}

// c[r][0 .. cols) = scale · Σ_x a[r][x] · b[x][·] for 16 · RowTiles rows r: A as rows of bf16 values
// (a_stride values apart, pairs along x), B as panels of kTileCols columns holding `depth` pairs of
// each (pack_panels' layout: the scores' keys, the backward's dP values), depth a multiple of
// kTileDepth / 2 and cols of kSumColumns. The A·Bᵀ of the scores and of dP. between() runs after each
// chunk.
template <class I = Isa, class Format = Bf16Pairs<I>, int RowTiles = 1, class Between = NothingBetweenChunks>
void tiles_a_bt(const std::uint16_t* a, std::int64_t a_stride, const std::uint32_t* panels, std::int64_t depth,
                std::int64_t cols, float scale, float* c, std::int64_t ldc, Between&& between = {}) {
  using Tiles = typename I::Tiles;
  static_assert(RowTiles == 1 || RowTiles == 2);
  const std::int64_t a_bytes = a_stride * static_cast<std::int64_t>(sizeof(std::uint16_t));
  const std::int64_t c_bytes = ldc * static_cast<std::int64_t>(sizeof(float));
  for_each_sum_chunk<kSumTiles / RowTiles>(cols, [&]<int Cols>(std::int64_t c0, std::integral_constant<int, Cols>) {
    for_each_sum_tile<RowTiles * Cols>([&](auto t) { Tiles::template zero<decltype(t)::value>(); });
    for (std::int64_t x0 = 0; x0 < depth; x0 += kTileDepth / 2) {
      tile_step<Format, RowTiles, Cols>(
          [&]<int A>(std::int64_t rt, std::integral_constant<int, A>) {
            Tiles::template load<A>(a + rt * kTileMaxRows * a_stride + 2 * x0, a_bytes);
          },
          [&]<int B>(std::int64_t ct, std::integral_constant<int, B>) {
            const std::int64_t col = c0 + ct * kSumColumns;  // the tile's first column; its panel holds kTileCols
            const std::uint32_t* b = panels + col / kTileCols * kTileCols * depth + x0 * kTileCols + col % kTileCols;
            Tiles::template load<B>(b, kTileCols * static_cast<std::int64_t>(sizeof(std::uint32_t)));
          });
    }
    for_each_sum_tile<RowTiles * Cols>([&](auto t) {
      constexpr int kT = decltype(t)::value;
      Tiles::template store<kT>(c + kT / Cols * kTileMaxRows * ldc + c0 + kT % Cols * kSumColumns, c_bytes);
    });
    between();
  });
  // The scale multiplies the finished dot products, as on every target (flash_forward.inl). One pass
  // after the last chunk: a vector load right after a tile store of its row waits for the store,
  // which, chunk by chunk, cost a third of the product's time.
  if (scale != 1.0f) scale_rows(c, ldc, RowTiles * kTileMaxRows, cols, scale);
}

// c[r][0 .. width) += Σ_j a[r][j] · b[j][·] for 16 · RowTiles rows r over `depth` values of j (a
// multiple of kTileDepth): A as rows of bf16 values (a_stride values apart, pairs of consecutive j),
// B as rows of pairs (row j/2 holds (b[j][·], b[j + 1][·]), ldb pairs apart); width a multiple of
// kSumColumns. The A·B of P·V and of the backward's dQ, dK and dV. between() runs after each chunk.
template <class I = Isa, class Format = Bf16Pairs<I>, int RowTiles = 1, class Between = NothingBetweenChunks>
void tiles_a_b(const std::uint16_t* a, std::int64_t a_stride, const std::uint32_t* b, std::int64_t ldb, std::int64_t depth,
               std::int64_t width, float* c, std::int64_t ldc, Between&& between = {}) {
  using Tiles = typename I::Tiles;
  static_assert(RowTiles == 1 || RowTiles == 2);
  const std::int64_t a_bytes = a_stride * static_cast<std::int64_t>(sizeof(std::uint16_t));
  const std::int64_t c_bytes = ldc * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t b_bytes = ldb * static_cast<std::int64_t>(sizeof(std::uint32_t));
  for_each_sum_chunk<kSumTiles / RowTiles>(width, [&]<int Cols>(std::int64_t c0, std::integral_constant<int, Cols>) {
    auto sums_at = [&](int t) { return c + t / Cols * kTileMaxRows * ldc + c0 + t % Cols * kSumColumns; };
    for_each_sum_tile<RowTiles * Cols>([&](auto t) { Tiles::template load<decltype(t)::value>(sums_at(decltype(t)::value), c_bytes); });
    for (std::int64_t j0 = 0; j0 < depth; j0 += kTileDepth) {
      tile_step<Format, RowTiles, Cols>(
          [&]<int A>(std::int64_t rt, std::integral_constant<int, A>) {
            Tiles::template load<A>(a + rt * kTileMaxRows * a_stride + j0, a_bytes);
          },
          [&]<int B>(std::int64_t ct, std::integral_constant<int, B>) {
            Tiles::template load<B>(b + j0 / 2 * ldb + c0 + ct * kSumColumns, b_bytes);
          });
    }
    for_each_sum_tile<RowTiles * Cols>([&](auto t) { Tiles::template store<decltype(t)::value>(sums_at(decltype(t)::value), c_bytes); });
    between();
  });
}

// ---- the forward's two products ----

// scores[r][0 .. cols) = scale · q[r] · K_jᵀ for the 16 · RowTiles rows from `row`: the queries as
// bf16 rows of tile_query_stride values (prepare_query_pairs), the keys as TilePairKeyPanels. cols is
// a multiple of 2·kSumColumns (PackedTiles' columns).
template <class I = Isa, class Format = Bf16Pairs<I>, int RowTiles = 1, class Between = NothingBetweenChunks>
void score_tile_tiles(const ForwardWorkspace& ws, std::int64_t row, std::int64_t cols, float scale, Between&& between = {}) {
  const std::int64_t depth = tile_key_depth(ws.d_k), q_stride = 2 * depth;
  tiles_a_bt<I, Format, RowTiles>(ws.q_bf16 + row * q_stride, q_stride, reinterpret_cast<const std::uint32_t*>(ws.k_t), depth,
                                  cols, scale, ws.scores, kKeyBlock, between);
}

// acc[r][·] = acc[r][·] · alpha[r] + Σ_j p[r][j] · v[j][·] over the 16 · RowTiles rows from `row` and
// `width` keys (a multiple of kTileDepth; p is 0 past the last visible key), from the rounded
// probabilities as pairs (ws.p_pairs) and the value block as PairValueBlock's key pairs.
template <class I = Isa, class Format = Bf16Pairs<I>, int RowTiles = 1, class Between = NothingBetweenChunks>
void accumulate_pv_tiles(ForwardWorkspace& ws, std::int64_t row, std::int64_t width, const float* alpha,
                         Between&& between = {}) {
  float* acc = ws.acc + row * ws.d_v;
  for (std::int64_t r = 0; r < RowTiles * kTileRows; ++r) {
    const Vec a = Isa::set1(alpha[r]);
    for (std::int64_t c = 0; c < ws.d_v; c += kLanes) Isa::store(acc + r * ws.d_v + c, Isa::mul(Isa::load(acc + r * ws.d_v + c), a));
  }
  tiles_a_b<I, Format, RowTiles>(bf16_values(ws.p_pairs), kKeyBlock, reinterpret_cast<const std::uint32_t*>(ws.v), ws.d_v, width,
                                 ws.d_v, acc, ws.d_v, between);
}
