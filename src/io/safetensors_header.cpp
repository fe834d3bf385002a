#include "io/safetensors_header.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "io/file_common.hpp"
#include "io/json.hpp"

namespace attnkit::io {
namespace {

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

// ---- the schema ----

enum class Field { dtype, shape, data_offsets };
constexpr std::array<std::string_view, 3> kFieldNames{"dtype", "shape", "data_offsets"};

// Reads exactly the JSON this format allows (RFC 8259, strictly): an object whose values are tensor
// objects {"dtype": string, "shape": [uint, ...], "data_offsets": [uint, uint]}, each field exactly
// once, in any order, or, under the key "__metadata__", an object of strings. nlohmann's parser
// checks the JSON itself (escapes, surrogate pairs, UTF-8, numbers, nothing after the object) and
// hands each token to this handler, which checks it against the schema: duplicate keys at any level
// (which nlohmann would let the last one win), unknown or missing fields, values of the wrong type,
// and numbers that are not non-negative integers within 64 bits are errors.
class HeaderReader final : public JsonSchemaReader {
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

}  // namespace

std::string tensor_label(std::string_view name) { return "tensor " + in_quotes(name, kMaxQuotedName); }

std::string_view dtype_string(DType dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

Header read_header(std::string_view json, const std::string& source) {
  HeaderReader reader;
  reader.read(json, source);
  return reader.take();
}

}  // namespace attnkit::io
