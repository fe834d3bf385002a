// attnkit heatmap --demo — a built-in sentence and six heads whose Q and K are built by hand from
// token and position features, so that each shows one pattern that trained models are known to
// have. The weights come from attnkit::forward (causal, scale 1), not from a formula written here.
#pragma once

#include <string>
#include <vector>

#include "heatmap/weights.hpp"

namespace attnkit::cli {

struct DemoHead {
  std::string name;         // e.g. "previous token"
  std::string description;  // what it attends to and how the features make it do so
};

struct Demo {
  std::vector<std::string> tokens;  // the sentence, one token per query and key
  std::vector<DemoHead> heads;      // in head order
  HeadWeights weights;              // [n, n] per head, from attnkit::forward
};

// The demo's heads, in order: previous token, same word, first token, broad, recent, nouns.
enum DemoHeadIndex { kDemoPrevious, kDemoSameWord, kDemoFirst, kDemoBroad, kDemoRecent, kDemoNouns, kDemoHeads };

Demo make_demo();

}  // namespace attnkit::cli
