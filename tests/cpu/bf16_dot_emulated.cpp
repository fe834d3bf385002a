// The emulated bf16-dot target's vector operations, for tests/cpu/test_bf16_dot.cpp (AVX2 flags).
#include "cpu/simd/emulated16.hpp"
#include "cpu/bf16_dot_lanes.hpp"

namespace attnkit::testing {

using Isa = cpu::Emulated16Bf16Isa;

void emulated_dot_bf16(const float* acc, const std::uint32_t* a, const std::uint32_t* b, float* out) {
  Isa::store(out, Isa::dot_bf16(Isa::load(acc), Isa::load_pairs(a), Isa::load_pairs(b)));
}

void emulated_round_to_bf16(const float* in, float* out) { Isa::store(out, Isa::round_to_bf16(Isa::load(in))); }

void emulated_round_into_pairs(const float* in, std::uint32_t* out) { Isa::round_into_pairs(in, out); }

void emulated_store_row_pairs(const float* even, const float* odd, std::uint32_t* out) {
  Isa::store_row_pairs(Isa::load(even), Isa::load(odd), out);
}

void emulated_pair_rows_32(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* pairs, const float* columns,
                           float* ordered, float* back) {
  pair_rows_32_of<Isa>(even, odd, pairs, columns, ordered, back);
}

}  // namespace attnkit::testing
