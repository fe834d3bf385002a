// .safetensors reading and writing (the format of huggingface/safetensors).
//
// A file is (safetensors/src/tensor.rs in the reference implementation):
//   N: u64 little-endian | N bytes: a JSON object, padded with spaces | the data buffer
// and the JSON object is
//   {"__metadata__": {"key": "value", ...},                               (optional)
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// with offsets in bytes from the start of the data buffer. The reader trusts nothing: the header
// length is checked against the file before anything is allocated; the JSON is read by nlohmann/json's
// strict SAX parser, whose events this file's schema checks one by one (no generic JSON tree, so a
// hostile header cannot make it allocate more than a small multiple of its own size); and the
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

namespace attnkit {

namespace {

using io::fail, io::format_fail, io::in_quotes, io::InputFile, io::MemoryInput, io::normalize_bools, io::OutputFile;

// Elements are copied byte for byte between memory and little-endian files; a big-endian host would
// need byte swapping, which this file does not implement.
static_assert(std::endian::native == std::endian::little, "safetensors.cpp assumes a little-endian host");

constexpr std::size_t kLengthBytes = 8;  // the u64 header length that starts the file
// The reference implementation's MAX_HEADER_SIZE: it refuses longer headers, so we neither read nor
// write them. Real headers are a few hundred bytes per tensor.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::size_t kHeaderAlignment = 8;  // writers pad the header so that the data starts 8-byte aligned
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::size_t kMaxQuotedName = 200;  // longest tensor name or key echoed in a message

// ---- error messages ----

std::string tensor_label(std::string_view name) { return "tensor " + in_quotes(name, kMaxQuotedName); }

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

std::string offsets_string(std::uint64_t begin, std::uint64_t end) {
  return "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// ---- dtypes ----

struct DtypeName {
  std::string_view name;
  DType dtype;
};
constexpr std::array<DtypeName, 7> kDtypes{{{"F64", DType::f64},
                                            {"F32", DType::f32},
                                            {"F16", DType::f16},
                                            {"BF16", DType::bf16},
                                            {"I64", DType::i64},
                                            {"I32", DType::i32},
                                            {"BOOL", DType::boolean}}};
constexpr std::string_view kSupportedDtypes = "F64, F32, F16, BF16, I64, I32, BOOL";
// The format's other dtypes (the reference's Dtype enum): valid files that attnkit has no DType for.
constexpr std::array<std::string_view, 13> kUnsupportedDtypes{
    "U8", "I8", "U16", "I16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

std::string_view dtype_string(DType dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

std::optional<DType> dtype_from_string(std::string_view dtype) {
  for (const auto& d : kDtypes) {
    if (d.name == dtype) return d.dtype;
  }
  return std::nullopt;
}

// The message for a dtype that dtype_from_string does not know.
std::string unknown_dtype(const std::string& who, std::string_view dtype) {
  const bool known = std::find(kUnsupportedDtypes.begin(), kUnsupportedDtypes.end(), dtype) != kUnsupportedDtypes.end();
  return who + ": " + (known ? "unsupported dtype " : "unknown dtype ") + in_quotes(dtype) + " (supported: " +
         std::string(kSupportedDtypes) + ")";
}

// ---- reading: the header ----

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

enum class Field { dtype, shape, data_offsets };
constexpr std::array<std::string_view, 3> kFieldNames{"dtype", "shape", "data_offsets"};

// Reads exactly the JSON this format allows (RFC 8259, strictly): an object whose values are tensor
// objects {"dtype": string, "shape": [uint, ...], "data_offsets": [uint, uint]}, each field exactly
// once, in any order, or, under the key "__metadata__", an object of strings. nlohmann's parser
// checks the JSON itself (escapes, surrogate pairs, UTF-8, numbers, nothing after the object) and
// hands each token to this handler, which checks it against the schema: duplicate keys at any level
// (which nlohmann would let the last one win), unknown or missing fields, values of the wrong type,
// and numbers that are not non-negative integers within 64 bits are errors.
class HeaderReader final : public io::JsonSchemaReader {
 public:
  Header take() { return std::move(header_); }

 private:
  // What encloses the next token.
  enum class Place { start, header, metadata, tensor, array, done };

  std::string where() const override {
    switch (place_) {
      case Place::start: return "at the start of the header, which must be a JSON object";
      case Place::header:
        if (!pending_) return "reading a key of the header (a tensor name or '__metadata__')";
        return "reading the value of " + (in_metadata_ ? std::string("'__metadata__'") : tensor_label(key_));
      case Place::metadata:
        return pending_ ? "reading the '__metadata__' value of " + quoted_name(key_) : "reading a key in '__metadata__'";
      case Place::tensor:
        if (!pending_) return "reading a field name of " + tensor_label(entry_.name);
        [[fallthrough]];
      case Place::array: return "reading " + field_label();
      case Place::done: return "unexpected text after the header object";
    }
    return {};
  }

  // ---- the schema, event by event ----

  bool start_object(std::size_t) override {
    if (place_ == Place::start) return enter(Place::header);
    if (place_ != Place::header) return wrong_type("an object");
    if (in_metadata_) return enter(Place::metadata);
    entry_ = TensorEntry();
    entry_.name = key_;
    seen_ = {};
    return enter(Place::tensor);
  }

  bool key(string_t& key) override {
    pending_ = true;
    switch (place_) {
      case Place::header:
        if (!keys_.insert(key).second) return reject("the header has a duplicate key " + quoted_name(key));
        in_metadata_ = key == kMetadataKey;
        // The writer refuses an empty name, so a file with one could be read but not written back.
        if (key.empty()) return reject("a tensor name is empty");
        key_ = std::move(key);
        return true;
      case Place::metadata:
        if (header_.metadata.count(key) != 0) return reject("'__metadata__' has a duplicate key " + quoted_name(key));
        key_ = std::move(key);
        return true;
      default: return field_named(key);  // Place::tensor: nlohmann calls key() only inside an object
    }
  }

  bool field_named(const std::string& name) {
    const auto* found = std::find(kFieldNames.begin(), kFieldNames.end(), name);
    const std::string who = tensor_label(entry_.name);
    if (found == kFieldNames.end()) {
      return reject(who + " has an unknown field " + quoted_name(name) + " (expected 'dtype', 'shape' and 'data_offsets')");
    }
    field_ = static_cast<Field>(found - kFieldNames.begin());
    if (seen_[static_cast<std::size_t>(field_)]) return reject(who + " has a duplicate field " + quoted_name(name));
    seen_[static_cast<std::size_t>(field_)] = true;
    return true;
  }

  bool string(string_t& value) override {
    if (place_ == Place::metadata) {
      header_.metadata.emplace(std::move(key_), std::move(value));
      return value_done();
    }
    if (place_ != Place::tensor || field_ != Field::dtype) return wrong_type("a string");
    const std::optional<DType> dtype = dtype_from_string(value);
    if (!dtype) return reject(unknown_dtype(tensor_label(entry_.name), value));
    entry_.dtype = *dtype;
    return value_done();
  }

  bool start_array(std::size_t) override {
    if (place_ != Place::tensor || field_ == Field::dtype) return wrong_type("an array");
    offsets_ = 0;
    return enter(Place::array);
  }

  bool number_unsigned(number_unsigned_t value) override {
    if (place_ != Place::array) return wrong_type("the number " + in_quotes(std::to_string(value)));
    // nlohmann reads "01" as 0 then 1 and would complain only of a missing ','. It has read one byte
    // past the number (the "1") unless the text ended.
    const std::size_t at = position();
    if (value == 0 && at >= 2 && text()[at - 2] == '0' && text()[at - 1] >= '0' && text()[at - 1] <= '9') {
      return malformed("a JSON number cannot have a leading zero");
    }
    if (field_ == Field::shape) {
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return reject(tensor_label(entry_.name) + ": shape entry " + std::to_string(value) + " overflows 64-bit signed sizes");
      }
      entry_.shape.push_back(static_cast<std::int64_t>(value));
      return true;
    }
    // Counted past two, so that the message says how many there are, but not kept.
    if (offsets_ < 2) (offsets_ == 0 ? entry_.begin : entry_.end) = value;
    ++offsets_;
    return true;
  }

  // nlohmann calls this only for integers written with a '-', "-0" included.
  bool number_integer(number_integer_t value) override {
    return not_an_entry(value == 0 ? "-0" : std::to_string(value));
  }

  // Fractions, exponents, and integers beyond 64 bits, as written.
  bool number_float(number_float_t, const string_t& text) override {
    if (place_ == Place::array && text.find_first_not_of("0123456789") == std::string::npos) {
      return reject(field_label_short() + " entry " + in_quotes(text) + " overflows 64 bits");
    }
    return not_an_entry(text);
  }

  bool boolean(bool value) override { return wrong_type(value ? "true" : "false"); }
  bool null() override { return wrong_type("null"); }

  bool end_array() override {  // of a shape or data_offsets: nlohmann calls it only for an array begun
    place_ = Place::tensor;
    if (field_ == Field::data_offsets && offsets_ != 2) {
      return reject(tensor_label(entry_.name) + ": 'data_offsets' must hold two integers [begin, end], not " +
                    std::to_string(offsets_));
    }
    return value_done();
  }

  bool end_object() override {
    switch (place_) {
      case Place::header: place_ = Place::done; return true;
      case Place::metadata: place_ = Place::header; return value_done();
      default: break;  // Place::tensor
    }
    for (std::size_t k = 0; k < kFieldNames.size(); ++k) {
      if (!seen_[k]) {
        return reject(tensor_label(entry_.name) + " has no '" + std::string(kFieldNames[k]) + "' field");
      }
    }
    header_.tensors.push_back(std::move(entry_));
    place_ = Place::header;
    return value_done();
  }

  // ---- helpers ----

  bool enter(Place place) {
    place_ = place;
    pending_ = false;
    return true;
  }

  bool value_done() {
    pending_ = false;
    return true;
  }

  static std::string quoted_name(std::string_view name) { return in_quotes(name, kMaxQuotedName); }

  std::string field_label() const {
    return "the field '" + std::string(kFieldNames[static_cast<std::size_t>(field_)]) + "' of " + tensor_label(entry_.name);
  }
  std::string field_label_short() const {  // as the messages have always put it: tensor 'w': 'shape'
    return tensor_label(entry_.name) + ": '" + std::string(kFieldNames[static_cast<std::size_t>(field_)]) + "'";
  }

  // A negative or fractional number, `text` as written.
  bool not_an_entry(const std::string& text) {
    if (place_ != Place::array) return wrong_type("the number " + in_quotes(text));
    return reject(field_label_short() + " entries must be non-negative integers, not " + in_quotes(text));
  }

  // A value of the wrong type where the schema wants another: `got` names it ("an array").
  bool wrong_type(const std::string& got) {
    switch (place_) {
      case Place::start: return malformed("expected '{', not " + got);
      case Place::header:
        if (in_metadata_) return reject("'__metadata__' must be an object of strings, not " + got);
        return reject(tensor_label(key_) + " must be an object with 'dtype', 'shape' and 'data_offsets', not " + got);
      case Place::metadata: return reject("'__metadata__' value of " + quoted_name(key_) + " must be a string, not " + got);
      case Place::array: return reject(field_label_short() + " entries must be non-negative integers, not " + got);
      default: break;  // Place::tensor; Place::done has no value
    }
    const bool is_dtype = field_ == Field::dtype;
    return reject(field_label_short() + " must be " + (is_dtype ? "a string" : "an array of non-negative integers") +
                  ", not " + got);
  }

  Header header_;
  Place place_ = Place::start;
  bool pending_ = false;      // a key is read and its value is not
  bool in_metadata_ = false;  // the key read in the header is "__metadata__"
  std::string key_;           // the header's key being read, or the metadata key
  std::unordered_set<std::string> keys_;  // the header's keys so far
  TensorEntry entry_;         // the tensor being read
  std::array<bool, kFieldNames.size()> seen_{};
  Field field_ = Field::dtype;  // the field being read
  std::size_t offsets_ = 0;     // data_offsets entries so far
};

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

// The tensor's storage; an allocation failure names the file and the tensor.
Tensor allocate(const TensorEntry& e, const std::string& source) {
  try {
    return Tensor(e.dtype, e.shape);
  } catch (const Error& error) {
    fail(error.code(), source, tensor_label(e.name) + ": " + error.what());
  }
}

template <class Input>
SafetensorsFile read_from(Input& in, const std::string& source) {
  std::string text(read_header_length(in, source), '\0');
  in.read(text.data(), text.size(), "header");
  HeaderReader reader;
  reader.read(text, source);
  Header header = reader.take();
  check_layout(header, in.remaining(), source);  // before allocating anything the header claims

  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (TensorEntry& e : header.tensors) {  // in offset order: the data buffer is read front to back
    Tensor tensor = allocate(e, source);
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
