// NumPy .npy reading and writing (format versions 1.0, 2.0 and 3.0).
//
// A .npy file is (numpy/lib/format.py):
//   "\x93NUMPY" | major | minor | header length (uint16 LE in 1.0, uint32 LE in 2.0 and 3.0)
//   | header: a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//     padded with spaces and ending in '\n'
//   | the elements, raw, in C order.
// The reader trusts nothing: every length is checked against the file size before anything is
// allocated, and the header is parsed by a small strict parser rather than evaluated.
#include "attnkit/npy.hpp"
#include "attnkit/quantized.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "attnkit/error.hpp"
#include "io/file_common.hpp"
#include "io/output_file.hpp"

namespace attnkit {

namespace {

using io::errno_text, io::fail, io::FilePtr, io::format_fail, io::in_quotes, io::InputFile, io::MemoryInput,
    io::normalize_bools, io::OutputFile, io::printable;

// Elements are copied byte for byte between memory and little-endian files; a big-endian host would
// need byte swapping, which this file does not implement.
static_assert(std::endian::native == std::endian::little, "npy.cpp assumes a little-endian host");

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr std::string_view kZipMagic{"PK\x03\x04", 4};  // a .npz is a zip archive of .npy files
constexpr std::size_t kVersionBytes = 2;                // major, minor
constexpr std::size_t kV1LengthBytes = 2;               // uint16 header length (format 1.0)
constexpr std::size_t kV2LengthBytes = 4;               // uint32 header length (formats 2.0 and 3.0)
constexpr std::uint64_t kMaxV1HeaderLength = std::numeric_limits<std::uint16_t>::max();
// numpy writes headers of well under 1 kB for any plain array; a longer one is corrupt or hostile.
// Also far below 2^32, so a header that passes fits the uint32 length field of format 2.0.
constexpr std::uint64_t kMaxHeaderLength = std::uint64_t{1} << 20;
constexpr std::size_t kHeaderAlignment = 64;      // numpy's ARRAY_ALIGN: data starts 64-byte aligned
constexpr std::size_t kGrowthAxisMaxDigits = 21;  // numpy >= 1.24 leaves room to rewrite shape[0] in place

// ---- error messages ----

// A shape as Python prints a tuple: "()", "(5,)", "(2, 3)". numpy writes exactly this.
std::string shape_repr(std::span<const std::int64_t> shape) {
  std::string out = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  if (shape.size() == 1) out += ',';
  return out + ")";
}

// ---- dtypes ----

// The type codes this library reads, after the byte-order character.
struct TypeCode {
  std::string_view code;
  DType dtype;
};
constexpr std::array<TypeCode, 6> kTypeCodes{{{"f2", DType::f16},
                                              {"f4", DType::f32},
                                              {"f8", DType::f64},
                                              {"b1", DType::boolean},
                                              {"i4", DType::i32},
                                              {"i8", DType::i64}}};
constexpr std::string_view kSupportedDescrs = "'<f2', '<f4', '<f8', '|b1', '<i4', '<i8'";

// The descr numpy writes for each dtype; bf16 has no numpy type and is stored as float32.
std::string_view descr_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return "<f8";
    case DType::f32: case DType::bf16: return "<f4";
    case DType::f16: return "<f2";
    case DType::boolean: return "|b1";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::int8: case DType::int4: case DType::fp8_e4m3: case DType::fp8_e5m2: break;  // row formats (write_source refuses them)
  }
  return "?";
}

DType file_dtype_of(DType dtype) { return dtype == DType::bf16 ? DType::f32 : dtype; }

// Maps a descr string to a DType. Byte order: '<' is required for multi-byte types. '>' is
// big-endian. '=' (native) and '|' (not applicable) are rejected for multi-byte types: numpy never
// writes them there, and '=' names the byte order of whichever machine wrote the file, which the
// file does not record. One-byte types (bool) take any byte-order character.
DType dtype_from_descr(const std::string& descr, const std::string& path) {
  const bool has_order = !descr.empty() && std::string_view("<>|=").find(descr[0]) != std::string_view::npos;
  const char order = has_order ? descr[0] : '\0';
  const std::string_view code = std::string_view(descr).substr(has_order ? 1 : 0);
  if (!code.empty() && code[0] == 'O') {
    format_fail(path, "object arrays (" + in_quotes(descr) + ") are not supported: they hold pickled Python objects");
  }
  const auto* found = std::find_if(kTypeCodes.begin(), kTypeCodes.end(),
                                   [&](const TypeCode& t) { return t.code == code; });
  if (found == kTypeCodes.end() || !has_order) {
    format_fail(path, "unsupported dtype " + in_quotes(descr) + " (supported: " + std::string(kSupportedDescrs) + ")");
  }
  if (dtype_size(found->dtype) == 1 || order == '<') return found->dtype;
  const std::string little = "<" + std::string(code);
  if (order == '>') {
    format_fail(path, "big-endian data (" + in_quotes(descr) + ") is not supported; convert with arr.astype('" +
                          little + "')");
  }
  format_fail(path, "byte order " + in_quotes(descr) + " is not explicitly little-endian; numpy writes '" + little +
                        "'");
}

// ---- reading: the file ----

// `Input` is io::InputFile or io::MemoryInput: a file is read as it streams, never copied whole.
template <class Input>
void read_magic(Input& in, const std::string& path) {
  std::array<char, kMagic.size()> bytes{};
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kMagic.size(), in.remaining()));
  in.read(bytes.data(), n, "magic string");
  const std::string_view got(bytes.data(), n);
  if (got != kMagic.substr(0, n)) {
    const bool zip = got.substr(0, kZipMagic.size()) == kZipMagic;
    format_fail(path, "not a .npy file: it does not start with the magic string \\x93NUMPY" +
                          std::string(zip ? " (it looks like a .npz zip archive; extract the .npy inside)" : ""));
  }
  if (n < kMagic.size()) {
    format_fail(path, "file is truncated in the magic string (" + std::to_string(n) + " bytes)");
  }
}

// Returns the major version: 1, 2 or 3.
template <class Input>
int read_version(Input& in, const std::string& path) {
  std::array<unsigned char, kVersionBytes> version{};
  in.read(version.data(), version.size(), "format version");
  const int major = version[0], minor = version[1];
  if (major < 1 || major > 3 || minor != 0) {
    format_fail(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                          " (supported: 1.0, 2.0 and 3.0)");
  }
  return major;
}

template <class Input>
std::uint64_t read_header_length(Input& in, int major, const std::string& path) {
  std::array<unsigned char, kV2LengthBytes> bytes{};
  const std::size_t width = major == 1 ? kV1LengthBytes : kV2LengthBytes;
  in.read(bytes.data(), width, "header length");
  std::uint64_t length = 0;
  for (std::size_t i = width; i-- > 0;) length = (length << 8) | bytes[i];  // little-endian
  if (length > kMaxHeaderLength) {
    format_fail(path, "oversized header: its length field says " + std::to_string(length) +
                          " bytes (the limit is " + std::to_string(kMaxHeaderLength) + ")");
  }
  if (length > in.remaining()) {
    format_fail(path, "file is truncated in the header: its length field says " + std::to_string(length) +
                          " bytes but only " + std::to_string(in.remaining()) + " follow");
  }
  return length;
}

// ---- reading: the header dict ----

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

enum class Key { descr, fortran_order, shape };
constexpr std::array<std::string_view, 3> kKeyNames{"descr", "fortran_order", "shape"};

// Parses exactly the Python literal numpy writes: a dict with the keys 'descr' (a string),
// 'fortran_order' (True or False) and 'shape' (a tuple of non-negative ints), each exactly once, in
// any order; single or double quotes; optional trailing commas; whitespace between tokens; then
// padding and a final '\n'. Anything else is an error. Non-ASCII bytes (a v3 header is UTF-8) can
// only appear inside strings, where they simply fail to name a supported dtype.
class HeaderParser {
 public:
  // `python2_longs`: accept "3L" in the shape, as Python 2 wrote it (numpy accepts it for 1.0 and 2.0).
  HeaderParser(std::string_view text, const std::string& path, bool python2_longs)
      : text_(text), path_(path), python2_longs_(python2_longs) {}

  Header parse() {
    if (text_.empty() || text_.back() != '\n') malformed("the header does not end with a newline");
    expect('{', "at the start of the header dict");
    while (!consume('}')) {
      parse_entry();
      if (!consume(',')) {
        if (!consume('}')) malformed("expected ',' or '}' after a dict entry");
        break;
      }
    }
    skip_whitespace();
    if (pos_ != text_.size()) malformed("unexpected text after the header dict");
    for (std::size_t k = 0; k < kKeyNames.size(); ++k) {
      if (!seen_[k]) format_fail(path_, "the header is missing the key '" + std::string(kKeyNames[k]) + "'");
    }
    return header_;
  }

 private:
  [[noreturn]] void malformed(const std::string& problem) const {
    format_fail(path_, "malformed header at byte " + std::to_string(pos_) + ": " + problem + " (header text: " +
                           in_quotes(text_.substr(pos_)) + ")");
  }

  void skip_whitespace() {
    while (pos_ < text_.size() && std::string_view(" \t\r\n\f").find(text_[pos_]) != std::string_view::npos) ++pos_;
  }
  char peek() {
    skip_whitespace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const std::string& where) {
    if (!consume(c)) malformed(std::string("expected '") + c + "' " + where);
  }

  void parse_entry() {
    const std::string name = parse_string("a quoted key");
    const auto* found = std::find(kKeyNames.begin(), kKeyNames.end(), name);
    if (found == kKeyNames.end()) {
      format_fail(path_, "the header has an unknown key " + in_quotes(name) +
                             " (expected 'descr', 'fortran_order' and 'shape')");
    }
    const auto key = static_cast<std::size_t>(found - kKeyNames.begin());
    if (seen_[key]) format_fail(path_, "the header has a duplicate key " + in_quotes(name));
    seen_[key] = true;
    expect(':', "after the key " + in_quotes(name));
    switch (static_cast<Key>(key)) {
      case Key::descr: header_.descr = parse_descr(); break;
      case Key::fortran_order: header_.fortran_order = parse_bool(); break;
      case Key::shape: header_.shape = parse_shape(); break;
    }
  }

  // A string literal without escapes (numpy's descr strings never need one).
  std::string parse_string(const std::string& what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') malformed("expected " + what);
    const std::size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') malformed("escape sequences in strings are not supported");
      if (text_[pos_] == '\n') break;
      ++pos_;
    }
    if (pos_ >= text_.size() || text_[pos_] != quote) malformed("unterminated string");
    return std::string(text_.substr(start, pos_++ - start));
  }

  std::string parse_descr() {
    const char c = peek();
    if (c == '[' || c == '(') {
      format_fail(path_, "structured or sub-array dtypes (a list or tuple 'descr') are not supported");
    }
    return parse_string("a dtype string for 'descr'");
  }

  bool parse_bool() {
    skip_whitespace();
    const std::size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    const std::string_view word = text_.substr(start, pos_ - start);
    if (word == "True") return true;
    if (word == "False") return false;
    pos_ = start;
    malformed("'fortran_order' must be True or False");
  }

  // "()", "(5,)", "(2, 3)", "(2, 3,)". "(5)" is not a tuple in Python, so it is rejected.
  std::vector<std::int64_t> parse_shape() {
    expect('(', "to start the 'shape' tuple");
    std::vector<std::int64_t> shape;
    bool trailing_comma = false;
    while (!consume(')')) {
      shape.push_back(parse_dim());
      trailing_comma = consume(',');
      if (!trailing_comma) {
        if (!consume(')')) malformed("expected ',' or ')' in the 'shape' tuple");
        break;
      }
    }
    if (shape.size() == 1 && !trailing_comma) {
      format_fail(path_, "'shape' (" + std::to_string(shape[0]) + ") is not a tuple; a 1-D shape is written (" +
                             std::to_string(shape[0]) + ",)");
    }
    return shape;
  }

  std::int64_t parse_dim() {
    const char c = peek();
    const std::string_view rest = text_.substr(pos_);
    const std::string_view token = rest.substr(0, rest.find_first_of(",) \t\r\n\f"));
    if (c == '-') format_fail(path_, "negative shape entry " + in_quotes(token));
    if (c < '0' || c > '9') format_fail(path_, "shape entries must be non-negative integers, not " + in_quotes(token));
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    std::int64_t value = 0;
    for (; pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; ++pos_) {
      const int digit = text_[pos_] - '0';
      if (value > (kMax - digit) / 10) format_fail(path_, "shape entry " + in_quotes(token) + " overflows 64 bits");
      value = value * 10 + digit;
    }
    if (python2_longs_ && pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    // "2.5", "1e3", "0x10", "1_000": Python numbers that are not plain non-negative ints.
    if (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
                                text_[pos_] == '_')) {
      format_fail(path_, "shape entries must be non-negative integers, not " + in_quotes(token));
    }
    return value;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  const std::string& path_;
  bool python2_longs_;
  Header header_;
  std::array<bool, kKeyNames.size()> seen_{};
};

// The data size in bytes, or an error if the element or byte count does not fit in 64 bits. Sizes of
// 0 are left out of the product checked, as numpy does: (0, 2**40, 2**40) holds no element, but its
// strides do not fit in 64 bits and no view could describe it, so it is rejected like (2**40, 2**40, 0).
// The writer calls it too, with `code` size_overflow, so as never to write what the reader refuses.
std::uint64_t data_bytes(const std::vector<std::int64_t>& shape, DType dtype, const std::string& path,
                         ErrorCode code = ErrorCode::format_error) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t count = 1;  // of the non-zero sizes
  bool empty = false;
  for (std::int64_t s : shape) {
    if (s == 0) {
      empty = true;
      continue;
    }
    if (count > kMax / s) fail(code, path, "the element count of shape " + shape_repr(shape) + " overflows 64 bits");
    count *= s;
  }
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  if (count > kMax / size) {
    fail(code, path, "the byte count of shape " + shape_repr(shape) + " with " + std::to_string(size) +
                         "-byte elements overflows 64 bits");
  }
  return empty ? 0 : static_cast<std::uint64_t>(count * size);
}

// The data must fill the rest of the file exactly. Extra bytes are rejected rather than ignored:
// they mean a corrupt file or a writer that disagrees with us about the layout.
void check_data_size(std::uint64_t needed, std::uint64_t available, const Header& header, const std::string& path) {
  const std::string what = "shape " + shape_repr(header.shape) + " of " + in_quotes(header.descr) + " needs " +
                           std::to_string(needed) + " bytes of data";
  if (available < needed) {
    format_fail(path, "file is truncated in the data: " + what + " but only " + std::to_string(available) + " follow");
  }
  if (available > needed) {
    format_fail(path, std::to_string(available - needed) + " unexpected trailing bytes after the data (" + what + ")");
  }
}

// ---- reading: the whole file ----

// The whole file: magic, version, header, then the data, which must fill the rest exactly.
template <class Input>
Tensor read_from(Input& in, const std::string& path) {
  read_magic(in, path);
  const int major = read_version(in, path);
  std::string text(read_header_length(in, major, path), '\0');
  in.read(text.data(), text.size(), "header");
  const Header header = HeaderParser(text, path, /*python2_longs=*/major < 3).parse();

  const DType dtype = dtype_from_descr(header.descr, path);
  if (header.fortran_order) {
    format_fail(path, "Fortran-order arrays (fortran_order: True) are not supported; save np.ascontiguousarray(arr)");
  }
  const std::uint64_t nbytes = data_bytes(header.shape, dtype, path);
  check_data_size(nbytes, in.remaining(), header, path);  // before allocating anything the file claims

  Tensor tensor = io::allocate_for(path, "data", dtype, header.shape);  // out of memory names the file
  in.read(tensor.raw(), static_cast<std::size_t>(nbytes), "data");
  if (dtype == DType::boolean) normalize_bools(tensor);
  return tensor;
}

// ---- writing ----

// The header dict exactly as numpy 2 writes it (keys sorted, trailing ", ", growth spaces).
std::string header_dict(DType file_dtype, std::span<const std::int64_t> shape) {
  std::string dict = "{'descr': '" + std::string(descr_of(file_dtype)) + "', 'fortran_order': False, 'shape': " +
                     shape_repr(shape) + ", }";
  if (!shape.empty()) dict.append(kGrowthAxisMaxDigits - std::to_string(shape[0]).size(), ' ');
  return dict;
}

// numpy's _wrap_header: the length counts the dict, 1 to 64 spaces and '\n', so that the data
// starts on a 64-byte boundary.
std::uint64_t padded_header_length(std::size_t dict_size, std::size_t length_bytes) {
  const std::size_t unpadded = kMagic.size() + kVersionBytes + length_bytes + dict_size + 1;  // 1: '\n'
  return dict_size + (kHeaderAlignment - unpadded % kHeaderAlignment) + 1;
}

// Magic, version, length, dict, padding and '\n'. Version 1.0 unless the length needs 32 bits.
std::string wrap_header(const std::string& dict, std::size_t rank, const std::string& path) {
  const bool v1 = padded_header_length(dict.size(), kV1LengthBytes) <= kMaxV1HeaderLength;
  const std::size_t length_bytes = v1 ? kV1LengthBytes : kV2LengthBytes;
  const std::uint64_t length = padded_header_length(dict.size(), length_bytes);
  if (length > kMaxHeaderLength) {  // never write what read_npy would refuse
    fail(ErrorCode::invalid_shape, path, "a tensor of rank " + std::to_string(rank) + " needs a header of " +
                                             std::to_string(length) + " bytes, over the limit of " +
                                             std::to_string(kMaxHeaderLength));
  }
  std::string out(kMagic);
  out += static_cast<char>(v1 ? 1 : 2);
  out += '\0';  // minor version
  for (std::size_t i = 0; i < length_bytes; ++i) out += static_cast<char>((length >> (8 * i)) & 0xFF);
  out += dict;
  out.append(length - dict.size() - 1, ' ');
  return out + '\n';
}

void write_source(const std::string& path, const io::StridedElements& src) {
  if (is_quantized(src.dtype)) {
    fail(ErrorCode::invalid_dtype, path, "cannot write dtype " + std::string(dtype_name(src.dtype)) +
                                             ": it is a KV cache's quantized row format, not an element type");
  }
  data_bytes(src.sizes, file_dtype_of(src.dtype), path, ErrorCode::size_overflow);  // what read_npy would refuse
  const std::string header = wrap_header(header_dict(file_dtype_of(src.dtype), src.sizes), src.sizes.size(), path);
  OutputFile out(path);  // all or nothing: a failed write leaves the target as it was
  out.write(header.data(), header.size());
  io::write_elements(out, src, file_dtype_of(src.dtype));  // bf16 widened to f32, as numpy has no bf16
  out.commit();
}

// A view's sizes must be non-negative with a product that fits in 64 bits, and its data non-null
// when it has elements: otherwise there is nothing sensible to write.
void check_view(ConstTensorView view, const std::string& path) {
  std::int64_t count = 1;
  for (int d = 0; d < view.rank(); ++d) {
    const std::int64_t s = view.size(d);
    if (s < 0) fail(ErrorCode::invalid_shape, path, "cannot write a view of shape " + view.shape_string() +
                                                    ": negative size");
    if (s != 0 && count > std::numeric_limits<std::int64_t>::max() / s) {
      fail(ErrorCode::size_overflow, path, "cannot write a view of shape " + view.shape_string() +
                                               ": the element count overflows 64 bits");
    }
    count *= s;
  }
  if (count > 0 && view.data() == nullptr) {
    fail(ErrorCode::null_pointer, path, "cannot write a view of shape " + view.shape_string() +
                                            " with a null data pointer");
  }
}

}  // namespace

Tensor read_npy(const std::string& path) {
  InputFile in(path);
  return read_from(in, path);
}

Tensor parse_npy(std::span<const std::byte> bytes, const std::string& source_name) {
  MemoryInput in(bytes, source_name);
  return read_from(in, source_name);
}

void write_npy(const std::string& path, const Tensor& tensor) {
  // A default-constructed Tensor has rank 0 but no element; a .npy of shape () needs one.
  if (tensor.raw() == nullptr) {
    fail(ErrorCode::invalid_argument, path, "cannot write a default-constructed (empty) Tensor");
  }
  const io::StridedElements src{static_cast<const std::byte*>(tensor.raw()), tensor.dtype(), tensor.shape(),
                          io::c_order_strides(tensor.shape())};
  write_source(path, src);
}

void write_npy(const std::string& path, ConstTensorView view) {
  check_view(view, path);
  const auto rank = static_cast<std::size_t>(view.rank());
  const io::StridedElements src{static_cast<const std::byte*>(view.data()), view.dtype(),
                          std::vector<std::int64_t>(view.sizes().begin(), view.sizes().begin() + rank),
                          std::vector<std::int64_t>(view.strides().begin(), view.strides().begin() + rank)};
  write_source(path, src);
}

}  // namespace attnkit
