// The benchmark's inputs: uniform f32 from a fixed seed, so every run times the same numbers.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "attnkit/tensor.hpp"

namespace attnkit::bench {

constexpr std::uint32_t kInputSeed = 20240603;
constexpr float kInputRange = 1.0f;  // inputs uniform in [-1, 1]: logits of order 1

// A contiguous f32 tensor, every element written (so every page is touched before any timing).
inline Tensor random_f32(std::mt19937& rng, std::vector<std::int64_t> shape) {
  Tensor t(DType::f32, std::move(shape));
  std::uniform_real_distribution<float> uniform(-kInputRange, kInputRange);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = uniform(rng);
  return t;
}

}  // namespace attnkit::bench
