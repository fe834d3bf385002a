// The 16-bit formats whose pairs the pair paths multiply: bf16 (vdpbf16ps, tdpbf16ps) and, on
// targets with f16 tile products (Isa::kTilesF16), IEEE half (tdpfp16ps). A format says how floats
// holding its values become its bits, how P is rounded to it before P·V, how two rows are interleaved
// into pairs along keys, and which tile product multiplies its pairs; the packing, the softmax and
// the tile products are written once over it. Included by forward_packing.inl inside the target's
// namespace; no include guard on purpose.

template <class I = Isa>
struct Bf16Pairs {
  // out[c] = the bits of x[c], floats that hold values of the format (inputs widened exactly).
  static void bits_of_row(const float* x, std::int64_t count, std::uint16_t* out) { bf16_bits_of_row(x, count, out); }
  // Each float rounded to the format, as a float.
  static Vec round(Vec v) { return I::round_to_bf16(v); }
  // out[j] = (x[2j], x[2j + 1]) rounded to the format for j < 16, x[0 .. 16) = low, x[16 .. 32) = high.
  static void round_into_pairs(Vec low, Vec high, std::uint32_t* out) { I::round_into_pairs(low, high, out); }
  static void round_into_pairs(const float* x, std::uint32_t* out) { I::round_into_pairs(x, out); }
  // out[i] = even[i] | odd[i] << 16 for 16 lanes; whether any of the 32 values is ±inf or NaN.
  static bool interleave(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out) {
    return I::interleave_bf16(even, odd, out);
  }
  // Tile C += tile A · tile B over pairs of the format.
  template <int C, int A, int B>
  static void tile_dot() {
    I::Tiles::template dot_bf16<C, A, B>();
  }
};

template <class I = Isa>
struct F16Pairs {
  static void bits_of_row(const float* x, std::int64_t count, std::uint16_t* out) {
    for (std::int64_t c = 0; c < count; ++c) out[c] = to_float16(x[c]).bits;  // exact: x holds half values
  }
  static Vec round(Vec v) { return I::round_to_f16(v); }
  static void round_into_pairs(Vec low, Vec high, std::uint32_t* out) { I::round_into_f16_pairs(low, high, out); }
  static void round_into_pairs(const float* x, std::uint32_t* out) {
    I::round_into_f16_pairs(I::load(x), I::load(x + kLanes), out);
  }
  static bool interleave(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out) {
    return I::interleave_f16(even, odd, out);
  }
  template <int C, int A, int B>
  static void tile_dot() {
    I::Tiles::template dot_f16<C, A, B>();
  }
};
