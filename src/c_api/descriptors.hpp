// The C API's descriptors seen as the C++ API's types: attnkit_tensor as tensor views, the options
// structs (read by their struct_size, so that older and newer callers both work) as
// AttentionOptions and CachedAttentionOptions. Each raises attnkit::Error naming the argument.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/attnkit.h"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"

namespace attnkit::c_api {

// `pointer`, or Error(null_pointer) "name: NULL" for a required pointer the caller left NULL.
template <class Pointer>
Pointer not_null(Pointer pointer, const char* name) {
  if (pointer == nullptr) throw Error(ErrorCode::null_pointer, std::string(name) + ": NULL");
  return pointer;
}

DType dtype_from(const char* name, attnkit_dtype dtype);

// `name` is the argument's name in messages ("q", "options.mask"). A NULL descriptor raises
// Error(null_pointer); a dtype or rank out of range raises Error(invalid_dtype / invalid_shape).
ConstTensorView input_view(const char* name, const attnkit_tensor* tensor);
TensorView output_view(const char* name, const attnkit_tensor* tensor);
std::optional<TensorView> optional_output(const char* name, const attnkit_tensor* tensor);

// `count` values at `data`: empty when count is 0; Error(null_pointer) for NULL with count > 0 and
// Error(invalid_argument) for a negative count.
template <class T>
std::span<const T> array_from(const char* name, const T* data, std::int64_t count);

// A copy of the caller's struct of `struct_size` bytes, as this version knows it. Raises
// Error(invalid_argument) when struct_size is 0 or smaller than this version's struct (not made by
// the init function), and Error(unsupported) when a larger struct (from a newer header) sets a field
// this version does not know.
template <class Struct>
Struct read_struct(const char* name, const Struct* given, const char* init_function);

AttentionOptions attention_options(const attnkit_options* options);      // NULL: the defaults
CachedAttentionOptions attend_options(const attnkit_attend_options* options);
KVCacheConfig kv_cache_config(const attnkit_kv_cache_config* config);

}  // namespace attnkit::c_api
