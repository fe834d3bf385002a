// attnkit heatmap --html: the attention weights as one self-contained interactive page (no external
// assets, no network): a head selector (and a layer selector for a model's layers), the heads as
// small multiples, the heatmap with the exact weight and the two tokens under the pointer, a "lines"
// view linking each query token to the keys it attends to (line width ∝ weight), and for
// self-attention the text, whose tokens light up by how much the token under the pointer attends to
// them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit_viz/heatmap/head_weights.hpp"

namespace attnkit::cli {

struct HeatmapPage {
  std::string title;
  std::vector<std::string> query_tokens, key_tokens;  // n and m labels; empty: positions 0, 1, ...
  HeadWeights weights;                                // n, m, each panel's head number and [n, m] weights
  std::vector<std::string> head_names;               // optional, per panel ("previous token")

  // The head viewer (python -m attnkit.heads). With `layers` (per panel, its layer) the page picks a
  // layer, then one of its heads; it always shows the heads it offers as small multiples. `stats`
  // holds, per panel, one number per name in `stat_names`, shown under each small multiple and
  // beside the chosen head; `stat_note` says what they mean.
  std::vector<std::int64_t> layers;
  std::vector<std::string> stat_names;
  std::vector<std::vector<double>> stats;
  std::string stat_note;
};

// Refuses pages whose data would make a browser crawl (more than kMaxHtmlWeights weights in all)
// with Error(invalid_argument) naming --heads and the sizes.
inline constexpr std::int64_t kMaxHtmlWeights = 4'000'000;

std::string heatmap_html(const HeatmapPage& page);
void write_heatmap_html(const HeatmapPage& page, const std::string& path);

}  // namespace attnkit::cli
