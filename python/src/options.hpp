// attnkit._core — AttentionOptions from the keyword arguments the bindings take, shared by the plain
// calls (sdpa.cpp) and the packed ones (varlen.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "attnkit/options.hpp"

namespace attnkit::python {

// causal is "none", "top_left" or "bottom_right" (Error(invalid_argument) otherwise). The options'
// spans point into the caller's vectors, which must outlive the call.
AttentionOptions options_of(const std::optional<InputArray>& mask, std::optional<double> scale, const std::string& causal,
                            std::int64_t window_left, std::int64_t window_right, const std::vector<float>& alibi_slopes,
                            double softcap, const std::vector<std::int64_t>& key_lengths, double dropout_p,
                            std::uint64_t seed, const std::vector<float>& sinks);

}  // namespace attnkit::python
