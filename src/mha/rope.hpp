// Rotary position embedding (RoPE) on the projected queries or keys of every head.
#pragma once

#include <cstdint>
#include <span>

#include "attnkit/mha.hpp"

namespace attnkit::mha {

// x holds batch × seq tokens of heads × head_dim features ([B, S, H·d], row-major). Token s of
// sequence b sits at position first_positions[b] + s (one entry per sequence, or one shared by all);
// each pair (a, b) of a head's features (paired as `rope.layout` says, pair c at frequency
// base^(−2c/d)) is rotated by the angle position · frequency. `inverse` rotates back by the same
// angle: the gradient of the rotation.
void apply_rope(float* x, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                std::span<const std::int64_t> first_positions, const RopeConfig& rope, bool inverse);
inline void apply_rope(float* x, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                       std::int64_t first_position, const RopeConfig& rope, bool inverse) {
  apply_rope(x, batch, seq, heads, head_dim, std::span<const std::int64_t>(&first_position, 1), rope, inverse);
}

}  // namespace attnkit::mha
