// What the target table exposes besides the kernels: the rounding of bf16 output rows, and the
// vector exps for the tests of their error. Included by flash_forward.inl inside the target's
// namespace; no include guard on purpose.

// out[i] = in[i] rounded to bf16 as bf16_bits_nearest_even rounds it: the output rows of bf16 calls
// (finalize_row), a vector at a time.
void round_to_bf16(const float* in, std::uint16_t* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) Isa::store_bf16(out + i, Isa::load(in + i));
  for (; i < count; ++i) out[i] = detail::bf16_bits_nearest_even(std::bit_cast<std::uint32_t>(in[i]));
}

// out[i] = Exp(in[i]) with one of the vector exps of simd/math.hpp, for the tests of their error.
template <Vec (*Exp)(Vec)>
void exp_array(const float* in, float* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) Isa::store(out + i, Exp(Isa::load(in + i)));
  for (; i < count; ++i) {  // the tail through a padded vector
    float lane_in[kLanes] = {}, lane_out[kLanes];
    lane_in[0] = in[i];
    Isa::store(lane_out, Exp(Isa::load(lane_in)));
    out[i] = lane_out[0];
  }
}
