// vdpbf16ps itself, through the avx512_bf16 target's wrapper, for tests/cpu/test_bf16_dot.cpp
// (AVX-512 and AVX512_BF16 flags; called only on CPUs that have them).
#include "cpu/simd/avx512_bf16.hpp"
#include "cpu/bf16_dot_lanes.hpp"

namespace attnkit::testing {

using Isa = cpu::Avx512Bf16Isa;

void hardware_dot_bf16(const float* acc, const std::uint32_t* a, const std::uint32_t* b, float* out) {
  Isa::store(out, Isa::dot_bf16(Isa::load(acc), Isa::load_pairs(a), Isa::load_pairs(b)));
}

void hardware_round_to_bf16(const float* in, float* out) { Isa::store(out, Isa::round_to_bf16(Isa::load(in))); }

void hardware_round_into_pairs(const float* in, std::uint32_t* out) { Isa::round_into_pairs(in, out); }

void hardware_store_row_pairs(const float* even, const float* odd, std::uint32_t* out) {
  Isa::store_row_pairs(Isa::load(even), Isa::load(odd), out);
}

void hardware_pair_rows_32(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* pairs, const float* columns,
                           float* ordered, float* back) {
  pair_rows_32_of<Isa>(even, odd, pairs, columns, ordered, back);
}

}  // namespace attnkit::testing
