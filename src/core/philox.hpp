// Counter-based random numbers for dropout: Philox4x32 with 10 rounds (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011). A keep decision is a pure function of
// (seed, batch, head, query, key), so forward, backward and any thread layout agree.
#pragma once

#include <array>
#include <cstdint>

namespace attnkit::detail {

using Philox4x32 = std::array<std::uint32_t, 4>;

inline Philox4x32 philox4x32_10(Philox4x32 counter, std::uint64_t seed) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // round multipliers
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
  std::uint32_t key0 = static_cast<std::uint32_t>(seed), key1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{kMul0} * counter[0];
    const std::uint64_t p1 = std::uint64_t{kMul1} * counter[2];
    counter = {static_cast<std::uint32_t>(p1 >> 32) ^ counter[1] ^ key0, static_cast<std::uint32_t>(p1),
               static_cast<std::uint32_t>(p0 >> 32) ^ counter[3] ^ key1, static_cast<std::uint32_t>(p0)};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Uniform in [0, 1) from the top 24 bits of a word: exactly representable in float.
inline float uniform_from_bits(std::uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }

// The uniforms of the four consecutive keys j .. j + 3 (j a multiple of 4) of query i of head h of
// batch entry b: one Philox call, so a kernel draws a key block with a quarter of the calls. Indices
// must be < 2^32 (validated).
inline std::array<float, 4> dropout_uniforms(std::uint64_t seed, std::int64_t b, std::int64_t h, std::int64_t i,
                                             std::int64_t j) {
  const Philox4x32 counter = {static_cast<std::uint32_t>(j >> 2), static_cast<std::uint32_t>(i),
                              static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(b)};
  const Philox4x32 bits = philox4x32_10(counter, seed);
  return {uniform_from_bits(bits[0]), uniform_from_bits(bits[1]), uniform_from_bits(bits[2]), uniform_from_bits(bits[3])};
}

// The uniform of key j alone.
inline float dropout_uniform(std::uint64_t seed, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  return dropout_uniforms(seed, b, h, i, j / 4 * 4)[static_cast<std::size_t>(j & 3)];
}

// Key j survives dropout for query i when its uniform is at least p.
inline bool dropout_keeps(std::uint64_t seed, double p, std::int64_t b, std::int64_t h, std::int64_t i,
                          std::int64_t j) {
  return dropout_uniform(seed, b, h, i, j) >= p;
}

}  // namespace attnkit::detail
