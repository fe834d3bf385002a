// Runs one packed variable-length case: attnkit::varlen_forward on the packed sequences, and on the
// same thread count attnkit::forward on the equal-length batch of the same work and on the sequences
// padded to the longest, the padding masked by key_lengths and by a boolean key-padding mask
// (bench/varlen_cases.hpp).
#pragma once

#include <optional>
#include <string>

#include "attnkit/options.hpp"
#include "bench/timing.hpp"
#include "bench/varlen_cases.hpp"

namespace attnkit::bench {

struct VarlenResult {
  VarlenCase varlen_case;
  std::string kernel;                 // the kernel attnkit ran
  std::optional<std::string> target;  // its SIMD target; none for the reference
  Timing packed;                      // varlen_forward
  Timing equal;                       // forward on B sequences of equal_length()
  Timing padded;                      // forward on B sequences of longest(), key_lengths = the lengths
  Timing masked;                      // the same, a bool mask [B, 1, 1, longest()] instead of key_lengths
};

VarlenResult run_varlen_case(const VarlenCase& c, const TimingPlan& plan, Kernel kernel);

}  // namespace attnkit::bench
