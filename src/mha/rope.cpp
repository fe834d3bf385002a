#include "mha/rope.hpp"

#include <cmath>
#include <vector>

#include "core/parallel_for.hpp"

namespace attnkit::mha {

void apply_rope(float* x, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                std::span<const std::int64_t> first_positions, const RopeConfig& rope, bool inverse) {
  const std::int64_t pairs = head_dim / 2;
  std::vector<double> frequency(static_cast<std::size_t>(pairs));
  for (std::int64_t c = 0; c < pairs; ++c)
    frequency[static_cast<std::size_t>(c)] = std::pow(rope.base, -2.0 * static_cast<double>(c) / static_cast<double>(head_dim));
  const bool half_split = rope.layout == RopeLayout::half_split;
  auto first_position = [&](std::int64_t b) { return first_positions[first_positions.size() == 1 ? 0 : static_cast<std::size_t>(b)]; };
  detail::parallel_for(seq, [&](std::int64_t s) {
    std::vector<float> cosine(static_cast<std::size_t>(pairs)), sine(static_cast<std::size_t>(pairs));
    std::int64_t angles_for = -1;  // the position cosine and sine hold; sequences often share it
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t position = first_position(b) + s;
      if (position != angles_for || b == 0) {
        for (std::int64_t c = 0; c < pairs; ++c) {  // angles in double: position · frequency loses bits fast
          const double angle = static_cast<double>(position) * frequency[static_cast<std::size_t>(c)];
          cosine[static_cast<std::size_t>(c)] = static_cast<float>(std::cos(angle));
          sine[static_cast<std::size_t>(c)] = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
        }
        angles_for = position;
      }
      for (std::int64_t h = 0; h < heads; ++h) {
        float* head = x + ((b * seq + s) * heads + h) * head_dim;
        for (std::int64_t c = 0; c < pairs; ++c) {
          float& first = half_split ? head[c] : head[2 * c];
          float& second = half_split ? head[c + pairs] : head[2 * c + 1];
          const float a = first, o = second, cs = cosine[static_cast<std::size_t>(c)], sn = sine[static_cast<std::size_t>(c)];
          first = a * cs - o * sn;
          second = a * sn + o * cs;
        }
      }
    }
  });
}

}  // namespace attnkit::mha
