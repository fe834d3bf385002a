// Vectors of block-quantized rows (attnkit/quantized.hpp: a KV cache's int8, int4 and fp8 storage),
// dequantised in registers: decoding's dot products and the packing of key and value blocks read
// them this way, never through a float copy of the row. Each lane is the stored value rounded once
// to float32 (int8 and fp8: code · scale, exact; int4: offset + code · scale in one fused
// multiply-add), as dequantize_row gives it, so a kernel computes exactly what it would on that
// float row. Included inside the target's namespace (packing.inl, after the geometry); no include
// guard on purpose.

static_assert(kQuantBlock % kLanes == 0 && kQuantBlock % 2 == 0, "a vector of a quantized row lies in one block");

// The float16 at byte p of a row (the formats are little-endian, as every target is).
inline float row_f16(const std::byte* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return Isa::f16_to_float(bits);
}

// Whether the target reads int4 codes by looking each up in its block's table of 16 values
// (Isa::lookup_u4_low and _high: the AVX-512 targets, and the emulated 16-lane ones that test them).
// On an Intel Xeon (family 6, model 207), int4 decoding from cache measured about 1.1x over
// widening, converting and scaling each code (docs/tuning.md, "Quantized caches").
template <class I = Isa>
constexpr bool int4_by_table = requires(typename I::Vec table, const void* p) { I::lookup_u4_low(table, p); };

// What dequantises one block of a quantized row: value = code · scale (int8, fp8), or code · scale +
// offset (int4), each broadcast to every lane; with int4_by_table, int4's as a table, lane t holding
// offset + t · scale (the same fused multiply-add, so the same float). Worked out once per block and
// key, not per vector. E4M3's scale carries the 2^8 its codes are read without (load_e4m3_over_256):
// exact, and (code / 2^8) · (scale · 2^8) is the same product as code · scale, so the same float.
struct BlockScale {
  Vec scale, offset, table;
};

template <DType Stored, class I = Isa>
BlockScale make_block_scale(float scale, float offset) {
  if constexpr (Stored == DType::fp8_e4m3) scale *= 256.0f;
  BlockScale s{I::set1(scale), I::set1(offset), I::zero()};
  if constexpr (Stored == DType::int4 && int4_by_table<I>) {
    static_assert(I::kLanes == 16, "a table holds the 16 values of a 4-bit code");
    s.table = I::fma(I::iota(0.0f), s.scale, s.offset);
  }
  return s;
}

template <DType Stored>
BlockScale block_scale(const std::byte* row, std::int64_t width, std::int64_t block) {
  static_assert(is_quantized(Stored));
  const std::byte* at = row + quantized_block_params_at(Stored, width, block);  // scale (, offset)
  if constexpr (Stored == DType::int4) return make_block_scale<Stored>(row_f16(at), row_f16(at + 2));
  else return make_block_scale<Stored>(row_f16(at), 0.0f);
}

// Float16 parameters per block: int8 and fp8 its scale, int4 its scale and offset.
template <DType Stored>
inline constexpr std::int64_t kParamsPerBlock = Stored == DType::int4 ? 2 : 1;

// out[0 .. n) = the row's float16 block parameters as floats, from block `first` on (n parameters,
// kParamsPerBlock per block): four at a time where the target converts them together, so that the
// loops over a block take each parameter as a float from memory (converted one at a time and
// broadcast, they were a tenth of the int8 score loop's samples).
template <DType Stored>
void block_params_to_float(const std::byte* row, std::int64_t width, std::int64_t first, std::int64_t n, float* out) {
  const std::byte* at = row + quantized_block_params_at(Stored, width, first);
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) Isa::f16x4_to_float(at + 2 * i, out + i);
  for (; i < n; ++i) out[i] = row_f16(at + 2 * i);
}

// The same block's BlockScale from its parameters as block_params_to_float gives them.
template <DType Stored>
BlockScale block_scale(const float* params) {
  if constexpr (Stored == DType::int4) return make_block_scale<Stored>(params[0], params[1]);
  else return make_block_scale<Stored>(params[0], 0.0f);
}

// The 4-bit codes of elements c .. c + kLanes of an int4 row (c a multiple of kLanes), widened to
// floats. Byte i of a block's kQuantBlock / 2 holds the codes of its values i (low nibble) and
// i + kQuantBlock / 2 (high nibble).
inline Vec load_int4_codes(const std::byte* row, std::int64_t c) {
  constexpr std::int64_t kHalf = kQuantBlock / 2;
  const std::int64_t lane = c % kQuantBlock;
  const std::byte* codes = row + c / kQuantBlock * kHalf;
  return lane < kHalf ? Isa::load_u4_low(codes + lane) : Isa::load_u4_high(codes + lane - kHalf);
}

// Elements c .. c + kLanes of the row (c a multiple of kLanes, in the block `s` belongs to).
template <DType Stored, class I = Isa>
Vec load_quantized(const std::byte* row, std::int64_t c, const BlockScale& s) {
  if constexpr (Stored == DType::int8) {
    return Isa::mul(Isa::load_i8(row + c), s.scale);
  } else if constexpr (Stored == DType::fp8_e5m2) {
    return Isa::mul(Isa::load_e5m2(row + c), s.scale);
  } else if constexpr (Stored == DType::fp8_e4m3) {
    return Isa::mul(Isa::load_e4m3_over_256(row + c), s.scale);
  } else {
    if constexpr (int4_by_table<I>) {  // the nibbles as load_int4_codes finds them
      constexpr std::int64_t kHalf = kQuantBlock / 2;
      const std::int64_t lane = c % kQuantBlock;
      const std::byte* codes = row + c / kQuantBlock * kHalf;
      return lane < kHalf ? I::lookup_u4_low(s.table, codes + lane) : I::lookup_u4_high(s.table, codes + lane - kHalf);
    }
    return Isa::fma(load_int4_codes(row, c), s.scale, s.offset);
  }
}

// The same for a row of `width` values, c anywhere.
template <DType Stored>
Vec load_quantized(const std::byte* row, std::int64_t width, std::int64_t c) {
  return load_quantized<Stored>(row, c, block_scale<Stored>(row, width, c / kQuantBlock));
}

// out[0 .. width) = the row's values as floats.
template <DType Stored>
void dequantize_row_into(const std::byte* row, std::int64_t width, float* out) {
  for (std::int64_t c = 0; c < width; c += kLanes) Isa::store(out + c, load_quantized<Stored>(row, width, c));
}

// Keys quantised per channel over a group of kChannelGroup tokens (quantize_channel_group): the
// group's float16 parameters converted once into float arrays, scale[c] and (int4) offset[c], which
// every key of the group then reads a vector at a time. `pairs` is room for 2 · width floats.
template <DType Stored>
void channel_group_params_to_float(const std::byte* const* rows, std::int64_t width, float* scale, float* offset,
                                   float* pairs) {
  static_assert(has_channel_groups(Stored));
  const std::int64_t per_row = width / kQuantBlock;  // channels whose parameters a record holds
  if constexpr (Stored == DType::int8) {
    for (std::int64_t r = 0; r < kChannelGroup; ++r) block_params_to_float<Stored>(rows[r], width, 0, per_row, scale + r * per_row);
  } else {
    for (std::int64_t r = 0; r < kChannelGroup; ++r)
      block_params_to_float<Stored>(rows[r], width, 0, 2 * per_row, pairs + 2 * r * per_row);
    for (std::int64_t c = 0; c < width; ++c) scale[c] = pairs[2 * c], offset[c] = pairs[2 * c + 1];
  }
}

// Elements c .. c + kLanes of a key row of such a group (c a multiple of kLanes): code · scale[c]
// (int8) or code · scale[c] + offset[c] in one fused multiply-add (int4), the stored value rounded
// once to float32 as dequantize_channel_group_row gives it.
template <DType Stored>
Vec load_channel_quantized(const std::byte* row, std::int64_t c, const float* scale, const float* offset) {
  if constexpr (Stored == DType::int8) {
    return Isa::mul(Isa::load_i8(row + c), Isa::load(scale + c));
  } else {
    static_assert(Stored == DType::int4);
    return Isa::fma(load_int4_codes(row, c), Isa::load(scale + c), Isa::load(offset + c));
  }
}
