// attnkit._core — the KV cache and attention over it. python/attnkit/kv_cache.py checks and shapes
// the arguments (naming them as the user wrote them) and allocates the outputs; the library checks
// everything again and raises attnkit::Error, translated by runtime.cpp.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"
#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attnkit::python {
namespace {

using SequenceId = KVCache::SequenceId;

// The cache and a lock. append and attend run with the GIL released, so two Python threads may
// call into one cache at once: appends and frees take the lock alone, reads share it. A thread
// holding the lock never waits for the GIL, so the two cannot deadlock.
struct PyKVCache {
  explicit PyKVCache(const KVCacheConfig& config) : cache(config) {}
  KVCache cache;
  mutable std::shared_mutex mutex;

  std::shared_lock<std::shared_mutex> reading() const { return std::shared_lock(mutex); }
  std::unique_lock<std::shared_mutex> writing() { return std::unique_lock(mutex); }
};

KVCacheLayout layout_of(const std::string& layout) {
  if (layout == "contiguous") return KVCacheLayout::contiguous;
  if (layout == "paged") return KVCacheLayout::paged;
  throw Error(ErrorCode::invalid_argument, "layout: expected \"contiguous\" or \"paged\", got \"" + layout + "\"");
}

DType storage_dtype_of(const std::string& dtype, const char* name = "dtype") {
  if (dtype == "float32") return DType::f32;
  if (dtype == "float16") return DType::f16;
  if (dtype == "bfloat16") return DType::bf16;
  if (dtype == "int8") return DType::int8;  // block-quantized (attnkit/quantized.hpp)
  if (dtype == "int4") return DType::int4;
  if (dtype == "fp8_e4m3") return DType::fp8_e4m3;
  if (dtype == "fp8_e5m2") return DType::fp8_e5m2;
  throw Error(ErrorCode::invalid_dtype, std::string(name) +
                                            ": the cache stores float32, float16, bfloat16, int8, int4, fp8_e4m3 or fp8_e5m2, got \"" +
                                            dtype + "\"");
}

const char* storage_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::int8: return "int8";
    case DType::int4: return "int4";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::fp8_e5m2: return "fp8_e5m2";
    default: return "float32";
  }
}

void init_cache(PyKVCache* self, std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t max_sequence_length,
                std::int64_t value_dim, std::int64_t max_sequences, const std::string& layout, std::int64_t block_size,
                std::int64_t num_blocks, const std::string& dtype, const std::optional<std::string>& key_dtype,
                const std::optional<std::string>& value_dtype, const std::string& key_quantization) {
  KVCacheConfig config;
  config.num_kv_heads = num_kv_heads;
  config.head_dim = head_dim;
  config.value_dim = value_dim;
  config.max_sequences = max_sequences;
  config.max_sequence_length = max_sequence_length;
  config.layout = layout_of(layout);
  config.block_size = block_size;
  config.num_blocks = num_blocks;
  config.dtype = storage_dtype_of(dtype);
  if (key_dtype) config.key_dtype = storage_dtype_of(*key_dtype, "key_dtype");
  if (value_dtype) config.value_dtype = storage_dtype_of(*value_dtype, "value_dtype");
  // attnkit.KVCache has checked the name.
  config.key_quantization = key_quantization == "per_channel" ? KeyQuantization::per_channel : KeyQuantization::per_token;
  new (self) PyKVCache(config);  // nanobind's in-place construction; a throw leaves no object
}

Tensor copy_of(const PyKVCache& self, SequenceId sequence, Tensor (KVCache::*rows)(SequenceId) const) {
  auto lock = self.reading();
  return (self.cache.*rows)(sequence);
}

void append(PyKVCache& self, const std::vector<SequenceId>& sequences, const InputArray& keys,
            const InputArray& values) {
  const ConstTensorView k = input_view("keys", keys, 4);
  const ConstTensorView v = input_view("values", values, 4);
  // keys and values stay referenced by this call's arguments while the GIL is released.
  nb::gil_scoped_release release;
  auto lock = self.writing();
  self.cache.append(sequences, k, v);
}

void attend_cached(const PyKVCache& self, const std::vector<SequenceId>& sequences, const InputArray& query,
                   const OutputArray& out, const std::optional<OutputArray>& lse, std::optional<double> scale,
                   std::int64_t window_left, std::int64_t window_right, const std::vector<float>& alibi_slopes,
                   double softcap, const std::vector<float>& sinks) {
  CachedAttentionOptions options;
  options.scale = scale;
  options.window = {window_left, window_right};
  options.alibi_slopes = alibi_slopes;
  options.softcap = softcap;
  options.sinks = sinks;
  if (lse) options.lse = output_view("lse", *lse, 3);
  const ConstTensorView q = input_view("query", query, 4);
  const TensorView output = output_view("out", out, 4);
  nb::gil_scoped_release release;
  auto lock = self.reading();
  attend(self.cache, sequences, q, output, options);
}

}  // namespace

void bind_kv_cache(nb::module_& m) {
  nb::class_<PyKVCache>(m, "KVCache",
                        "attnkit::KVCache. Internal: use attnkit.KVCache, which checks the arguments and "
                        "takes numpy arrays and torch tensors.")
      .def("__init__", &init_cache,
           "num_kv_heads"_a, "head_dim"_a, "max_sequence_length"_a, nb::kw_only(), "value_dim"_a = 0,
           "max_sequences"_a = 1, "layout"_a = "contiguous", "block_size"_a = 16, "num_blocks"_a = 0,
           "dtype"_a = "float32", "key_dtype"_a = nb::none(), "value_dtype"_a = nb::none(),
           "key_quantization"_a = "per_token")
      // The configuration, as the cache resolved it (value_dim 0 becomes head_dim).
      .def_prop_ro("num_kv_heads", [](const PyKVCache& c) { return c.cache.config().num_kv_heads; })
      .def_prop_ro("head_dim", [](const PyKVCache& c) { return c.cache.config().head_dim; })
      .def_prop_ro("value_dim", [](const PyKVCache& c) { return c.cache.config().value_dim; })
      .def_prop_ro("max_sequences", [](const PyKVCache& c) { return c.cache.config().max_sequences; })
      .def_prop_ro("max_sequence_length", [](const PyKVCache& c) { return c.cache.config().max_sequence_length; })
      .def_prop_ro("layout", [](const PyKVCache& c) {
        return std::string(c.cache.config().layout == KVCacheLayout::paged ? "paged" : "contiguous");
      })
      .def_prop_ro("dtype", [](const PyKVCache& c) { return std::string(storage_dtype_name(c.cache.config().dtype)); })
      .def_prop_ro("key_dtype", [](const PyKVCache& c) { return std::string(storage_dtype_name(c.cache.config().keys_dtype())); })
      .def_prop_ro("value_dtype",
                   [](const PyKVCache& c) { return std::string(storage_dtype_name(c.cache.config().values_dtype())); })
      .def_prop_ro("key_quantization", [](const PyKVCache& c) {
        return std::string(c.cache.config().key_quantization == KeyQuantization::per_channel ? "per_channel" : "per_token");
      })
      // Paged: tokens per block and the pool's size (num_blocks = 0 resolved); a contiguous cache
      // has one slot of max_sequence_length rows per sequence instead.
      .def_prop_ro("block_size", [](const PyKVCache& c) { return c.cache.storage().block_size; })
      .def_prop_ro("num_blocks", [](const PyKVCache& c) { return c.cache.storage().keys.size(0); })
      .def("add_sequence", [](PyKVCache& c) { auto lock = c.writing(); return c.cache.add_sequence(); })
      .def("free_sequence", [](PyKVCache& c, SequenceId s) { auto lock = c.writing(); c.cache.free_sequence(s); },
           "sequence"_a)
      .def("contains", [](const PyKVCache& c, SequenceId s) { auto lock = c.reading(); return c.cache.contains(s); },
           "sequence"_a)
      .def("sequences", [](const PyKVCache& c) { auto lock = c.reading(); return c.cache.sequences(); })
      .def("length", [](const PyKVCache& c, SequenceId s) { auto lock = c.reading(); return c.cache.length(s); },
           "sequence"_a)
      .def("room", [](const PyKVCache& c, SequenceId s) { auto lock = c.reading(); return c.cache.room(s); },
           "sequence"_a)
      .def("free_blocks", [](const PyKVCache& c) { auto lock = c.reading(); return c.cache.free_blocks(); })
      .def("append", &append, "sequences"_a, "keys"_a, "values"_a,
           "Appends keys [B, Hkv, t, d_k] and values [B, Hkv, t, d_v] (any floating dtype and strides) to "
           "sequences[b]; all or nothing. The GIL is released.")
      .def("keys", [](const PyKVCache& c, SequenceId s) { return owned_numpy(copy_of(c, s, &KVCache::keys)); },
           "sequence"_a)
      .def("values", [](const PyKVCache& c, SequenceId s) { return owned_numpy(copy_of(c, s, &KVCache::values)); },
           "sequence"_a);

  m.def("attend", &attend_cached, "cache"_a, "sequences"_a, "query"_a, "out"_a, nb::kw_only(),
        "lse"_a.none() = nb::none(), "scale"_a.none() = nb::none(), "window_left"_a = -1, "window_right"_a = -1,
        "alibi_slopes"_a = std::vector<float>{}, "softcap"_a = 0.0, "sinks"_a = std::vector<float>{},
        "attnkit::attend on query [B, Hq, n, d_k]: writes out [B, Hq, n, d_v] (and lse [B, Hq, n] float32 when "
        "given). The GIL is released. Internal: call attnkit.attend instead.");
}

}  // namespace attnkit::python
