// The KV cache's bookkeeping: which sequences are alive, how long each is, and which blocks (or,
// contiguous, which slot) hold its rows. The storage is two pools [blocks, Hkv, block_size, d], so
// that a contiguous cache is the special case of one block of max_sequence_length rows per sequence
// and the attention kernel reads both layouts through one block table.
#include "attnkit/kv_cache.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <exception>
#include <bit>
#include <tuple>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/quantized.hpp"
#include "core/element_io.hpp"
#include "core/memory.hpp"

namespace attnkit {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

std::string str(std::int64_t x) { return std::to_string(x); }

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0); }  // no overflow near INT64_MAX

// a · b · ..., or an error naming what overflowed.
std::int64_t checked_product(std::initializer_list<std::int64_t> factors, const char* what) {
  std::int64_t product = 1;
  for (std::int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) {
      fail(ErrorCode::size_overflow, std::string("KVCacheConfig: ") + what + " overflows 64 bits");
    }
  }
  return product;
}

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
                                         "; the cache stores f32, f16, bf16, int8 or int4");
    }
    if (is_quantized(dtype) && width % kQuantBlock != 0) {
      fail(ErrorCode::invalid_shape, std::string("KVCacheConfig.") + width_name + ": " + str(width) + " is not a multiple of " +
                                         str(kQuantBlock) + ", the block of " + std::string(dtype_name(dtype)) +
                                         " storage (" + name + "): each block of " + str(kQuantBlock) +
                                         " features has its own scale");
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

// dst[at, :] = src[from, :] for rank-4 views whose last dimensions match, rounded once to dst's dtype:
// through float32 for f32/f16/bf16 sources, element by element through double for f64 ones (f64 →
// f32 → bf16 would round twice and can land one unit off).
void copy_row(ConstTensorView src, std::array<std::int64_t, 3> from, TensorView dst, std::array<std::int64_t, 3> at) {
  const std::int64_t width = dst.size(3);
  if (src.dtype() != DType::f64 || is_quantized(dst.dtype())) {  // quantised from float32 (f64 rounded once first)
    thread_local std::vector<float> row;
    row.resize(static_cast<std::size_t>(width));
    detail::load_row(src, from[0], from[1], from[2], row.data(), width);
    detail::store_row_part(row.data(), dst, at[0], at[1], at[2], 0, width);
    return;
  }
  for (std::int64_t c = 0; c < width; ++c) {
    const double x = *src.at<double>({from[0], from[1], from[2], c});
    store_from_double(static_cast<std::byte*>(dst.data()) +
                          (at[0] * dst.stride(0) + at[1] * dst.stride(1) + at[2] * dst.stride(2) + c * dst.stride(3)) *
                              static_cast<std::int64_t>(dtype_size(dst.dtype())),
                      dst.dtype(), x);
  }
}

// The pools are stored head-major, [Hkv, blocks, block_size, d], and seen as [blocks, Hkv, block_size,
// d]: one head's blocks lie together, so a sequence whose blocks were taken in order reads each head
// as one stream, as a contiguous cache does (block-major storage measured 1.1-1.4x slower at decode:
// the hardware prefetchers ran into the other heads' rows past every block).
// For int8 and int4 storage the tensor's last dimension is the row record's bytes, and the view's the
// row's width (attnkit/quantized.hpp): strides in bytes, one row every record.
template <class View, class T>
View pool_of(T& t, std::int64_t width) {
  if (!is_quantized(t.dtype())) return t.view().permuted({1, 0, 2, 3});
  const std::int64_t heads = t.shape()[0], blocks = t.shape()[1], rows = t.shape()[2], record = t.shape()[3];
  return View(t.raw(), t.dtype(), {blocks, heads, rows, width}, {rows * record, blocks * rows * record, record, 1});
}
TensorView pool(Tensor& t, std::int64_t width) { return pool_of<TensorView>(t, width); }
ConstTensorView pool(const Tensor& t, std::int64_t width) { return pool_of<ConstTensorView>(t, width); }

// Bytes of one stored row of `width` features (a whole number of blocks when quantized), or an error
// naming what overflowed.
std::int64_t row_bytes(DType dtype, std::int64_t width) {
  if (!is_quantized(dtype)) return checked_product({width, static_cast<std::int64_t>(dtype_size(dtype))}, "a row's byte size");
  return checked_product({width / kQuantBlock, quantized_row_bytes(dtype, kQuantBlock)}, "a row's byte size");
}

// A sequence's first `length` rows of a pool [blocks, Hkv, block_size, d], as [Hkv, length, d].
Tensor gather(ConstTensorView pool, const std::int64_t* table, std::int64_t block_size, std::int64_t length) {
  const std::int64_t heads = pool.size(1), width = pool.size(3);
  if (is_quantized(pool.dtype())) {  // the stored values exactly, in float64 (int4's need more than 24 bits)
    Tensor out(DType::f64, {heads, length, width});
    for (std::int64_t g = 0; g < heads; ++g)
      for (std::int64_t j = 0; j < length; ++j) {
        const std::byte* row = pool.at<std::byte>({table[j / block_size], g, j % block_size, 0});
        dequantize_row(row, width, pool.dtype(), 0, width, out.data<double>() + (g * length + j) * width);
      }
    return out;
  }
  Tensor out(pool.dtype(), {heads, length, width});
  std::vector<float> row(static_cast<std::size_t>(width));
  const TensorView dest = out.view4();
  for (std::int64_t g = 0; g < heads; ++g)
    for (std::int64_t j = 0; j < length; ++j) {
      detail::load_row(pool, table[j / block_size], g, j % block_size, row.data(), width);
      detail::store_row_part(row.data(), dest, 0, g, j, 0, width);
    }
  return out;
}

}  // namespace

KVCache::KVCache(const KVCacheConfig& config) : config_(config) {
  check_config(config_);
  if (config_.value_dim == 0) config_.value_dim = config_.head_dim;
  const KVCacheConfig& c = config_;
  if (c.layout == KVCacheLayout::contiguous) {
    block_size_ = c.max_sequence_length;
    blocks_per_sequence_ = 1;
    blocks_ = c.max_sequences;
  } else {
    block_size_ = c.block_size;
    const std::int64_t blocks_at_full_length = ceil_div(c.max_sequence_length, c.block_size);
    blocks_ = c.num_blocks > 0 ? c.num_blocks : checked_product({c.max_sequences, blocks_at_full_length}, "the default block count");
    // No sequence can hold more blocks than the pool has, whatever its length limit says.
    blocks_per_sequence_ = std::min(blocks_at_full_length, blocks_);
  }
  const std::int64_t key_row = row_bytes(c.keys_dtype(), c.head_dim), value_row = row_bytes(c.values_dtype(), c.value_dim);
  const std::int64_t key_bytes = checked_product({blocks_, c.num_kv_heads, block_size_, key_row}, "the key pool's byte size");
  const std::int64_t value_bytes = checked_product({blocks_, c.num_kv_heads, block_size_, value_row}, "the value pool's byte size");
  const std::int64_t table_bytes = checked_product({c.max_sequences, blocks_per_sequence_, 8}, "the block table's byte size");
  // Both pools and the tables at once, before either pool is allocated.
  detail::require_memory(detail::ByteCount::of(key_bytes) + detail::ByteCount::of(value_bytes) + detail::ByteCount::of(table_bytes), [&] {
    const std::string keys(dtype_name(c.keys_dtype())), values(dtype_name(c.values_dtype()));
    return "KVCache of " + str(blocks_) + " blocks × " + str(c.num_kv_heads) + " KV heads × " + str(block_size_) + " tokens × " +
           (keys == values ? "(" + str(c.head_dim) + " + " + str(c.value_dim) + ") " + keys
                           : "(" + str(c.head_dim) + " " + keys + " + " + str(c.value_dim) + " " + values + ")") +
           " features";
  });
  // Quantized pools hold row records: their last dimension counts bytes (pool() views them by width).
  auto last_dim = [](DType dtype, std::int64_t width) { return is_quantized(dtype) ? row_bytes(dtype, width) : width; };
  keys_ = Tensor(c.keys_dtype(), {c.num_kv_heads, blocks_, block_size_, last_dim(c.keys_dtype(), c.head_dim)});
  values_ = Tensor(c.values_dtype(), {c.num_kv_heads, blocks_, block_size_, last_dim(c.values_dtype(), c.value_dim)});
  try {  // the bookkeeping, sized once: later pushes never exceed these sizes, so never reallocate
    tables_.assign(static_cast<std::size_t>(c.max_sequences * blocks_per_sequence_), -1);
    alive_.reserve(static_cast<std::size_t>(c.max_sequences));
    free_list_.reserve(static_cast<std::size_t>(blocks_));
    free_rows_.reserve(static_cast<std::size_t>(c.max_sequences));
  } catch (const std::exception&) {  // bad_alloc, or length_error past the vector's limit
    fail(ErrorCode::out_of_memory, "KVCacheConfig: cannot allocate the block tables of " + str(c.max_sequences) + " sequences × " +
                                       str(blocks_per_sequence_) + " blocks");
  }
  // Taken from the back: blocks and table rows are handed out in increasing order at first.
  for (std::int64_t b = blocks_ - 1; b >= 0; --b) free_list_.push_back(b);
  for (std::int64_t r = c.max_sequences - 1; r >= 0; --r) free_rows_.push_back(r);
}

std::int64_t KVCache::blocks_for(std::int64_t tokens) const { return ceil_div(tokens, block_size_); }

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
  std::int64_t* table = tables_.data() + s.table_row * blocks_per_sequence_;
  for (std::int64_t i = 0; i < blocks_per_sequence_; ++i) {
    if (table[i] >= 0) free_list_.push_back(table[i]);
    table[i] = -1;
  }
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
  const std::int64_t to_limit = config_.max_sequence_length - s.length;
  if (config_.layout == KVCacheLayout::contiguous) return to_limit;
  const std::int64_t in_held_blocks = blocks_for(s.length) * block_size_ - s.length;
  return std::min(to_limit, in_held_blocks + free_blocks() * block_size_);
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
    if (config_.layout == KVCacheLayout::paged) new_blocks += blocks_for(s.length + t) - blocks_for(s.length);
  }
  if (new_blocks > free_blocks()) {
    fail(ErrorCode::capacity_exceeded, "append: " + str(t) + " more tokens for " + str(count) + " sequences need " +
                                           str(new_blocks) + " new blocks of " + str(block_size_) + " tokens, but only " +
                                           str(free_blocks()) + " of the pool's " + str(blocks_) +
                                           " are free (KVCacheConfig.num_blocks); free a sequence first");
  }

  TensorView key_pool = pool(keys_, config_.head_dim), value_pool = pool(values_, config_.value_dim);
  for (std::int64_t b = 0; b < count; ++b) {
    Sequence& s = *targets[static_cast<std::size_t>(b)];
    std::int64_t* table = tables_.data() + s.table_row * blocks_per_sequence_;
    if (config_.layout == KVCacheLayout::paged) {
      for (std::int64_t i = blocks_for(s.length); i < blocks_for(s.length + t); ++i) {
        table[i] = free_list_.back();
        free_list_.pop_back();
      }
    }
    for (std::int64_t token = 0; token < t; ++token) {
      const std::int64_t position = s.length + token;
      const std::int64_t block = table[position / block_size_], slot = position % block_size_;
      for (std::int64_t g = 0; g < config_.num_kv_heads; ++g) {
        copy_row(keys, {b, g, token}, key_pool, {block, g, slot});
        copy_row(values, {b, g, token}, value_pool, {block, g, slot});
      }
    }
    s.length += t;
  }
}

Tensor KVCache::keys(SequenceId sequence) const {
  const Sequence& s = find(sequence, "keys");
  return gather(pool(keys_, config_.head_dim), tables_.data() + s.table_row * blocks_per_sequence_, block_size_, s.length);
}

Tensor KVCache::values(SequenceId sequence) const {
  const Sequence& s = find(sequence, "values");
  return gather(pool(values_, config_.value_dim), tables_.data() + s.table_row * blocks_per_sequence_, block_size_, s.length);
}

KVCache::Storage KVCache::storage() const {
  return Storage{pool(keys_, config_.head_dim), pool(values_, config_.value_dim), block_size_, blocks_per_sequence_};
}

std::span<const std::int64_t> KVCache::block_table(SequenceId sequence) const {
  const Sequence& s = find(sequence, "block_table");
  return {tables_.data() + s.table_row * blocks_per_sequence_, static_cast<std::size_t>(blocks_per_sequence_)};
}

}  // namespace attnkit
