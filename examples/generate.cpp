// attnkit generation: one attention layer decoding two sequences of different lengths through a paged
// KV cache, each step's output fed back as the next input (a stand-in for the rest of a model). At
// the end, the cached path must agree with the full causal forward over each whole sequence. Built
// and run by the tests, so it stays true.
#include <attnkit/attnkit.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

int main() {
  using attnkit::DType, attnkit::Tensor;
  constexpr std::int64_t E = 64, kSteps = 8;
  const attnkit::MultiHeadAttention layer({.embed_dim = E, .num_heads = 8, .num_kv_heads = 2, .rope = attnkit::RopeConfig{}});
  attnkit::KVCache cache({.num_kv_heads = 2, .head_dim = 8, .max_sequences = 4, .max_sequence_length = 64,
                          .layout = attnkit::KVCacheLayout::paged, .block_size = 4, .num_blocks = 16});

  // Two prompts, 5 and 11 tokens: each prefilled on its own.
  const std::int64_t prompt_lengths[] = {5, 11};
  std::vector<attnkit::KVCache::SequenceId> ids;
  std::vector<std::vector<float>> inputs(2), outputs(2);  // every token each sequence saw and produced
  for (std::size_t s = 0; s < 2; ++s) {
    Tensor prompt(DType::f32, {1, prompt_lengths[s], E});
    for (std::int64_t i = 0; i < prompt.numel(); ++i) prompt.data<float>()[i] = std::sin(0.3f * static_cast<float>(i + 7 * s));
    ids.push_back(cache.add_sequence());
    const Tensor y = layer.forward_cached(prompt.view(), cache, std::span(&ids[s], 1));
    inputs[s].assign(prompt.data<float>(), prompt.data<float>() + prompt.numel());
    outputs[s].assign(y.data<float>(), y.data<float>() + y.numel());
  }

  // Decode both together, one token each per step; the next input is the last output.
  for (std::int64_t step = 0; step < kSteps; ++step) {
    Tensor x(DType::f32, {2, 1, E});
    for (std::size_t s = 0; s < 2; ++s) std::copy(outputs[s].end() - E, outputs[s].end(), x.data<float>() + s * E);
    const Tensor y = layer.forward_cached(x.view(), cache, ids);
    for (std::size_t s = 0; s < 2; ++s) {
      inputs[s].insert(inputs[s].end(), x.data<float>() + s * E, x.data<float>() + (s + 1) * E);
      outputs[s].insert(outputs[s].end(), y.data<float>() + s * E, y.data<float>() + (s + 1) * E);
    }
  }
  std::printf("lengths %lld and %lld, %lld of 16 blocks free\n", static_cast<long long>(cache.length(ids[0])),
              static_cast<long long>(cache.length(ids[1])), static_cast<long long>(cache.free_blocks()));

  // The same tokens through the full causal forward give the same outputs.
  float worst = 0;
  for (std::size_t s = 0; s < 2; ++s) {
    const std::int64_t n = static_cast<std::int64_t>(inputs[s].size()) / E;
    const auto x = attnkit::ConstTensorView::contiguous(inputs[s].data(), DType::f32, {1, n, E});
    const Tensor full = layer.forward(x, x, x, {.causal = attnkit::Causal::top_left}).out;
    for (std::int64_t i = 0; i < full.numel(); ++i) worst = std::max(worst, std::fabs(full.data<float>()[i] - outputs[s][i]));
  }
  cache.free_sequence(ids[0]);
  std::printf("after freeing the first: %lld blocks free; cached vs full forward: max difference %.2g: %s\n",
              static_cast<long long>(cache.free_blocks()), worst, worst < 1e-4f ? "ok" : "MISMATCH");
  return worst < 1e-4f ? 0 : 1;
}
