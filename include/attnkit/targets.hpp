// attnkit — SIMD targets of the fast kernels.
//
// The fast kernels are compiled once per instruction set and the best one the CPU supports is chosen
// at run time. The caller can see the active target and force another one (tests run the kernels on
// every target the CPU supports). ATTNKIT_TARGET=<name> in the environment forces one at start-up.
#pragma once

#include <cstdint>
#include <vector>

namespace attnkit {

enum class Target : std::uint8_t {
  scalar,  // portable C++, any CPU
  avx2,    // x86-64 with AVX2, FMA and F16C
};

const char* target_name(Target target) noexcept;  // "scalar", "avx2"

// Targets built into this library, and those this CPU can run, best first.
std::vector<Target> compiled_targets();
std::vector<Target> supported_targets();

// The target the fast kernels use now: the one forced by set_target or ATTNKIT_TARGET, else the best
// supported one. Raises Error(unsupported) if ATTNKIT_TARGET names a target this CPU cannot run, and
// Error(invalid_argument) if it names no target at all.
Target active_target();
// Forces a target (Error(unsupported) if the CPU cannot run it); reset_target() returns to the default.
void set_target(Target target);
void reset_target();

}  // namespace attnkit
