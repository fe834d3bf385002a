// Sixteen lanes of a bf16-dot target's vector operations, each compiled in its own translation unit
// with its target's flags so the test can compare them with the portable model (bf16_dot_model.hpp):
// the emulated target's (bf16_dot_emulated.cpp, AVX2: call only on CPUs with AVX2) and the real
// instruction's (bf16_dot_hardware.cpp, AVX512_BF16: call only on CPUs with it).
#pragma once

#include <cstdint>
#include <cstring>

namespace attnkit::testing {

inline constexpr int kDotLanes = 16;

// out[i] = acc[i] + a[i].hi · b[i].hi + a[i].lo · b[i].lo (vdpbf16ps), and round[i] = in[i] rounded to bf16.
void emulated_dot_bf16(const float* acc, const std::uint32_t* a, const std::uint32_t* b, float* out);
void emulated_round_to_bf16(const float* in, float* out);
void hardware_dot_bf16(const float* acc, const std::uint32_t* a, const std::uint32_t* b, float* out);
void hardware_round_to_bf16(const float* in, float* out);
// out[j] = the pair (in[2j], in[2j + 1]) rounded to bf16, for 2 · kDotLanes floats (round_into_pairs).
void emulated_round_into_pairs(const float* in, std::uint32_t* out);
void hardware_round_into_pairs(const float* in, std::uint32_t* out);
// out[i] = the pair (even[i], odd[i]) of floats holding bf16 values, for kDotLanes lanes (store_row_pairs).
void emulated_store_row_pairs(const float* even, const float* odd, std::uint32_t* out);
void hardware_store_row_pairs(const float* even, const float* odd, std::uint32_t* out);
// pair_rows_32 on 2 · kDotLanes columns of two bf16 rows into `pairs` (two vectors), and the float
// columns `columns` moved into the target's pair order (`ordered`) and back (`back`).
void emulated_pair_rows_32(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* pairs, const float* columns,
                           float* ordered, float* back);
void hardware_pair_rows_32(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* pairs, const float* columns,
                           float* ordered, float* back);

// Their body, for a target's vector wrapper: instantiated only in that target's unit.
template <class Isa>
void pair_rows_32_of(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* pairs, const float* columns,
                     float* ordered, float* back) {
  typename Isa::Pairs out[2];
  Isa::pair_rows_32(even, odd, out);
  std::memcpy(pairs, &out, sizeof out);
  typename Isa::Vec a = Isa::load(columns), b = Isa::load(columns + 16);
  Isa::to_pair_order(a, b);
  Isa::store(ordered, a);
  Isa::store(ordered + 16, b);
  Isa::from_pair_order(a, b);
  Isa::store(back, a);
  Isa::store(back + 16, b);
}

}  // namespace attnkit::testing
