// The mixed sequence lengths of the bench's batch cases (varlen_, decode_batch_): a range of lengths
// chosen by the selection, and a fixed draw from it, so that every run times the same batch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/cases.hpp"

namespace attnkit::bench {

struct LengthRange {
  std::string label;  // the case names' part: "mixed", "short", "upto4096"
  std::int64_t shortest, longest;
};

// `full` by default, `quick` with --quick; with --sizes L, lengths up to L (the largest given) from
// L/64 (at least 1), as the defaults' spread.
inline LengthRange length_range(const CaseSelection& sel, const LengthRange& full, const LengthRange& quick) {
  if (sel.sizes.empty()) return sel.quick ? quick : full;
  const std::int64_t longest = *std::max_element(sel.sizes.begin(), sel.sizes.end());
  return {"upto" + std::to_string(longest), std::max<std::int64_t>(1, longest / 64), longest};
}

// `count` lengths drawn uniformly from the range by a generator seeded with `seed`.
inline std::vector<std::int64_t> draw_lengths(const LengthRange& range, std::int64_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> length(range.shortest, range.longest);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(count));
  for (std::int64_t& l : lengths) l = length(rng);
  return lengths;
}

}  // namespace attnkit::bench
