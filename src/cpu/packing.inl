// Reading rows as float32 and packing them into the panels the micro-kernels stream, written once
// over an ISA wrapper. Included by src/cpu/kernels_<target>.cpp inside the target's namespace (see
// flash_forward.inl); no include guard on purpose.

// This target's geometry (geometry.hpp, which checks that it fits every plan and workspace).
constexpr std::int64_t kLanes = Isa::kLanes;
constexpr std::int64_t kTileRows = Isa::kGeometry.tile_rows;
constexpr std::int64_t kTileVectors = Isa::kGeometry.tile_vectors;
constexpr std::int64_t kTileCols = Isa::kGeometry.tile_cols();
constexpr std::int64_t kKeyBlock = Isa::kGeometry.key_block;
constexpr std::int64_t kBackwardKeyBlock = Isa::kGeometry.backward_key_block;
constexpr std::int64_t kBackwardKeyPad = Isa::kGeometry.backward_key_pad();
static_assert(kLanes == Isa::kGeometry.lanes, "the wrapper's vectors are the geometry's");
static_assert(fits_every_plan(Isa::kGeometry), "the target's tiles fit the plans and workspaces");
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

#include "cpu/quantized_loads.inl"

// out[c] = t[b, h, i, c] as float32: rows of unit stride are widened here with vector loads (whole
// quantized rows dequantised in registers); any other layout goes through the generic element reader.
void load_row_f32(const ConstTensorView& t, std::int64_t b, std::int64_t h, std::int64_t i, float* out,
                  std::int64_t count) {
  if (is_quantized(t.dtype()) && t.stride(3) == 1 && count == t.size(3) && count % kLanes == 0) {
    const std::byte* row = t.at<std::byte>({b, h, i, 0});
    switch (t.dtype()) {
      case DType::int8: dequantize_row_into<DType::int8>(row, count, out); break;
      case DType::fp8_e4m3: dequantize_row_into<DType::fp8_e4m3>(row, count, out); break;
      case DType::fp8_e5m2: dequantize_row_into<DType::fp8_e5m2>(row, count, out); break;
      default: dequantize_row_into<DType::int4>(row, count, out); break;
    }
    return;
  }
  if (t.stride(3) != 1 || (t.dtype() != DType::bf16 && t.dtype() != DType::f16)) {
    load_row(t, b, h, i, out, count);
    return;
  }
  const auto* row = static_cast<const std::uint16_t*>(t.data()) + b * t.stride(0) + h * t.stride(1) + i * t.stride(2);
  const bool brain = t.dtype() == DType::bf16;
  std::int64_t c = 0;
  for (; c + kLanes <= count; c += kLanes) Isa::store(out + c, brain ? Isa::load_bf16(row + c) : Isa::load_f16(row + c));
  if (c < count) load_row_part(t, b, h, i, c, out + c, count - c);  // the tail, element by element
}

// Panels of kTileCols rows: panel p holds, for each feature c < depth, the c-th element of rows
// p·kTileCols .. p·kTileCols + kTileCols − 1, so that a micro-kernel reads it front to back. `rows`
// holds `count` row pointers (count a multiple of kTileCols; padding rows point at zeros).
void pack_panels(const float* const* rows, std::int64_t count, std::int64_t depth, float* panels) {
  const std::int64_t vector_end = depth / kLanes * kLanes;
  for (std::int64_t p0 = 0; p0 < count; p0 += kTileCols) {
    float* panel = panels + p0 * depth;
    for (std::int64_t c = 0; c < vector_end; c += kLanes)
      for (std::int64_t t0 = 0; t0 < kTileCols; t0 += kLanes)
        Isa::transpose_into(rows + p0 + t0, c, panel + c * kTileCols + t0, kTileCols);
    // The tail moves 32-bit elements as bytes: the bf16-dot path packs pairs of bf16 values (bits,
    // not floats, possibly 2-byte aligned) through this same function.
    for (std::int64_t c = vector_end; c < depth; ++c)
      for (std::int64_t t = 0; t < kTileCols; ++t) std::memcpy(panel + c * kTileCols + t, rows[p0 + t] + c, sizeof(float));
  }
}

// Whether every element of the `count` floats is finite (x − x is NaN exactly for ±inf and NaN).
bool all_finite(const float* x, std::int64_t count) {
  Vec not_finite = Isa::zero();
  std::int64_t c = 0;
  for (; c + kLanes <= count; c += kLanes) {
    const Vec v = Isa::load(x + c);
    not_finite = Isa::or_nan(not_finite, Isa::sub(v, v));
  }
  for (; c < count; ++c)
    if (!std::isfinite(x[c])) return false;
  return !Isa::any_set(not_finite);
}
