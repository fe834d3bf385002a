// The C API's KV cache: an opaque handle around attnkit::KVCache, and attention over it.
#include "attnkit/kv_cache.hpp"

#include <memory>
#include <span>

#include "attnkit/attnkit.h"
#include "c_api/descriptors.hpp"
#include "c_api/status.hpp"

struct attnkit_kv_cache {
  attnkit::KVCache cache;
};

namespace {

using attnkit::c_api::guarded;
using attnkit::c_api::not_null;

std::span<const attnkit::KVCache::SequenceId> sequences_from(const int64_t* sequences, int64_t count) {
  return attnkit::c_api::array_from("sequences", sequences, count);
}

}  // namespace

extern "C" {

void attnkit_kv_cache_config_init(attnkit_kv_cache_config* config) {
  if (config == nullptr) return;
  *config = attnkit_kv_cache_config{};
  config->struct_size = sizeof(attnkit_kv_cache_config);
  config->max_sequences = 1;
  config->layout = ATTNKIT_KV_CACHE_CONTIGUOUS;
  config->dtype = ATTNKIT_F32;
  config->block_size = 16;
  config->key_dtype = ATTNKIT_DTYPE_DEFAULT;
  config->value_dtype = ATTNKIT_DTYPE_DEFAULT;
}

void attnkit_attend_options_init(attnkit_attend_options* options) {
  if (options == nullptr) return;
  *options = attnkit_attend_options{};
  options->struct_size = sizeof(attnkit_attend_options);
  options->kernel = ATTNKIT_KERNEL_AUTOMATIC;
  options->window_left = -1;
  options->window_right = -1;
}

attnkit_status attnkit_kv_cache_create(const attnkit_kv_cache_config* config, attnkit_kv_cache** cache) {
  return guarded([&] {
    not_null(cache, "cache");
    auto made = std::make_unique<attnkit_kv_cache>(attnkit_kv_cache{attnkit::KVCache(attnkit::c_api::kv_cache_config(config))});
    *cache = made.release();
  });
}

void attnkit_kv_cache_destroy(attnkit_kv_cache* cache) { delete cache; }

attnkit_status attnkit_kv_cache_add_sequence(attnkit_kv_cache* cache, int64_t* sequence) {
  return guarded([&] {
    not_null(sequence, "sequence");
    *sequence = not_null(cache, "cache")->cache.add_sequence();
  });
}

attnkit_status attnkit_kv_cache_free_sequence(attnkit_kv_cache* cache, int64_t sequence) {
  return guarded([&] { not_null(cache, "cache")->cache.free_sequence(sequence); });
}

attnkit_status attnkit_kv_cache_length(const attnkit_kv_cache* cache, int64_t sequence, int64_t* length) {
  return guarded([&] {
    not_null(length, "length");
    *length = not_null(cache, "cache")->cache.length(sequence);
  });
}

attnkit_status attnkit_kv_cache_room(const attnkit_kv_cache* cache, int64_t sequence, int64_t* room) {
  return guarded([&] {
    not_null(room, "room");
    *room = not_null(cache, "cache")->cache.room(sequence);
  });
}

attnkit_status attnkit_kv_cache_append(attnkit_kv_cache* cache, const int64_t* sequences, int64_t count,
                                       const attnkit_tensor* keys, const attnkit_tensor* values) {
  return guarded([&] {
    attnkit::KVCache& c = not_null(cache, "cache")->cache;
    const auto ids = sequences_from(sequences, count);
    const attnkit::ConstTensorView k = attnkit::c_api::input_view("keys", keys);
    const attnkit::ConstTensorView v = attnkit::c_api::input_view("values", values);
    if (count == 1 && k.rank() == 3) {
      c.append(ids[0], k, v);  // one sequence's [Hkv, t, d]
    } else {
      c.append(ids, k, v);
    }
  });
}

attnkit_status attnkit_kv_cache_attend(const attnkit_kv_cache* cache, const int64_t* sequences, int64_t count,
                                       const attnkit_tensor* q, const attnkit_tensor* out,
                                       const attnkit_attend_options* options, const attnkit_tensor* lse) {
  return guarded([&] {
    const attnkit::KVCache& c = not_null(cache, "cache")->cache;
    const auto ids = sequences_from(sequences, count);
    const attnkit::ConstTensorView q_view = attnkit::c_api::input_view("q", q);
    const attnkit::TensorView out_view = attnkit::c_api::output_view("out", out);
    attnkit::CachedAttentionOptions o = attnkit::c_api::attend_options(options);
    o.lse = attnkit::c_api::optional_output("lse", lse);
    attnkit::attend(c, ids, q_view, out_view, o);
  });
}

}  // extern "C"
