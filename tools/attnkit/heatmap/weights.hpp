// attnkit heatmap — the attention weights to draw: one [n, m] matrix per chosen head of one batch
// entry, from a probabilities .npy (as `attnkit run --probs` writes it) or computed from Q and K.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention_flags.hpp"
#include "attnkit_viz/heatmap/head_weights.hpp"

namespace attnkit::cli {

// Which batch entry and heads to keep; empty `heads` keeps them all.
struct Selection {
  std::int64_t batch = 0;
  std::vector<std::int64_t> heads;
};

// A probabilities file of shape [B, H, n, m], [H, n, m] or [n, m] (any floating dtype). Raises
// Error naming --probs and the file on a bad rank or dtype, and naming --batch or --heads when the
// selection is out of range.
HeadWeights load_probs(const std::string& path, const Selection& selection);

// Runs attnkit::forward on Q, K (and V, or zeros when `v_path` is absent: the weights do not depend
// on V) under the options of `flags` and keeps the selected probabilities.
HeadWeights compute_probs(const std::string& q_path, const std::string& k_path,
                          const std::optional<std::string>& v_path, const AttentionFlags& flags,
                          const Selection& selection);

// Keeps the selected batch entry and heads of a rank-4 [B, H, n, m] view; `source` names the input
// in errors ("--probs p.npy").
HeadWeights select_heads(ConstTensorView probs, const Selection& selection, const std::string& source);

}  // namespace attnkit::cli
