// The JSON header of a .safetensors file (safetensors.cpp describes the whole file): what it lists,
// the dtype names it uses, and its reader, a schema that checks nlohmann/json's SAX events one by one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/dtype.hpp"

namespace attnkit::io {

inline constexpr std::string_view kMetadataKey = "__metadata__";
inline constexpr std::size_t kMaxQuotedName = 200;  // longest tensor name or key echoed in a message

// "tensor 'name'", for messages.
std::string tensor_label(std::string_view name);
// The format's name of a dtype: "F32".
std::string_view dtype_string(DType dtype);

struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets into the data buffer
  std::uint64_t nbytes = 0;          // shape × dtype size, set by check_layout
};

struct Header {
  std::vector<TensorEntry> tensors;  // in file order until check_layout sorts them by offset
  std::map<std::string, std::string> metadata;
};

// The header's JSON text read against the schema. Every error is a format_error naming `source`,
// the problem and the byte of the header it was found at.
Header read_header(std::string_view json, const std::string& source);

}  // namespace attnkit::io
