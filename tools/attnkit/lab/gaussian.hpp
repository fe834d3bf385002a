// Seeded N(0, 1) samples for the lab, the same on every standard library: std::mt19937_64 is fully
// specified, but std::normal_distribution is not (libstdc++ and libc++ give different numbers), so
// the transform is written here (Box–Muller).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace attnkit::lab {

class Gaussian {
 public:
  // One stream per (seed, salt): an experiment salts with what it iterates over (e.g. d_k), so a
  // figure does not change when other figures are added to or removed from the run.
  Gaussian(std::uint64_t seed, std::uint64_t salt) {
    std::seed_seq sequence{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                           static_cast<std::uint32_t>(salt), static_cast<std::uint32_t>(salt >> 32)};
    engine_.seed(sequence);
  }

  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1], so log(u1) is finite; u2 in [0, 1).
    const double u1 = 1.0 - unit();
    const double u2 = unit();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  // 53 random bits as a double in [0, 1).
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace attnkit::lab
