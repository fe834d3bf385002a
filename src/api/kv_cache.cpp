// The KV cache's public API: its arguments checked, then which sequences are alive and how long
// each is. The block arithmetic (sizes, the free list and block tables, the pools' rows) is
// kv_cache/.
#include "attnkit/kv_cache.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <exception>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/quantized.hpp"
#include "core/memory.hpp"
#include "kv_cache/block_table.hpp"
#include "kv_cache/geometry.hpp"
#include "kv_cache/pools.hpp"

namespace attnkit {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

std::string str(std::int64_t x) { return std::to_string(x); }

void check_config(const KVCacheConfig& c) {
  auto positive = [](const char* name, std::int64_t value) {
    if (value <= 0) fail(ErrorCode::invalid_argument, std::string("KVCacheConfig.") + name + ": must be > 0, got " + str(value));
  };
  positive("num_kv_heads", c.num_kv_heads);
  positive("head_dim", c.head_dim);
  positive("max_sequences", c.max_sequences);
  positive("max_sequence_length", c.max_sequence_length);
  if (c.value_dim < 0) fail(ErrorCode::invalid_argument, "KVCacheConfig.value_dim: must be >= 0 (0 = head_dim), got " + str(c.value_dim));
  const std::int64_t value_dim = c.value_dim > 0 ? c.value_dim : c.head_dim;
  for (auto [name, dtype, width, width_name] :
       {std::tuple{c.key_dtype ? "key_dtype" : "dtype", c.keys_dtype(), c.head_dim, "head_dim"},
        std::tuple{c.value_dtype ? "value_dtype" : "dtype", c.values_dtype(), value_dim, "value_dim"}}) {
    if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16 && !is_quantized(dtype)) {
      fail(ErrorCode::invalid_dtype, std::string("KVCacheConfig.") + name + ": " + std::string(dtype_name(dtype)) +
                                         "; the cache stores f32, f16, bf16, int8, int4, fp8_e4m3 or fp8_e5m2");
    }
    if (is_quantized(dtype) && width % kQuantBlock != 0) {
      fail(ErrorCode::invalid_shape, std::string("KVCacheConfig.") + width_name + ": " + str(width) + " is not a multiple of " +
                                         str(kQuantBlock) + ", the block of " + std::string(dtype_name(dtype)) +
                                         " storage (" + name + "): each block of " + str(kQuantBlock) +
                                         " features has its own scale");
    }
  }
  if (c.key_quantization != KeyQuantization::per_token && c.key_quantization != KeyQuantization::per_channel) {
    fail(ErrorCode::invalid_argument, "KVCacheConfig.key_quantization: not a KeyQuantization value");
  }
  if (c.key_quantization == KeyQuantization::per_channel) {
    if (!has_channel_groups(c.keys_dtype())) {
      fail(ErrorCode::invalid_argument, std::string("KVCacheConfig.key_quantization: per_channel quantises int8 or int4 keys, but ") +
                                            (c.key_dtype ? "key_dtype" : "dtype") + " is " + std::string(dtype_name(c.keys_dtype())));
    }
    if (c.layout == KVCacheLayout::paged && c.block_size % kChannelGroup != 0) {
      fail(ErrorCode::invalid_argument, "KVCacheConfig.block_size: " + str(c.block_size) + " with per_channel keys; it must be a multiple of " +
                                            str(kChannelGroup) + ", the tokens of a key group, so that a group lies in one block");
    }
  }
  if (c.layout != KVCacheLayout::contiguous && c.layout != KVCacheLayout::paged) {
    fail(ErrorCode::invalid_argument, "KVCacheConfig.layout: not a KVCacheLayout value");
  }
  if (c.layout == KVCacheLayout::paged) {
    positive("block_size", c.block_size);
    if (!std::has_single_bit(static_cast<std::uint64_t>(c.block_size))) {  // the kernel finds rows with a shift
      fail(ErrorCode::invalid_argument, "KVCacheConfig.block_size: must be a power of two (8, 16, 32, ...), got " + str(c.block_size));
    }
    if (c.num_blocks < 0) fail(ErrorCode::invalid_argument, "KVCacheConfig.num_blocks: must be >= 0 (0 = enough for every sequence at full length), got " + str(c.num_blocks));
  }
}

// Keys [B, Hkv, t, d_k] and values [B, Hkv, t, d_v] to append to `count` sequences.
void check_new_rows(const KVCacheConfig& c, std::int64_t count, ConstTensorView keys, ConstTensorView values) {
  const std::string both = " (keys " + keys.shape_string() + ", values " + values.shape_string() + ")";
  for (auto [name, view, width] : {std::tuple{"keys", keys, c.head_dim}, std::tuple{"values", values, c.value_dim}}) {
    if (view.rank() != 4) fail(ErrorCode::invalid_shape, std::string(name) + ": expected rank 4 [B, Hkv, t, d], got " + view.shape_string());
    if (!is_floating(view.dtype())) {
      fail(ErrorCode::invalid_dtype, std::string(name) + ": dtype " + std::string(dtype_name(view.dtype())) + "; expected a floating dtype");
    }
    if (view.size(0) != count || view.size(1) != c.num_kv_heads || view.size(3) != width) {
      fail(ErrorCode::invalid_shape, std::string(name) + ": expected [" + str(count) + ", " + str(c.num_kv_heads) + ", t, " +
                                         str(width) + "] (sequences, the cache's KV heads, new tokens, feature width), got " +
                                         view.shape_string());
    }
    for (int d = 0; d < 4; ++d)
      if (view.size(d) < 0) fail(ErrorCode::invalid_shape, std::string(name) + ": negative size in " + view.shape_string());
    if (view.numel() > 0 && view.data() == nullptr) fail(ErrorCode::null_pointer, std::string(name) + ": data is null" + both);
  }
  if (keys.size(2) != values.size(2)) {
    fail(ErrorCode::invalid_shape, "keys, values: " + str(keys.size(2)) + " new key tokens but " + str(values.size(2)) +
                                       " new value tokens" + both);
  }
}

// The geometry a cache was made with, for the kv_cache/ functions.
detail::CacheGeometry geometry_of(std::int64_t blocks, std::int64_t block_size, std::int64_t blocks_per_sequence) {
  return detail::CacheGeometry{blocks, block_size, blocks_per_sequence};
}

// Row `row` of the block table [max_sequences, blocks_per_sequence].
template <class Vector>
auto table_row(Vector& tables, std::int64_t row, std::int64_t blocks_per_sequence) {
  return std::span(tables.data() + row * blocks_per_sequence, static_cast<std::size_t>(blocks_per_sequence));
}

}  // namespace

KVCache::KVCache(const KVCacheConfig& config) : config_(config) {
  check_config(config_);
  if (config_.value_dim == 0) config_.value_dim = config_.head_dim;
  const KVCacheConfig& c = config_;
  const detail::CacheGeometry g = detail::cache_geometry(c);
  blocks_ = g.blocks;
  block_size_ = g.block_size;
  blocks_per_sequence_ = g.blocks_per_sequence;
  const std::int64_t key_row = detail::row_bytes(c.keys_dtype(), c.head_dim);
  const std::int64_t value_row = detail::row_bytes(c.values_dtype(), c.value_dim);
  const std::int64_t key_bytes = detail::checked_product({blocks_, c.num_kv_heads, block_size_, key_row}, "the key pool's byte size");
  const std::int64_t value_bytes = detail::checked_product({blocks_, c.num_kv_heads, block_size_, value_row}, "the value pool's byte size");
  const std::int64_t table_bytes = detail::checked_product({c.max_sequences, blocks_per_sequence_, 8}, "the block table's byte size");
  const bool grouped_keys = c.key_quantization == KeyQuantization::per_channel;
  const std::int64_t pending_bytes =
      grouped_keys ? detail::checked_product({c.max_sequences, c.num_kv_heads, kChannelGroup, c.head_dim, 4}, "the key groups' byte size") : 0;
  // Both pools and the tables at once, before either pool is allocated.
  detail::require_memory(detail::ByteCount::of(key_bytes) + detail::ByteCount::of(value_bytes) + detail::ByteCount::of(table_bytes) +
                             detail::ByteCount::of(pending_bytes), [&] {
    const std::string keys(dtype_name(c.keys_dtype())), values(dtype_name(c.values_dtype()));
    return "KVCache of " + str(blocks_) + " blocks × " + str(c.num_kv_heads) + " KV heads × " + str(block_size_) + " tokens × " +
           (keys == values ? "(" + str(c.head_dim) + " + " + str(c.value_dim) + ") " + keys
                           : "(" + str(c.head_dim) + " " + keys + " + " + str(c.value_dim) + " " + values + ")") +
           " features";
  });
  keys_ = detail::make_pool(c.keys_dtype(), c.num_kv_heads, blocks_, block_size_, c.head_dim);
  values_ = detail::make_pool(c.values_dtype(), c.num_kv_heads, blocks_, block_size_, c.value_dim);
  try {  // the bookkeeping, sized once: later pushes never exceed these sizes, so never reallocate
    tables_.assign(static_cast<std::size_t>(c.max_sequences * blocks_per_sequence_), -1);
    alive_.reserve(static_cast<std::size_t>(c.max_sequences));
    free_list_.reserve(static_cast<std::size_t>(blocks_));
    free_rows_.reserve(static_cast<std::size_t>(c.max_sequences));
    pending_keys_.assign(static_cast<std::size_t>(pending_bytes / 4), 0.0f);
  } catch (const std::exception&) {  // bad_alloc, or length_error past the vector's limit
    fail(ErrorCode::out_of_memory, "KVCacheConfig: cannot allocate the block tables of " + str(c.max_sequences) + " sequences × " +
                                       str(blocks_per_sequence_) + " blocks" +
                                       (grouped_keys ? " and the float32 keys of their incomplete key groups" : ""));
  }
  detail::fill_free_list(free_list_, blocks_);
  detail::fill_free_list(free_rows_, c.max_sequences);
}

std::int64_t KVCache::blocks_for(std::int64_t tokens) const {
  return geometry_of(blocks_, block_size_, blocks_per_sequence_).blocks_for(tokens);
}

const KVCache::Sequence& KVCache::find(SequenceId sequence, const char* what) const {
  for (const Sequence& s : alive_)
    if (s.id == sequence) return s;
  fail(ErrorCode::invalid_argument, std::string(what) + ": sequence " + str(sequence) + " is not in the cache" +
                                        (sequence >= 0 && sequence < next_id_ ? " (it was freed)" : ""));
}
KVCache::Sequence& KVCache::find(SequenceId sequence, const char* what) {
  return const_cast<Sequence&>(static_cast<const KVCache&>(*this).find(sequence, what));
}

KVCache::SequenceId KVCache::add_sequence() {
  if (free_rows_.empty()) {
    fail(ErrorCode::capacity_exceeded, "add_sequence: all " + str(config_.max_sequences) +
                                           " sequences of the cache are in use (KVCacheConfig.max_sequences); free one first");
  }
  Sequence s;
  s.id = next_id_++;
  s.table_row = free_rows_.back();
  free_rows_.pop_back();
  if (config_.layout == KVCacheLayout::contiguous) {  // the slot is the sequence's one block, held from the start
    tables_[static_cast<std::size_t>(s.table_row)] = free_list_.back();
    free_list_.pop_back();
  }
  alive_.push_back(s);
  return s.id;
}

void KVCache::free_sequence(SequenceId sequence) {
  const Sequence& s = find(sequence, "free_sequence");
  detail::release_blocks(table_row(tables_, s.table_row, blocks_per_sequence_), free_list_);
  free_rows_.push_back(s.table_row);
  alive_.erase(alive_.begin() + (&s - alive_.data()));
}

bool KVCache::contains(SequenceId sequence) const {
  return std::any_of(alive_.begin(), alive_.end(), [&](const Sequence& s) { return s.id == sequence; });
}

std::vector<KVCache::SequenceId> KVCache::sequences() const {
  std::vector<SequenceId> ids;
  for (const Sequence& s : alive_) ids.push_back(s.id);
  return ids;
}

std::int64_t KVCache::length(SequenceId sequence) const { return find(sequence, "length").length; }

std::int64_t KVCache::free_blocks() const {
  return config_.layout == KVCacheLayout::paged ? static_cast<std::int64_t>(free_list_.size()) : 0;
}

std::int64_t KVCache::room(SequenceId sequence) const {
  const Sequence& s = find(sequence, "room");
  return detail::room_for(geometry_of(blocks_, block_size_, blocks_per_sequence_), config_.layout == KVCacheLayout::paged,
                          config_.max_sequence_length, s.length, free_blocks());
}

void KVCache::append(SequenceId sequence, ConstTensorView keys, ConstTensorView values) {
  if (keys.rank() != 3 || values.rank() != 3) {
    fail(ErrorCode::invalid_shape, "append: keys and values of one sequence are rank 3 [Hkv, t, d], got keys " +
                                       keys.shape_string() + ", values " + values.shape_string());
  }
  append(std::span<const SequenceId>(&sequence, 1), keys.unsqueezed_to(4), values.unsqueezed_to(4));
}

void KVCache::append(std::span<const SequenceId> sequences, ConstTensorView keys, ConstTensorView values) {
  const std::int64_t count = static_cast<std::int64_t>(sequences.size());
  check_new_rows(config_, count, keys, values);
  const std::int64_t t = keys.size(2);
  const detail::CacheGeometry g = geometry_of(blocks_, block_size_, blocks_per_sequence_);
  const bool paged = config_.layout == KVCacheLayout::paged;
  // Everything is checked before anything is written, so a failed append changes nothing.
  std::vector<Sequence*> targets;
  std::int64_t new_blocks = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    Sequence& s = find(sequences[static_cast<std::size_t>(b)], "append");
    if (std::find(targets.begin(), targets.end(), &s) != targets.end()) {
      fail(ErrorCode::invalid_argument, "append: sequence " + str(s.id) + " is listed twice");
    }
    targets.push_back(&s);
    if (s.length + t > config_.max_sequence_length) {
      fail(ErrorCode::capacity_exceeded, "append: sequence " + str(s.id) + " holds " + str(s.length) + " tokens; " + str(t) +
                                             " more would pass its limit of " + str(config_.max_sequence_length) +
                                             " (KVCacheConfig.max_sequence_length)");
    }
    new_blocks += detail::blocks_to_grow(g, paged, s.length, t);
  }
  if (new_blocks > free_blocks()) {
    fail(ErrorCode::capacity_exceeded, "append: " + str(t) + " more tokens for " + str(count) + " sequences need " +
                                           str(new_blocks) + " new blocks of " + str(block_size_) + " tokens, but only " +
                                           str(free_blocks()) + " of the pool's " + str(blocks_) +
                                           " are free (KVCacheConfig.num_blocks); free a sequence first");
  }

  TensorView key_pool = detail::pool(keys_, config_.head_dim), value_pool = detail::pool(values_, config_.value_dim);
  for (std::int64_t b = 0; b < count; ++b) {
    Sequence& s = *targets[static_cast<std::size_t>(b)];
    const std::span<std::int64_t> table = table_row(tables_, s.table_row, blocks_per_sequence_);
    if (paged) detail::take_blocks(g, table, s.length, t, free_list_);
    detail::write_rows(keys, values, b, table, block_size_, s.length, key_pool, value_pool);
    if (key_channel_group() > 0) {  // keys per channel: the incomplete groups grow, and full ones are quantised
      float* pending = pending_keys_.data() + s.table_row * config_.num_kv_heads * kChannelGroup * config_.head_dim;
      detail::group_keys(keys, b, table, block_size_, s.length, key_pool, pending);
    }
    s.length += t;
  }
}

Tensor KVCache::keys(SequenceId sequence) const {
  const Sequence& s = find(sequence, "keys");
  return detail::gather(detail::pool(keys_, config_.head_dim), table_row(tables_, s.table_row, blocks_per_sequence_), block_size_, s.length,
                        key_channel_group());
}

Tensor KVCache::values(SequenceId sequence) const {
  const Sequence& s = find(sequence, "values");
  return detail::gather(detail::pool(values_, config_.value_dim), table_row(tables_, s.table_row, blocks_per_sequence_), block_size_, s.length);
}

KVCache::Storage KVCache::storage() const {
  return Storage{detail::pool(keys_, config_.head_dim), detail::pool(values_, config_.value_dim), block_size_, blocks_per_sequence_,
                 key_channel_group()};
}

std::span<const std::int64_t> KVCache::block_table(SequenceId sequence) const {
  return table_row(tables_, find(sequence, "block_table").table_row, blocks_per_sequence_);
}

}  // namespace attnkit
