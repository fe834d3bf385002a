// .safetensors reading and writing (the format of huggingface/safetensors).
//
// A file is (safetensors/src/tensor.rs in the reference implementation):
//   N: u64 little-endian | N bytes: a JSON object, padded with spaces | the data buffer
// and the JSON object is
//   {"__metadata__": {"key": "value", ...},                               (optional)
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// with offsets in bytes from the start of the data buffer. The reader trusts nothing: the header
// length is checked against the file before anything is allocated; the JSON is read by nlohmann/json's
// strict SAX parser, whose events the header's schema (io/safetensors_header.hpp) checks one by one
// (no generic JSON tree, so a hostile header cannot make it allocate more than a small multiple of
// its own size); and the
// tensors, sorted by offset, must tile the data buffer exactly, so every tensor is read from bytes
// that exist and that no other tensor claims.
#include "attnkit/safetensors.hpp"
#include "attnkit/quantized.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "io/file_common.hpp"
#include "io/json.hpp"
#include "io/output_file.hpp"
#include "io/safetensors_header.hpp"

namespace attnkit {

namespace {

using io::dtype_string, io::fail, io::format_fail, io::Header, io::in_quotes, io::InputFile, io::kMaxQuotedName,
    io::kMetadataKey, io::MemoryInput, io::normalize_bools, io::OutputFile, io::tensor_label, io::TensorEntry;

// Elements are copied byte for byte between memory and little-endian files; a big-endian host would
// need byte swapping, which this file does not implement.
static_assert(std::endian::native == std::endian::little, "safetensors.cpp assumes a little-endian host");

constexpr std::size_t kLengthBytes = 8;  // the u64 header length that starts the file
// The reference implementation's MAX_HEADER_SIZE: it refuses longer headers, so we neither read nor
// write them. Real headers are a few hundred bytes per tensor.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::size_t kHeaderAlignment = 8;  // writers pad the header so that the data starts 8-byte aligned

// ---- error messages ----

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

std::string offsets_string(std::uint64_t begin, std::uint64_t end) {
  return "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// ---- reading: the layout of the data buffer ----

// shape × dtype size, or an error if the element or byte count does not fit in 64 bits. Sizes of 0 are
// left out of the product checked: [0, 2^40, 2^40] holds no element, but its strides do not fit in 64
// bits and no view could describe it, so it is rejected like [2^40, 2^40, 0].
std::uint64_t data_bytes(const TensorEntry& e, const std::string& source) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t count = 1;  // of the non-zero sizes
  bool empty = false;
  for (std::int64_t s : e.shape) {
    if (s == 0) {
      empty = true;
      continue;
    }
    if (count > kMax / s) {
      format_fail(source, tensor_label(e.name) + ": the element count of shape " + shape_string(e.shape) +
                              " overflows 64 bits");
    }
    count *= s;
  }
  const auto size = static_cast<std::int64_t>(dtype_size(e.dtype));
  if (count > kMax / size) {
    format_fail(source, tensor_label(e.name) + ": the byte count of shape " + shape_string(e.shape) + " of " +
                            std::string(dtype_string(e.dtype)) + " overflows 64 bits");
  }
  return empty ? 0 : static_cast<std::uint64_t>(count * size);
}

// Checks each tensor's offsets against its shape and the buffer, then sorts the tensors by offset
// and requires them to tile [0, buffer_size) exactly: no overlap, no gap, nothing left over (the
// reference implementation's InvalidOffset and MetadataIncompleteBuffer).
void check_layout(Header& header, std::uint64_t buffer_size, const std::string& source) {
  for (TensorEntry& e : header.tensors) {
    e.nbytes = data_bytes(e, source);
    const std::string where = tensor_label(e.name) + ": " + offsets_string(e.begin, e.end);
    if (e.end < e.begin) format_fail(source, where + " end before they begin");
    if (e.end > buffer_size) {
      format_fail(source, where + " are out of range: the data buffer holds only " +
                              std::to_string(buffer_size) + " bytes (is the file truncated?)");
    }
    if (e.end - e.begin != e.nbytes) {
      format_fail(source, where + " span " + std::to_string(e.end - e.begin) + " bytes but shape " +
                              shape_string(e.shape) + " of " + std::string(dtype_string(e.dtype)) + " needs " +
                              std::to_string(e.nbytes));
    }
  }
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t covered = 0;  // the tensors so far tile [0, covered)
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : header.tensors) {
    const std::string what = tensor_label(e.name) + " (" + offsets_string(e.begin, e.end) + ")";
    if (e.begin < covered) {
      format_fail(source, what + " overlaps " + tensor_label(previous->name) + " (" +
                              offsets_string(previous->begin, previous->end) + ")");
    }
    if (e.begin > covered) {
      format_fail(source, "the data buffer has " + std::to_string(e.begin - covered) + " unused bytes before " +
                              what + ": the tensors must cover it without gaps");
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != buffer_size) {
    format_fail(source, "the data buffer has " + std::to_string(buffer_size - covered) + " unused bytes after " +
                            (previous ? "the last tensor, " + tensor_label(previous->name) + " (" +
                                            offsets_string(previous->begin, previous->end) + ")"
                                      : std::string("the header, which lists no tensors")));
  }
}

// ---- reading: the header length ----

// `Input` is io::InputFile or io::MemoryInput.
template <class Input>
std::uint64_t read_header_length(Input& in, const std::string& source) {
  std::array<unsigned char, kLengthBytes> bytes{};
  in.read(bytes.data(), bytes.size(), "header length");
  std::uint64_t length = 0;
  for (std::size_t i = bytes.size(); i-- > 0;) length = (length << 8) | bytes[i];  // little-endian
  if (length > kMaxHeaderBytes) {
    format_fail(source, "oversized header: its length field says " + std::to_string(length) +
                            " bytes (the limit is " + std::to_string(kMaxHeaderBytes) + ")");
  }
  if (length > in.remaining()) {
    format_fail(source, "file is truncated in the header: its length field says " + std::to_string(length) +
                            " bytes but only " + std::to_string(in.remaining()) + " follow");
  }
  return length;
}

template <class Input>
SafetensorsFile read_from(Input& in, const std::string& source) {
  std::string text(read_header_length(in, source), '\0');
  in.read(text.data(), text.size(), "header");
  Header header = io::read_header(text, source);
  check_layout(header, in.remaining(), source);  // before allocating anything the header claims

  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (TensorEntry& e : header.tensors) {  // in offset order: the data buffer is read front to back
    Tensor tensor = io::allocate_for(source, tensor_label(e.name), e.dtype, e.shape);
    in.read(tensor.raw(), static_cast<std::size_t>(e.nbytes), "data of " + tensor_label(e.name));
    if (e.dtype == DType::boolean) normalize_bools(tensor);
    file.tensors.emplace(std::move(e.name), std::move(tensor));
  }
  return file;
}

// ---- writing ----

// A named tensor to write: its elements (any rank, strides in elements, may be zero or negative) and
// their byte count.
struct WriteItem {
  std::string_view name;
  io::StridedElements elements;
  std::uint64_t nbytes = 0;
};

// Sizes must be non-negative with element and byte counts that fit in 64 bits, and the data
// non-null when there are elements. Returns the byte count. As in data_bytes, sizes of 0 are left out
// of the products checked, so that nothing is written that the reader would refuse.
std::uint64_t checked_nbytes(const WriteItem& item, const void* data, const std::string& path) {
  const std::string who = tensor_label(item.name) + " of shape " + shape_string(item.elements.sizes);
  if (is_quantized(item.elements.dtype)) {
    fail(ErrorCode::invalid_dtype, path, "cannot write " + who + ": dtype " + std::string(dtype_name(item.elements.dtype)) +
                                             " is a KV cache's quantized row format, not an element type");
  }
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t count = 1;  // of the non-zero sizes
  bool empty = false;
  for (std::int64_t s : item.elements.sizes) {
    if (s < 0) fail(ErrorCode::invalid_shape, path, "cannot write " + who + ": negative size");
    if (s == 0) {
      empty = true;
      continue;
    }
    if (count > kMax / s) {
      fail(ErrorCode::size_overflow, path, "cannot write " + who + ": the element count overflows 64 bits");
    }
    count *= s;
  }
  const auto size = static_cast<std::int64_t>(dtype_size(item.elements.dtype));
  if (count > kMax / size) {
    fail(ErrorCode::size_overflow, path, "cannot write " + who + ": the byte count overflows 64 bits");
  }
  if (empty) return 0;
  if (data == nullptr) fail(ErrorCode::null_pointer, path, "cannot write " + who + " with a null data pointer");
  return static_cast<std::uint64_t>(count * size);
}

void check_names(const std::vector<WriteItem>& items, const std::string& path) {
  std::unordered_set<std::string_view> seen;
  for (const WriteItem& item : items) {
    if (item.name.empty()) fail(ErrorCode::invalid_argument, path, "a tensor name is empty");
    if (item.name == kMetadataKey) {
      fail(ErrorCode::invalid_argument, path, "the tensor name '__metadata__' is reserved for the metadata");
    }
    if (!seen.insert(item.name).second) fail(ErrorCode::invalid_argument, path, "duplicate " + tensor_label(item.name));
  }
}

[[noreturn]] void header_too_large(const std::string& path, std::uint64_t at_least) {
  fail(ErrorCode::invalid_argument, path, "the header would be at least " + std::to_string(at_least) +
                                              " bytes, over the limit of " + std::to_string(kMaxHeaderBytes) +
                                              " that readers accept (too many tensors or too much metadata)");
}

// The metadata and the tensor names as JSON string literals, each checked to be valid UTF-8.
struct HeaderStrings {
  std::vector<std::pair<std::string, std::string>> metadata;  // key, value
  std::vector<std::string> names;
  std::uint64_t bytes = 0;  // of all of them
};

// Never more than readers accept: a huge name or value is refused before it is copied (escaping
// never shortens a string), and the escaped strings are measured before a header is built around them.
HeaderStrings header_strings(const std::vector<WriteItem>& items, const std::map<std::string, std::string>& metadata,
                             const std::string& path) {
  constexpr std::uint64_t kQuotes = 2;
  std::uint64_t at_least = 0;
  for (const auto& [key, value] : metadata) at_least += key.size() + value.size() + 2 * kQuotes;
  for (const WriteItem& item : items) at_least += item.name.size() + kQuotes;
  if (at_least > kMaxHeaderBytes) header_too_large(path, at_least);

  HeaderStrings strings;
  const auto add = [&](std::string literal) {
    strings.bytes += literal.size();
    return literal;
  };
  for (const auto& [key, value] : metadata) {
    const std::string label = "metadata key " + in_quotes(key, kMaxQuotedName);
    std::optional<std::string> key_literal = io::json_string(key);
    if (!key_literal) fail(ErrorCode::invalid_argument, path, label + " is not valid UTF-8");
    std::optional<std::string> value_literal = io::json_string(value);
    if (!value_literal) fail(ErrorCode::invalid_argument, path, "the value of " + label + " is not valid UTF-8");
    strings.metadata.emplace_back(add(std::move(*key_literal)), add(std::move(*value_literal)));
  }
  for (const WriteItem& item : items) {
    std::optional<std::string> name = io::json_string(item.name);
    if (!name) fail(ErrorCode::invalid_argument, path, tensor_label(item.name) + ": the name is not valid UTF-8");
    strings.names.push_back(add(std::move(*name)));
  }
  if (strings.bytes > kMaxHeaderBytes) header_too_large(path, strings.bytes);
  return strings;
}

// The header as the reference writer lays it out: compact JSON, "__metadata__" first (omitted when
// empty), the tensors in order with consecutive offsets, then spaces up to a multiple of 8 bytes.
// Never longer than readers accept.
std::string header_json(const std::vector<WriteItem>& items, const HeaderStrings& strings, const std::string& path) {
  constexpr std::size_t kStructureBytes = 128;  // more than the JSON around one tensor's name needs
  std::string json;
  json.reserve(strings.bytes + kStructureBytes * (items.size() + 1));
  json += '{';
  if (!strings.metadata.empty()) {
    json += "\"" + std::string(kMetadataKey) + "\":{";
    for (const auto& [key, value] : strings.metadata) {
      if (json.back() != '{') json += ',';
      json += key + ':' + value;
    }
    json += '}';
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const WriteItem& item = items[i];
    if (json.size() > 1) json += ',';
    json += strings.names[i];
    json += ":{\"dtype\":\"" + std::string(dtype_string(item.elements.dtype)) + "\",\"shape\":[";
    for (std::size_t d = 0; d < item.elements.sizes.size(); ++d) json += (d ? "," : "") + std::to_string(item.elements.sizes[d]);
    if (item.nbytes > std::numeric_limits<std::uint64_t>::max() - offset) {
      fail(ErrorCode::size_overflow, path, "the tensors' total byte count overflows 64 bits");
    }
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + item.nbytes) + "]}";
    offset += item.nbytes;
  }
  json += '}';
  json.append((kHeaderAlignment - json.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  if (json.size() > kMaxHeaderBytes) header_too_large(path, json.size());
  return json;
}

void write_items(const std::string& path, const std::vector<WriteItem>& items,
                 const std::map<std::string, std::string>& metadata) {
  check_names(items, path);
  const std::string header = header_json(items, header_strings(items, metadata, path), path);
  std::array<unsigned char, kLengthBytes> length{};
  for (std::size_t i = 0; i < length.size(); ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));

  OutputFile out(path);
  out.write(length.data(), length.size());
  out.write(header.data(), header.size());
  for (const WriteItem& item : items) {
    io::write_elements(out, item.elements, item.elements.dtype);  // bf16 stays bf16
  }
  out.commit();
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  InputFile in(path);
  return read_from(in, path);
}

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& source_name) {
  MemoryInput in(bytes, source_name);
  return read_from(in, source_name);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, ConstTensorView>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<WriteItem> items;
  items.reserve(tensors.size());
  for (const auto& [name, view] : tensors) {
    const auto rank = static_cast<std::size_t>(view.rank());
    WriteItem item{name,
                   {static_cast<const std::byte*>(view.data()), view.dtype(),
                    std::vector<std::int64_t>(view.sizes().begin(), view.sizes().begin() + rank),
                    std::vector<std::int64_t>(view.strides().begin(), view.strides().begin() + rank)}};
    item.nbytes = checked_nbytes(item, view.data(), path);
    items.push_back(std::move(item));
  }
  write_items(path, items, metadata);
}

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  std::vector<WriteItem> items;
  items.reserve(file.tensors.size());
  for (const auto& [name, tensor] : file.tensors) {
    // A default-constructed Tensor has rank 0 but no element; a rank-0 tensor in a file has one.
    if (tensor.raw() == nullptr) {
      fail(ErrorCode::invalid_argument, path,
           "cannot write " + tensor_label(name) + ": it is a default-constructed (empty) Tensor");
    }
    WriteItem item{name, {static_cast<const std::byte*>(tensor.raw()), tensor.dtype(), tensor.shape(),
                          io::c_order_strides(tensor.shape())}};
    item.nbytes = checked_nbytes(item, tensor.raw(), path);
    items.push_back(std::move(item));
  }
  write_items(path, items, file.metadata);
}

}  // namespace attnkit
