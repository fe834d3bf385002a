#include "c_api/descriptors.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/quantized.hpp"

// The ABI (docs/c-api.md, "ABI rules"): on 64-bit targets these layouts are fixed within a major version;
// a struct with struct_size only grows at its end.
static_assert(sizeof(void*) != 8 || sizeof(attnkit_tensor) == 80, "attnkit_tensor's layout is part of the ABI");
static_assert(sizeof(void*) != 8 || offsetof(attnkit_options, sinks) == 104, "attnkit_options' first version ends before sinks");
static_assert(sizeof(void*) != 8 || sizeof(attnkit_options) == 120, "attnkit_options with sinks");
static_assert(sizeof(void*) != 8 || offsetof(attnkit_attend_options, sinks) == 64,
              "attnkit_attend_options' first version ends before sinks");
static_assert(sizeof(void*) != 8 || sizeof(attnkit_attend_options) == 80, "attnkit_attend_options with sinks");
static_assert(sizeof(void*) != 8 || offsetof(attnkit_kv_cache_config, key_quantization) == 80,
              "attnkit_kv_cache_config's first version ends before key_quantization");
static_assert(sizeof(void*) != 8 || sizeof(attnkit_kv_cache_config) == 88, "attnkit_kv_cache_config with key_quantization");
static_assert(offsetof(attnkit_options, struct_size) == 0 && offsetof(attnkit_attend_options, struct_size) == 0 &&
              offsetof(attnkit_kv_cache_config, struct_size) == 0);

namespace attnkit::c_api {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

Causal causal_from(attnkit_causal causal) {
  switch (causal) {
    case ATTNKIT_CAUSAL_NONE: return Causal::none;
    case ATTNKIT_CAUSAL_TOP_LEFT: return Causal::top_left;
    case ATTNKIT_CAUSAL_BOTTOM_RIGHT: return Causal::bottom_right;
  }
  fail(ErrorCode::invalid_argument, "options.causal: " + std::to_string(causal) +
                                        " is not ATTNKIT_CAUSAL_NONE (0), _TOP_LEFT (1) or _BOTTOM_RIGHT (2)");
}

Kernel kernel_from(const char* name, attnkit_kernel kernel) {
  switch (kernel) {
    case ATTNKIT_KERNEL_AUTOMATIC: return Kernel::automatic;
    case ATTNKIT_KERNEL_REFERENCE: return Kernel::reference;
    case ATTNKIT_KERNEL_FAST: return Kernel::fast;
  }
  fail(ErrorCode::invalid_argument, std::string(name) + ": " + std::to_string(kernel) +
                                        " is not ATTNKIT_KERNEL_AUTOMATIC (0), _REFERENCE (1) or _FAST (2)");
}

std::optional<double> scale_from(double scale) {
  if (scale == 0.0) return std::nullopt;  // 0 asks for 1/sqrt(d_k); anything else is checked as given
  return scale;
}

template <class View, class Pointer>
View view_from(const char* name, const attnkit_tensor* tensor, Pointer data) {
  if (tensor == nullptr) fail(ErrorCode::null_pointer, std::string(name) + ": the tensor descriptor is NULL");
  const DType dtype = dtype_from(name, tensor->dtype);
  if (tensor->rank < 0 || tensor->rank > ATTNKIT_MAX_RANK) {
    fail(ErrorCode::invalid_shape, std::string(name) + ": rank " + std::to_string(tensor->rank) +
                                       " is outside 0.." + std::to_string(ATTNKIT_MAX_RANK));
  }
  if (is_quantized(dtype)) {
    fail(ErrorCode::invalid_dtype, std::string(name) + ": " + std::string(dtype_name(dtype)) +
                                       " is a KV cache storage format, not an element type");
  }
  return View(data, dtype, tensor->shape, tensor->strides, tensor->rank);
}

}  // namespace

DType dtype_from(const char* name, attnkit_dtype dtype) {
  switch (dtype) {
    case ATTNKIT_F64: return DType::f64;
    case ATTNKIT_F32: return DType::f32;
    case ATTNKIT_F16: return DType::f16;
    case ATTNKIT_BF16: return DType::bf16;
    case ATTNKIT_BOOL: return DType::boolean;
    case ATTNKIT_I32: return DType::i32;
    case ATTNKIT_I64: return DType::i64;
    case ATTNKIT_INT8: return DType::int8;
    case ATTNKIT_INT4: return DType::int4;
    case ATTNKIT_FP8_E4M3: return DType::fp8_e4m3;
    case ATTNKIT_FP8_E5M2: return DType::fp8_e5m2;
  }
  fail(ErrorCode::invalid_dtype, std::string(name) + ": dtype " + std::to_string(dtype) +
                                     " is not an attnkit_dtype (ATTNKIT_F64 = 0 ... ATTNKIT_FP8_E5M2 = 10)");
}

ConstTensorView input_view(const char* name, const attnkit_tensor* tensor) {
  return view_from<ConstTensorView>(name, tensor, tensor ? tensor->data : nullptr);
}

TensorView output_view(const char* name, const attnkit_tensor* tensor) {
  return view_from<TensorView>(name, tensor, tensor ? tensor->data : nullptr);
}

std::optional<TensorView> optional_output(const char* name, const attnkit_tensor* tensor) {
  if (tensor == nullptr) return std::nullopt;
  return output_view(name, tensor);
}

template <class T>
std::span<const T> array_from(const char* name, const T* data, std::int64_t count) {
  if (count < 0) fail(ErrorCode::invalid_argument, std::string(name) + ": count " + std::to_string(count) + " is negative");
  if (count > 0 && data == nullptr) {
    fail(ErrorCode::null_pointer, std::string(name) + " is NULL but its count is " + std::to_string(count));
  }
  if (count == 0) return {};
  return {data, static_cast<std::size_t>(count)};
}
template std::span<const std::int64_t> array_from(const char*, const std::int64_t*, std::int64_t);
template std::span<const float> array_from(const char*, const float*, std::int64_t);

// The bytes of a struct's first version: a caller built against it passes that struct_size, and
// the fields added since read as zero, their defaults.
template <class Struct>
constexpr std::size_t kFirstVersionSize = sizeof(Struct);
template <>
constexpr std::size_t kFirstVersionSize<attnkit_kv_cache_config> = offsetof(attnkit_kv_cache_config, key_quantization);
template <>
constexpr std::size_t kFirstVersionSize<attnkit_options> = offsetof(attnkit_options, sinks);
template <>
constexpr std::size_t kFirstVersionSize<attnkit_attend_options> = offsetof(attnkit_attend_options, sinks);

template <class Struct>
Struct read_struct(const char* name, const Struct* given, const char* init_function) {
  const std::size_t size = given->struct_size;
  if (size == 0) {
    fail(ErrorCode::invalid_argument,
         std::string(name) + ".struct_size is 0: initialise the struct with " + init_function + " first");
  }
  // Checked before the bytes past the known struct are read: a garbage size must not send the
  // check below past the end of the caller's memory.
  static_assert(sizeof(Struct) <= ATTNKIT_MAX_STRUCT_SIZE);
  if (size > ATTNKIT_MAX_STRUCT_SIZE) {
    fail(ErrorCode::invalid_argument, std::string(name) + ".struct_size " + std::to_string(size) +
                                          " exceeds ATTNKIT_MAX_STRUCT_SIZE (" + std::to_string(ATTNKIT_MAX_STRUCT_SIZE) +
                                          "): not a struct initialised with " + init_function);
  }
  if (size < kFirstVersionSize<Struct>) {
    fail(ErrorCode::invalid_argument, std::string(name) + ".struct_size " + std::to_string(size) +
                                          " is smaller than the first version's struct (" +
                                          std::to_string(kFirstVersionSize<Struct>) + " bytes): initialise it with " +
                                          init_function);
  }
  // A newer caller's fields beyond ours: zero means "as before", anything else we cannot honour.
  const auto* bytes = reinterpret_cast<const unsigned char*>(given);
  for (std::size_t at = sizeof(Struct); at < size; ++at) {
    if (bytes[at] != 0) {
      fail(ErrorCode::unsupported, std::string(name) + ": byte " + std::to_string(at) + " of " + std::to_string(size) +
                                       " is set, beyond the " + std::to_string(sizeof(Struct)) +
                                       " bytes this attnkit knows (the header is newer than the library)");
    }
  }
  Struct copy{};
  std::memcpy(&copy, given, std::min(size, sizeof(Struct)));
  return copy;
}

AttentionOptions attention_options(const attnkit_options* given) {
  AttentionOptions options;
  if (given == nullptr) return options;
  const attnkit_options o = read_struct("options", given, "attnkit_options_init");
  options.scale = scale_from(o.scale);
  options.causal = causal_from(o.causal);
  options.kernel = kernel_from("options.kernel", o.kernel);
  options.window = {o.window_left, o.window_right};
  if (o.mask != nullptr) options.mask = input_view("options.mask", o.mask);
  options.key_lengths = array_from("options.key_lengths", o.key_lengths, o.key_lengths_count);
  options.alibi_slopes = array_from("options.alibi_slopes", o.alibi_slopes, o.alibi_slopes_count);
  options.softcap = o.softcap;
  options.dropout_p = o.dropout_p;
  options.seed = o.seed;
  options.sinks = array_from("options.sinks", o.sinks, o.sinks_count);
  return options;
}

CachedAttentionOptions attend_options(const attnkit_attend_options* given) {
  CachedAttentionOptions options;
  if (given == nullptr) return options;
  const attnkit_attend_options o = read_struct("options", given, "attnkit_attend_options_init");
  if (o.reserved != 0) fail(ErrorCode::unsupported, "options.reserved: must be 0 in this version");
  options.scale = scale_from(o.scale);
  options.kernel = kernel_from("options.kernel", o.kernel);
  options.window = {o.window_left, o.window_right};
  options.alibi_slopes = array_from("options.alibi_slopes", o.alibi_slopes, o.alibi_slopes_count);
  options.softcap = o.softcap;
  options.sinks = array_from("options.sinks", o.sinks, o.sinks_count);
  return options;
}

KVCacheConfig kv_cache_config(const attnkit_kv_cache_config* given) {
  if (given == nullptr) fail(ErrorCode::null_pointer, "config: NULL (make one with attnkit_kv_cache_config_init)");
  const attnkit_kv_cache_config c = read_struct("config", given, "attnkit_kv_cache_config_init");
  KVCacheConfig config;
  config.num_kv_heads = c.num_kv_heads;
  config.head_dim = c.head_dim;
  config.value_dim = c.value_dim;
  config.max_sequences = c.max_sequences;
  config.max_sequence_length = c.max_sequence_length;
  switch (c.layout) {
    case ATTNKIT_KV_CACHE_CONTIGUOUS: config.layout = KVCacheLayout::contiguous; break;
    case ATTNKIT_KV_CACHE_PAGED: config.layout = KVCacheLayout::paged; break;
    default:
      fail(ErrorCode::invalid_argument, "config.layout: " + std::to_string(c.layout) +
                                            " is not ATTNKIT_KV_CACHE_CONTIGUOUS (0) or _PAGED (1)");
  }
  config.block_size = c.block_size;
  config.num_blocks = c.num_blocks;
  config.dtype = dtype_from("config.dtype", c.dtype);
  if (c.key_dtype != ATTNKIT_DTYPE_DEFAULT) config.key_dtype = dtype_from("config.key_dtype", c.key_dtype);
  if (c.value_dtype != ATTNKIT_DTYPE_DEFAULT) config.value_dtype = dtype_from("config.value_dtype", c.value_dtype);
  switch (c.key_quantization) {
    case ATTNKIT_KEYS_PER_TOKEN: config.key_quantization = KeyQuantization::per_token; break;
    case ATTNKIT_KEYS_PER_CHANNEL: config.key_quantization = KeyQuantization::per_channel; break;
    default:
      fail(ErrorCode::invalid_argument, "config.key_quantization: " + std::to_string(c.key_quantization) +
                                            " is not ATTNKIT_KEYS_PER_TOKEN (0) or _PER_CHANNEL (1)");
  }
  return config;
}

}  // namespace attnkit::c_api
