// bf16 values held in floats, as the bits and pairs that bf16 dot products read: scalar helpers of
// the bf16-dot path, shared by the kernels (included inside each target's namespace by
// flash_forward.inl) and the backward's per-call preparation (backward.cpp, in an unnamed
// namespace), so that no inline function is shared between units built for different CPUs. No
// include guard on purpose.

// x holds a bf16 value: its upper 16 bits, exactly.
inline std::uint16_t bf16_bits_of(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

// Two floats holding bf16 values as one pair for a bf16 dot product: `lo` in the low half.
inline std::uint32_t bf16_pair(float lo, float hi) {
  return std::uint32_t{bf16_bits_of(lo)} | std::uint32_t{bf16_bits_of(hi)} << 16;
}

// out[c] = the bf16 bits of x[c], for `count` floats that hold bf16 values (inputs widened exactly,
// or values rounded to bf16).
inline void bf16_bits_of_row(const float* x, std::int64_t count, std::uint16_t* out) {
  for (std::int64_t c = 0; c < count; ++c) out[c] = bf16_bits_of(x[c]);
}

// out[c] = the pair (even[c], odd[c]) of such floats, `even` in the low half: two rows interleaved,
// so that a product sums over the pair.
inline void pairs_of_rows(const float* even, const float* odd, std::int64_t count, std::uint32_t* out) {
  for (std::int64_t c = 0; c < count; ++c) out[c] = bf16_pair(even[c], odd[c]);
}
