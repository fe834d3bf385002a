// The built-in heatmap demo: hand-built queries and keys over one sentence.
//
// Every token j has a feature vector: a one-hot of its position, a one-hot of its word, a constant
// "bias" slot, two slots (position, 1) for distance, and a noun flag. Each head's q_i and k_j are
// sums of these features, picked so that q_i · k_j is large exactly for the keys the head should
// look at; the logits are used unscaled (scale = 1) with top-left causal masking, as in a decoder.
#include "heatmap/demo.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>

#include "attnkit/attention.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cli {

namespace {

constexpr double kSharp = 6.0;  // logit of a preferred key: e^6 ≈ 400 times an ordinary one
constexpr double kDecay = 0.8;  // the recent head's logit falls by this per token of distance

const std::vector<std::string> kSentence = {"the", "cat", "sat", "on", "the", "mat", "then",
                                            "the", "dog", "sat", "on",  "the", "cat", "."};
const std::vector<std::string> kNouns = {"cat", "mat", "dog"};

// Where each feature lives in a d-dimensional q or k row.
struct Features {
  std::int64_t n = 0, vocabulary = 0;
  std::int64_t position(std::int64_t i) const { return i; }
  std::int64_t word(std::int64_t w) const { return n + w; }
  std::int64_t bias() const { return n + vocabulary; }
  std::int64_t distance_position() const { return bias() + 1; }
  std::int64_t distance_one() const { return bias() + 2; }
  std::int64_t noun() const { return bias() + 3; }
  std::int64_t dims() const { return bias() + 4; }
};

}  // namespace

Demo make_demo() {
  Demo demo;
  demo.tokens = kSentence;
  demo.heads = {
      {"previous token", "attends to the token just before it (q_i = position i-1, k_j = position j)"},
      {"same word", "attends to earlier copies of its own word (the, cat, sat, on), else to itself "
                    "(q = word - 1/2 own position, k = word + position)"},
      {"first token", "puts nearly all weight on the first token, an attention sink (only k_0 has the bias "
                      "feature)"},
      {"broad", "spreads its weight evenly over every visible key (q = 0: equal logits), a mean over the prefix"},
      {"recent", "weight decays with distance, most on the token itself (logit = -0.8 (i - j) from the position "
                 "slots)"},
      {"nouns", "attends to the nouns seen so far: cat, mat, dog (k has a noun flag; q asks for it)"},
  };

  const auto n = static_cast<std::int64_t>(kSentence.size());
  std::map<std::string, std::int64_t> vocabulary;
  for (const std::string& t : kSentence) vocabulary.emplace(t, static_cast<std::int64_t>(vocabulary.size()));
  const Features f{n, static_cast<std::int64_t>(vocabulary.size())};
  const std::int64_t d = f.dims(), heads = kDemoHeads;

  Tensor q(DType::f64, {1, heads, n, d}), k(DType::f64, {1, heads, n, d}), v(DType::f64, {1, heads, n, 1});
  const TensorView qv = q.view(), kv = k.view();
  auto set_q = [&](std::int64_t h, std::int64_t i, std::int64_t slot, double x) { *qv.at<double>({0, h, i, slot}) += x; };
  auto set_k = [&](std::int64_t h, std::int64_t j, std::int64_t slot, double x) { *kv.at<double>({0, h, j, slot}) += x; };
  for (std::int64_t i = 0; i < n; ++i) {
    const std::string& token = kSentence[static_cast<std::size_t>(i)];
    const std::int64_t word = vocabulary.at(token);
    const bool noun = std::find(kNouns.begin(), kNouns.end(), token) != kNouns.end();

    set_q(kDemoPrevious, i, f.position(std::max<std::int64_t>(i - 1, 0)), kSharp);
    set_k(kDemoPrevious, i, f.position(i), 1.0);

    set_q(kDemoSameWord, i, f.word(word), kSharp);
    set_q(kDemoSameWord, i, f.position(i), -kSharp / 2);  // itself only when no earlier copy exists
    set_k(kDemoSameWord, i, f.word(word), 1.0);
    set_k(kDemoSameWord, i, f.position(i), 1.0);

    set_q(kDemoFirst, i, f.bias(), kSharp);
    if (i == 0) set_k(kDemoFirst, i, f.bias(), 1.0);

    // kDemoBroad: q = 0, so every visible key has logit 0.

    // q_i · k_j = kDecay·j − kDecay·i = −kDecay·(i − j), the distance back from the query.
    set_q(kDemoRecent, i, f.distance_position(), kDecay);
    set_q(kDemoRecent, i, f.distance_one(), -kDecay * static_cast<double>(i));
    set_k(kDemoRecent, i, f.distance_position(), static_cast<double>(i));
    set_k(kDemoRecent, i, f.distance_one(), 1.0);

    set_q(kDemoNouns, i, f.noun(), kSharp);
    if (noun) set_k(kDemoNouns, i, f.noun(), 1.0);
  }

  AttentionOptions options;
  options.causal = Causal::top_left;
  options.scale = 1.0;
  Tensor out(DType::f64, {1, heads, n, 1}), probs(DType::f64, {1, heads, n, n});
  ForwardExtras extras;
  extras.probs = probs.view();
  forward(q.view(), k.view(), v.view(), out.view(), options, extras);
  demo.weights = select_heads(probs.view(), {}, "the demo");
  return demo;
}

}  // namespace attnkit::cli
