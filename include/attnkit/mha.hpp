/// \file
/// Multi-head attention, the module: project the inputs to queries, keys and values per
/// head, attend (attnkit::forward), concatenate the heads, project out.
///
/// \code{.unparsed}
///   Q = X_q·W_qᵀ + b_q     K = X_k·W_kᵀ + b_k     V = X_v·W_vᵀ + b_v        split into heads
///   Q, K ← RoPE(Q), RoPE(K)                                                (when configured)
///   A = attention(Q, K, V)  per head, concatenated                          [.., num_heads · head_dim]
///   Y = A·W_oᵀ + b_o
/// \endcode
///
/// Weights are laid out as torch.nn.MultiheadAttention's state dict, under its names, so weights
/// trained in PyTorch load unchanged:
/// \code{.unparsed}
///   in_proj_weight [3E, E]  (only when kdim = vdim = E, num_kv_heads = num_heads, head_dim·num_heads = E)
///   q_proj_weight [H·d, E], k_proj_weight [Hkv·d, kdim], v_proj_weight [Hkv·d, vdim]   (always accepted)
///   in_proj_bias [(H + 2·Hkv)·d], out_proj.weight [E, H·d], out_proj.bias [E]
/// \endcode
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attnkit/kv_cache.hpp"
#include "attnkit/options.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

/// How RoPE pairs the features of a head: rotation by angle pos · base^(−2c/d) of each pair.
enum class RopeLayout : std::uint8_t {
  half_split,   ///< pairs (x[c], x[c + d/2]): GPT-NeoX, Hugging Face Llama
  interleaved,  ///< pairs (x[2c], x[2c + 1]): the RoFormer paper, GPT-J, Meta's Llama checkpoints
};

/// Rotary position embedding (RoPE) applied to the queries and keys of every head.
struct RopeConfig {
  double base = 10000.0;                       ///< the angle base: pair c turns by pos · base^(−2c/d)
  RopeLayout layout = RopeLayout::half_split;  ///< which features form a pair
};

/// The shape and parameters of a MultiHeadAttention module, fixed when it is made.
struct MultiHeadAttentionConfig {
  std::int64_t embed_dim = 0;     ///< E: width of the query input and of the output
  std::int64_t num_heads = 0;     ///< query heads
  std::int64_t num_kv_heads = 0;  ///< 0: num_heads; fewer: grouped-query (1: multi-query)
  std::int64_t head_dim = 0;      ///< 0: embed_dim / num_heads
  std::int64_t kdim = 0;          ///< width of the key input; 0: embed_dim
  std::int64_t vdim = 0;          ///< width of the value input; 0: embed_dim
  bool bias = true;               ///< in_proj_bias and out_proj.bias
  bool batch_first = true;        ///< inputs [B, S, E]; false: [S, B, E] (torch's default)
  std::optional<RopeConfig> rope{};  ///< rotary embedding of queries and keys; empty: none
  DType weight_dtype = DType::f32;  ///< f32, or bf16 (computed in f32)
};

/// Options of one call, with torch's meanings for the masks.
struct MultiHeadAttentionOptions {
  /// [B, m]: bool, true = a padding key that no query sees (torch); or float, added to the logits.
  std::optional<ConstTensorView> key_padding_mask{};
  /// [n, m] or [B · num_heads, n, m]: bool, true = NOT allowed to attend (torch); or float, added.
  std::optional<ConstTensorView> attn_mask{};
  Causal causal = Causal::none;        ///< causal masking, as in AttentionOptions
  Window window{};                     ///< sliding window, as in AttentionOptions
  double dropout_p = 0.0;              ///< in [0, 1); kept weights are scaled by 1/(1 − p)
  std::uint64_t seed = 0;              ///< dropout stream; same seed, same kept elements
  bool need_weights = false;           ///< also return the attention weights (before dropout)
  bool average_attn_weights = true;    ///< weights [B, n, m] averaged over heads, else [B, H, n, m]
  std::int64_t query_position = 0;     ///< RoPE position of the first query
  std::int64_t key_position = 0;       ///< RoPE position of the first key
  Kernel kernel = Kernel::automatic;   ///< which attention kernel runs
};

/// What a forward call keeps for its backward: inputs, projections and the attention's LSE.
struct MultiHeadAttentionContext {
  ///@{
  /// The inputs (query, key, value) as float32 [B, S, width].
  Tensor query, key, value;
  ///@}
  ///@{
  /// The projected (and rotated) heads, float32 [B, H, S, d].
  Tensor q, k, v;
  ///@}
  Tensor attention;                   ///< attention output [B, H, n, d]
  Tensor lse;                         ///< [B, H, n]
  MultiHeadAttentionOptions options;  ///< masks are views: keep their storage alive until backward
  bool unbatched = false;             ///< the inputs were [S, width]
};

/// The result of MultiHeadAttention::forward.
struct MultiHeadAttentionOutput {
  Tensor out;                      ///< like query: [B, n, E] (or [n, B, E])
  std::optional<Tensor> weights;   ///< when need_weights: [B, n, m] or [B, H, n, m], float32
};

/// Options of a decoding step (forward_cached). Attention over the cache is always causal.
struct CachedForwardOptions {
  Window window{};  ///< sliding window around each new token's position
  Kernel kernel = Kernel::automatic;  ///< which attention kernel runs
};

/// The result of MultiHeadAttention::backward.
struct MultiHeadAttentionGradients {
  ///@{
  /// Gradients of the query, key and value inputs, shaped like the inputs, float32.
  Tensor d_query, d_key, d_value;
  ///@}
  std::map<std::string, Tensor> d_weights;  ///< keyed by parameter name, float32, in the stored layout
};

/// Multi-head attention with torch.nn.MultiheadAttention's parameters and semantics, plus
/// grouped-query heads, RoPE and KV-cache decoding (see attnkit/mha.hpp).
class MultiHeadAttention {
 public:
  /// Validates the configuration; weights start as torch initialises them (Xavier-uniform
  /// projections, zero biases) from `seed`.
  explicit MultiHeadAttention(const MultiHeadAttentionConfig& config, std::uint64_t seed = 0);

  /// The configuration the module was made with.
  const MultiHeadAttentionConfig& config() const { return config_; }

  /// Names of the parameters (see attnkit/mha.hpp), as in a torch-layout state dict.
  std::vector<std::string> parameter_names() const;
  /// The parameter called `name`; an unknown name raises Error(invalid_argument).
  const Tensor& parameter(const std::string& name) const;
  /// The parameter called `name`, writable in place; an unknown name raises Error(invalid_argument).
  Tensor& parameter(const std::string& name);
  /// Accepts either in_proj_weight or the three q/k/v_proj_weight; every parameter must be present
  /// with its exact shape; values are converted to weight_dtype. Unknown names are errors.
  void load_state_dict(const std::map<std::string, Tensor>& state);
  /// The parameters by name: in_proj_weight when the configuration allows it (as torch writes it),
  /// else q/k/v_proj_weight.
  std::map<std::string, Tensor> state_dict() const;
  /// Loads the parameters from a .safetensors file, or a directory of NAME.npy files (one per
  /// parameter), as load_state_dict does.
  void load(const std::string& path);
  /// Writes every parameter, under its name in parameter_names(), to a .safetensors file that
  /// load() reads back.
  void save(const std::string& safetensors_path) const;

  /// Self-attention: query = key = value. Cross-attention: key and value from another sequence.
  /// Inputs: [B, S, width] (batch_first) or [S, B, width], or unbatched [S, width]; any floating
  /// dtype. When `context` is given it is filled for backward.
  MultiHeadAttentionOutput forward(ConstTensorView query, ConstTensorView key, ConstTensorView value,
                                   const MultiHeadAttentionOptions& options = {},
                                   MultiHeadAttentionContext* context = nullptr) const;

  /// Incremental decoding, self-attention through a KV cache: x holds the next t tokens of B
  /// sequences, [B, t, E] (or [t, B, E]; unbatched [t, E] for one sequence), entry b continuing
  /// sequences[b] of `cache`. Their keys and values are projected, rotated (RoPE) at positions
  /// length .. length + t − 1 of each sequence, and appended; then each new token attends over its
  /// sequence's cached tokens up to itself, and the result is projected out: [B, t, E] like x.
  /// Sequences of different lengths go in one call. The cache's num_kv_heads and head_dim (and
  /// value_dim) must be the module's. On any error (a full cache included) nothing is appended.
  /// t = 1 is a decoding step; a whole prompt in one call is its prefill.
  Tensor forward_cached(ConstTensorView x, KVCache& cache, std::span<const KVCache::SequenceId> sequences,
                        const CachedForwardOptions& options = {}) const;

  /// Gradients of a loss given d_out = ∂L/∂out, from the context of the forward call.
  MultiHeadAttentionGradients backward(const MultiHeadAttentionContext& context, ConstTensorView d_out) const;

 private:
  MultiHeadAttentionConfig config_;
  std::map<std::string, Tensor> parameters_;
};

}  // namespace attnkit
