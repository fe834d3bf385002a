// Whether a query row sees any key at all: the semantics' definition of an empty row (O = 0,
// lse = −inf), read from the positions and the masks as stored, with no arithmetic on values. Kernels
// that compute in float32 ask it to tell an empty row from one whose logits all fell out of range.
#pragma once

#include <cstdint>

#include "core/problem.hpp"

namespace attnkit::detail {

// True when some key of query i (batch entry b, query head h) survives causal alignment, the window,
// key_lengths, a keep-mask's false and an additive mask's −inf (docs/semantics.md).
bool row_has_visible_key(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i);

}  // namespace attnkit::detail
