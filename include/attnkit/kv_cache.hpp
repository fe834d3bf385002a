/// \file
/// A key/value cache for incremental decoding, and attention over it.
///
/// A decoder that generates token by token keeps the keys and values of every earlier token, so that
/// each new token costs one row of projections and one pass over the cache. The cache holds them for
/// many sequences at once, each with its own length:
/// \code{.unparsed}
///   contiguous  each sequence owns a slot of max_sequence_length rows, reserved at creation;
///   paged       sequences take fixed-size blocks from one shared pool as they grow, listed in a
///               per-sequence block table (as in vLLM's PagedAttention), so short and long sequences
///               share the memory; a freed sequence's blocks return to the pool.
/// \endcode
/// All memory is allocated when the cache is made. Appending past a sequence's limit or past the
/// pool raises Error(capacity_exceeded) and leaves the cache as it was: nothing is reallocated in the
/// decode loop and nothing is half-written.
///
/// attend() runs the new queries of several sequences over their cached keys in one call, each
/// sequence aligned bottom-right with its own length (the last query sees every cached key), reading
/// the blocks in place through the fast kernel's decode path.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "attnkit/options.hpp"
#include "attnkit/quantized.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

/// How a KVCache lays out each sequence's rows.
enum class KVCacheLayout : std::uint8_t { contiguous, paged };
/// \var KVCacheLayout::contiguous
/// Each sequence owns a slot of max_sequence_length rows, reserved at creation.
/// \var KVCacheLayout::paged
/// Sequences take blocks of block_size tokens from one shared pool as they grow.

/// How an int8 or int4 cache quantises its keys.
enum class KeyQuantization : std::uint8_t { per_token, per_channel };
/// \var KeyQuantization::per_token
/// Each key row on its own, a scale (and int4 offset) per block of 32 features, as values are.
/// \var KeyQuantization::per_channel
/// Each feature (channel) over a group of kChannelGroup = 32 consecutive tokens, as KIVI does: keys
/// have channels much larger than the rest, which per-token blocks let set every block's step. A
/// sequence's last, incomplete group is stored per token until its 32nd token arrives, then the whole
/// group is quantised per channel from the float32 keys the cache keeps for it (docs/kv-cache.md).

/// The shape, capacity and storage of a KVCache, fixed when it is made.
struct KVCacheConfig {
  std::int64_t num_kv_heads = 0;         ///< Hkv: key/value heads per token
  std::int64_t head_dim = 0;             ///< d_k of the keys
  std::int64_t value_dim = 0;            ///< d_v of the values; 0: head_dim
  std::int64_t max_sequences = 1;        ///< sequences alive at once
  std::int64_t max_sequence_length = 0;  ///< tokens one sequence may hold
  KVCacheLayout layout = KVCacheLayout::contiguous;  ///< contiguous slots or a paged block pool
  std::int64_t block_size = 16;  ///< paged: tokens per block, a power of two
  std::int64_t num_blocks = 0;   ///< paged: blocks in the shared pool; 0: enough for every sequence at full length
  /// Storage: f32, f16 or bf16 (appended values are rounded to it), or the block-quantized int8 or
  /// int4 (attnkit/quantized.hpp: appended rows are quantised in blocks of 32 features, so head_dim,
  /// or value_dim, must be a multiple of 32).
  DType dtype = DType::f32;
  std::optional<DType> key_dtype = std::nullopt;    ///< the keys' storage, if not dtype (e.g. int8 keys, int4 values)
  std::optional<DType> value_dtype = std::nullopt;  ///< the values' storage, if not dtype
  /// int8 and int4 keys: per token (as values) or per channel over groups of 32 tokens. Per channel
  /// needs a paged block_size that is a multiple of 32, so that a group lies in one block.
  KeyQuantization key_quantization = KeyQuantization::per_token;

  /// The keys' storage dtype: key_dtype if set, else dtype.
  DType keys_dtype() const { return key_dtype.value_or(dtype); }
  /// The values' storage dtype: value_dtype if set, else dtype.
  DType values_dtype() const { return value_dtype.value_or(dtype); }
};

/// Keys and values of many sequences for incremental decoding, all memory allocated when it is
/// made (see attnkit/kv_cache.hpp). A failed call leaves the cache as it was.
class KVCache {
 public:
  /// Identifies one sequence of the cache.
  using SequenceId = std::int64_t;

  /// Validates the configuration and allocates all storage (Error(out_of_memory) if it cannot).
  explicit KVCache(const KVCacheConfig& config);

  /// The configuration the cache was made with.
  const KVCacheConfig& config() const { return config_; }

  /// A new, empty sequence. Error(capacity_exceeded) when max_sequences are alive.
  SequenceId add_sequence();
  /// Forgets the sequence; its slot or blocks are reused by later sequences. Unknown ids are errors.
  void free_sequence(SequenceId sequence);
  /// Whether `sequence` is alive in this cache.
  bool contains(SequenceId sequence) const;
  /// The alive sequences, in creation order.
  std::vector<SequenceId> sequences() const;
  /// Tokens the sequence holds. Unknown ids are errors.
  std::int64_t length(SequenceId sequence) const;

  /// Paged: blocks not held by any sequence. Contiguous: 0.
  std::int64_t free_blocks() const;
  /// How many more tokens the sequence can take now: up to its limit, and (paged) what the free
  /// blocks plus the room left in its last block allow.
  std::int64_t room(SequenceId sequence) const;

  /// Appends t new tokens: keys [Hkv, t, d_k] and values [Hkv, t, d_v], any floating dtype and strides.
  void append(SequenceId sequence, ConstTensorView keys, ConstTensorView values);
  /// The same for several sequences at once: keys [B, Hkv, t, d_k], values [B, Hkv, t, d_v], entry b
  /// going to sequences[b]. Either every sequence grows by t or, on any error, none does.
  void append(std::span<const SequenceId> sequences, ConstTensorView keys, ConstTensorView values);

  /// A copy of a sequence's cached keys [Hkv, length, d_k], in the storage dtype, or for int8 and
  /// int4 storage the stored values exactly, as f64 (for inspection and tests; attend reads the
  /// cache in place).
  Tensor keys(SequenceId sequence) const;
  /// A copy of a sequence's cached values [Hkv, length, d_v], in the same dtype as keys() gives.
  Tensor values(SequenceId sequence) const;

  /// Where the kernels find the storage; see src/kv_cache/pools.hpp.
  struct Storage {
    ///@{
    /// [blocks, Hkv, block_size, d] (strided): a contiguous slot is one block. For int8 and int4
    /// storage the strides count bytes and each row is a record of quantized_row_bytes(dtype, d).
    ConstTensorView keys, values;
    ///@}
    std::int64_t block_size = 0;           ///< tokens per block (contiguous: a whole slot)
    std::int64_t blocks_per_sequence = 0;  ///< entries in each row of the block table
    /// Keys quantised per channel: tokens per group (kChannelGroup); a sequence's rows before its
    /// length rounded down to a multiple of it are in groups (quantize_channel_group), the rest are
    /// per-token records. 0: every key row is a per-token record.
    std::int64_t key_channel_group = 0;
  };
  /// Views of the key and value storage, for the kernels.
  Storage storage() const;
  /// Row b of the block table: the blocks of `sequence`, in order (unused entries are −1).
  std::span<const std::int64_t> block_table(SequenceId sequence) const;

 private:
  struct Sequence {
    SequenceId id = 0;
    std::int64_t length = 0;
    std::int64_t table_row = 0;  // its row of the block table
  };
  const Sequence& find(SequenceId sequence, const char* what) const;
  Sequence& find(SequenceId sequence, const char* what);
  std::int64_t blocks_for(std::int64_t tokens) const;
  std::int64_t key_channel_group() const {
    return config_.key_quantization == KeyQuantization::per_channel ? kChannelGroup : 0;
  }

  KVCacheConfig config_;
  std::int64_t blocks_ = 0, block_size_ = 0, blocks_per_sequence_ = 0;
  Tensor keys_, values_;                 // [Hkv, blocks, block_size, d], seen as [blocks, Hkv, block_size, d]
  std::vector<Sequence> alive_;          // in creation order
  std::vector<std::int64_t> free_list_;  // blocks (or slots) not in use, taken from the back
  std::vector<std::int64_t> tables_;     // [max_sequences, blocks_per_sequence]; −1 where no block is held
  std::vector<std::int64_t> free_rows_;  // table rows not in use
  // Keys quantised per channel: [max_sequences][Hkv][kChannelGroup][d_k], per table row the float32
  // keys of the sequence's incomplete group, quantised together when it fills.
  std::vector<float> pending_keys_;
  SequenceId next_id_ = 0;
};

/// Options of attention over the cache. It is always causal, aligned bottom-right per sequence: the
/// queries are the sequence's newest tokens. There is no mask, key_lengths or dropout: the cache's
/// lengths say which keys exist, and decoding is inference.
struct CachedAttentionOptions {
  std::optional<double> scale;              ///< default 1/sqrt(d_k); else finite and > 0
  Window window;                            ///< around the query's position, as in AttentionOptions
  std::span<const float> alibi_slopes;      ///< one per query head, or empty
  double softcap = 0.0;                     ///< 0 = off; else > 0 and finite, as in AttentionOptions
  std::span<const float> sinks;             ///< one logit per query head, or empty, as in AttentionOptions
  Kernel kernel = Kernel::automatic;        ///< fast reads the blocks in place; reference gathers them
  std::optional<TensorView> lse;            ///< [B, Hq, n] f32, if wanted
};

/// out[b] = attention(q[b], cached keys and values of sequences[b]) for q [B, Hq, n, d_k] and out
/// [B, Hq, n, d_v] (one floating dtype, any strides; the cache's dtype may differ). Query i of entry
/// b sits at position p = length(sequences[b]) − n + i, the queries being the sequence's last n
/// tokens, already appended, and sees the cached keys j <= p (within the window). A query with
/// p < 0 (a sequence shorter than n) sees nothing and gives zeros. Hq must be a multiple of the
/// cache's Hkv; a sequence may appear only once.
void attend(const KVCache& cache, std::span<const KVCache::SequenceId> sequences, ConstTensorView q, TensorView out,
            const CachedAttentionOptions& options = {});

}  // namespace attnkit
