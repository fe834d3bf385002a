// The packed variable-length cases: B sequences of mixed lengths in one
// attnkit::varlen_forward call, timed against the ways to run them without varlen: an equal-length
// batch with the same work (the per-FLOP rate a packing should keep), and the same sequences padded
// to the longest (the time a packing should save), masked by key_lengths (which attnkit's kernel
// skips: the padded queries still cost Lmax · L_b each) and by a boolean key-padding mask (which
// it cannot skip: Lmax² per sequence, as padded SDPA calls in torch cost).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/cases.hpp"

namespace attnkit::bench {

struct VarlenCase {
  std::string name;  // e.g. "varlen_f32_b16_mixed_d128", "varlen_f32_b16_mixed_d128_causal"
  std::vector<std::int64_t> lengths;  // each sequence's queries = keys
  std::uint32_t seed = 0;             // the lengths' draw
  std::int64_t heads = 8;             // query heads = KV heads
  std::int64_t d = 128;
  bool causal = false;  // top-left (queries = keys, so bottom-right is the same)
  int threads = 1;

  std::int64_t longest() const;
  // The equal-length batch of the same work: B sequences of this length, Σ L² / B rounded.
  std::int64_t equal_length() const;
  // 4·n·m·d per head and sequence, halved for causal (the forward cases' rule), summed.
  double flops() const;
  double equal_flops() const;
  // What the key_lengths-padded call cannot skip: Lmax queries over L_b keys per sequence
  // (causal: L_b²/2 + (Lmax − L_b)·L_b), at the same 4·d per head and pair.
  double padded_flops() const;
};

// The cases in run order, each on every thread count of `selection`, filtered by name. The full run
// draws 16 lengths from 64 to 4096 ("mixed"); --quick from 64 to 1024 ("short"); --sizes L from L/64
// to L (the largest L given; "uptoL"). d = 128, or each of --dims.
std::vector<VarlenCase> select_varlen_cases(const CaseSelection& selection);

}  // namespace attnkit::bench
