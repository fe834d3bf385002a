// Tests for .safetensors reading and writing: round trips of every dtype and rank, strided views and
// metadata; the exact bytes the reference writer produces; hand-built files read byte by byte; one
// test per kind of malformed file, each checking the error code and that the message names the file,
// the problem and the tensor; writer errors; and a seeded mutation fuzz loop over the reader.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "attnkit/safetensors.hpp"
#include "attnkit/tensor.hpp"
#include "support/scratch_dir.hpp"
#include "support/testing.hpp"

namespace {

namespace fs = std::filesystem;
using attnkit::ConstTensorView;
using attnkit::DType;
using attnkit::Error;
using attnkit::ErrorCode;
using attnkit::SafetensorsFile;
using attnkit::Tensor;
using attnkit::parse_safetensors;
using attnkit::read_safetensors;
using attnkit::write_safetensors;
using attnkit::testing::ScratchDir;
using Named = std::vector<std::pair<std::string, ConstTensorView>>;
using namespace std::literals;

constexpr std::size_t kHeaderAlignment = 8;

// Under AddressSanitizer (GCC defines __SANITIZE_ADDRESS__, clang has the feature test) the slowest
// tests do less.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// ---- files ----


void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::span<const std::byte> as_bytes(std::string_view bytes) {
  return {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()};
}

// ---- building .safetensors bytes by hand ----

std::string le64(std::uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

// A file whose header is exactly `header` (no padding added).
std::string file_of(std::string_view header, std::string_view data = {}) {
  return le64(header.size()) + std::string(header) + std::string(data);
}

// `header` padded with spaces to a multiple of 8 bytes, as writers do.
std::string padded(std::string header) {
  header.append((kHeaderAlignment - header.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  return header;
}

// One tensor's entry: "name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}
std::string entry(std::string_view name, std::string_view dtype, std::string_view shape, std::uint64_t begin,
                  std::uint64_t end) {
  return "\"" + std::string(name) + "\":{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":" + std::string(shape) +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// The header object of these entries: {entry,entry,...}
std::string header_of(std::initializer_list<std::string> entries) {
  std::string out = "{";
  for (const std::string& e : entries) out += (out.size() > 1 ? "," : "") + e;
  return out + "}";
}

// A header holding one tensor "w" whose info object is `info`, and 24 bytes of data.
std::string with_info(std::string_view info) {
  return file_of("{\"w\":" + std::string(info) + "}", std::string(24, '\0'));
}

// A header holding one tensor "w" of F32 [2, 3] at [0, 24], with `shape` replacing its shape.
std::string with_shape(std::string_view shape) {
  return with_info("{\"dtype\":\"F32\",\"shape\":" + std::string(shape) + ",\"data_offsets\":[0,24]}");
}

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// ---- checking errors ----

::testing::AssertionResult check_error(const Error& e, ErrorCode code, const std::string& source,
                                       std::initializer_list<std::string_view> keywords) {
  const std::string message = e.what();
  if (e.code() != code) {
    return ::testing::AssertionFailure() << "code " << attnkit::error_code_name(e.code()) << ", expected "
                                         << attnkit::error_code_name(code) << ": " << message;
  }
  if (message.find(source) == std::string::npos) {
    return ::testing::AssertionFailure() << "message does not name " << source << ": " << message;
  }
  for (std::string_view keyword : keywords) {
    if (message.find(keyword) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks \"" << keyword << "\": " << message;
    }
  }
  return ::testing::AssertionSuccess() << message;
}

template <class Fn>
::testing::AssertionResult fails_with(Fn&& fn, ErrorCode code, const std::string& source,
                                      std::initializer_list<std::string_view> keywords) {
  try {
    fn();
  } catch (const Error& e) {
    return check_error(e, code, source, keywords);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "not an attnkit::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "no error";
}

// The reader rejects `bytes` as format_error with every keyword, both from memory and from a file.
::testing::AssertionResult rejects(const std::string& bytes, std::initializer_list<std::string_view> keywords) {
  const std::string name = "bad.safetensors";
  auto in_memory =
      fails_with([&] { parse_safetensors(as_bytes(bytes), name); }, ErrorCode::format_error, name, keywords);
  if (!in_memory) return in_memory << " (in memory)";
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file(name);
  write_file(path, bytes);
  auto from_file = fails_with([&] { read_safetensors(path); }, ErrorCode::format_error, path, keywords);
  if (!from_file) return from_file << " (from a file)";
  return in_memory;
}

::testing::AssertionResult rejects(const std::string& bytes, std::string_view keyword) {
  return rejects(bytes, {keyword});
}

// ---- tensors ----

// Fills a tensor with distinct, dtype-appropriate values (including negatives and fractions).
void fill_pattern(Tensor& t, int salt = 0) {
  auto* bytes = static_cast<std::byte*>(t.raw());
  const std::size_t size = attnkit::dtype_size(t.dtype());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::byte* element = bytes + i * static_cast<std::int64_t>(size);
    const std::int64_t k = i + salt;
    switch (t.dtype()) {
      case DType::boolean: *element = std::byte{static_cast<unsigned char>(k % 3 == 0)}; break;
      case DType::i32: {
        const auto v = static_cast<std::int32_t>(k * 7919 - 100000);
        std::memcpy(element, &v, sizeof v);
        break;
      }
      case DType::i64: {
        const std::int64_t v = k * 123456789012LL - (std::int64_t{1} << 40);
        std::memcpy(element, &v, sizeof v);
        break;
      }
      default: attnkit::store_from_double(element, t.dtype(), 0.37 * static_cast<double>(k) - 3.0 + 1e-3); break;
    }
  }
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

::testing::AssertionResult same_files(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.metadata != b.metadata) return ::testing::AssertionFailure() << "metadata differ";
  if (a.tensors.size() != b.tensors.size()) return ::testing::AssertionFailure() << "tensor counts differ";
  for (auto ia = a.tensors.begin(), ib = b.tensors.begin(); ia != a.tensors.end(); ++ia, ++ib) {
    if (ia->first != ib->first) {
      return ::testing::AssertionFailure() << "names differ: " << ia->first << ", " << ib->first;
    }
    if (!same_tensor(ia->second, ib->second)) {
      return ::testing::AssertionFailure() << "tensor " << ia->first << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

// Header length, as the file's first 8 bytes say.
std::uint64_t header_length(const std::string& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<std::size_t>(i)]);
  return n;
}

std::string header_text(const std::string& file) { return file.substr(8, header_length(file)); }

constexpr DType kAllDtypes[] = {DType::f64, DType::f32, DType::f16,    DType::bf16,
                                DType::i64, DType::i32, DType::boolean};

// ============================================================================================
// Round trips
// ============================================================================================

TEST(Safetensors, RoundTripsEveryDtypeAndRanksZeroToFourIncludingEmpty) {
  const std::vector<std::vector<std::int64_t>> shapes = {{},  {1},    {7},    {2, 3},    {3, 1, 4}, {2, 3, 1, 5},
                                                         {0}, {0, 3}, {4, 0}, {2, 0, 3}, {1, 2, 0, 1}};
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("t.safetensors");
  std::vector<Tensor> originals;  // every dtype × shape, all written into one file as well
  for (DType dtype : kAllDtypes) {
    SCOPED_TRACE(std::string(attnkit::dtype_name(dtype)));
    Named named;
    std::vector<Tensor> tensors;
    for (const auto& shape : shapes) {
      tensors.emplace_back(dtype, shape);
      fill_pattern(tensors.back(), static_cast<int>(tensors.size()));
    }
    std::uint64_t data_bytes = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      named.emplace_back("t" + std::to_string(i), tensors[i].view());
      data_bytes += tensors[i].nbytes();
    }
    write_safetensors(path, named);

    const std::string file = read_file(path);
    EXPECT_EQ(header_length(file) % kHeaderAlignment, 0u);
    EXPECT_EQ(file.size(), 8 + header_length(file) + data_bytes);
    for (const SafetensorsFile& loaded : {read_safetensors(path), parse_safetensors(as_bytes(file))}) {
      ASSERT_EQ(loaded.tensors.size(), tensors.size());
      EXPECT_TRUE(loaded.metadata.empty());
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const Tensor& back = loaded.tensors.at("t" + std::to_string(i));
        EXPECT_EQ(back.rank(), static_cast<int>(shapes[i].size()));
        EXPECT_TRUE(same_tensor(back, tensors[i])) << "shape index " << i;
      }
    }
    for (Tensor& t : tensors) originals.push_back(std::move(t));
  }

  Named everything;
  for (std::size_t i = 0; i < originals.size(); ++i) {
    everything.emplace_back("m" + std::to_string(i), originals[i].view());
  }
  write_safetensors(path, everything);
  const SafetensorsFile loaded = read_safetensors(path);
  ASSERT_EQ(loaded.tensors.size(), originals.size());
  for (std::size_t i = 0; i < originals.size(); ++i) {
    EXPECT_TRUE(same_tensor(loaded.tensors.at("m" + std::to_string(i)), originals[i])) << i;
  }
}

TEST(Safetensors, RoundTripKeepsSpecialFloatBits) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("special.safetensors");
  // 16-bit: +0, -0, smallest subnormal, 1 (f16) / 1 + 2^-7 (bf16), max finite, +inf, -inf, NaN with a payload.
  const std::vector<std::uint16_t> half = {0x0000, 0x8000, 0x0001, 0x3C00, 0x7BFF, 0x7C00, 0xFC00, 0x7E01};
  const std::vector<std::uint16_t> brain = {0x0000, 0x8000, 0x0001, 0x3F81, 0x7F7F, 0x7F80, 0xFF80, 0x7FC1};
  const std::vector<std::uint32_t> single = {0x80000000u, 0x00000001u, 0x7F800000u, 0x7FC00123u, 0xFF7FFFFFu};
  const std::vector<std::uint64_t> dbl = {0x8000000000000000u, 0x0000000000000001u, 0x7FF0000000000000u,
                                          0x7FF8000000000123u, 0xFFEFFFFFFFFFFFFFu};
  Tensor t16(DType::f16, {8}), tb16(DType::bf16, {2, 4}), t32(DType::f32, {5}), t64(DType::f64, {5, 1});
  std::memcpy(t16.raw(), half.data(), t16.nbytes());
  std::memcpy(tb16.raw(), brain.data(), tb16.nbytes());
  std::memcpy(t32.raw(), single.data(), t32.nbytes());
  std::memcpy(t64.raw(), dbl.data(), t64.nbytes());
  write_safetensors(path, {{"f16", t16.view()}, {"bf16", tb16.view()}, {"f32", t32.view()}, {"f64", t64.view()}});
  const SafetensorsFile back = read_safetensors(path);
  EXPECT_TRUE(same_tensor(back.tensors.at("f16"), t16));
  EXPECT_TRUE(same_tensor(back.tensors.at("bf16"), tb16));
  EXPECT_TRUE(same_tensor(back.tensors.at("f32"), t32));
  EXPECT_TRUE(same_tensor(back.tensors.at("f64"), t64));
}

TEST(Safetensors, MetadataRoundTripsWithEscapesAndUnicode) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("meta.safetensors");
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"quote\"back\\slash", "new\nline\ttab\rcr\bbs\fff"},
      {"control", "\x01\x1f\x7f"s + "\0nul"s},
      {"unicode caf\xc3\xa9", "\xf0\x9f\x98\x80 \xe6\xb3\xa8\xe6\x84\x8f"},  // café; an emoji and CJK
      {"", ""},
  };
  Tensor t(DType::f32, {2});
  fill_pattern(t);
  write_safetensors(path, {{"w", t.view()}}, metadata);

  const std::string header = header_text(read_file(path));
  EXPECT_EQ(header.rfind("{\"__metadata__\":{", 0), 0u) << header;  // first, as the reference writes it
  for (const char* escaped :
       {R"(quote\"back\\slash)", R"(new\nline\ttab\rcr\bbs\fff)", R"(\u0001\u001f)", R"(\u0000nul)"}) {
    EXPECT_NE(header.find(escaped), std::string::npos) << escaped << " in " << header;
  }
  const SafetensorsFile back = read_safetensors(path);
  EXPECT_EQ(back.metadata, metadata);
  EXPECT_TRUE(same_tensor(back.tensors.at("w"), t));
}

TEST(Safetensors, FilesWithoutTensorsOrMetadata) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, Named{});
  EXPECT_EQ(read_file(path), le64(8) + "{}      ");  // the reference writer's bytes for an empty dict
  SafetensorsFile back = read_safetensors(path);
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_TRUE(back.metadata.empty());

  write_safetensors(path, Named{}, {{"framework", "pt"}});
  EXPECT_EQ(read_file(path), le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  back = read_safetensors(path);
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_EQ(back.metadata, (std::map<std::string, std::string>{{"framework", "pt"}}));
}

// The reference implementation's own serialisation tests (safetensors/src/tensor.rs): the same
// tensors give the same bytes, and those bytes read back.
TEST(Safetensors, MatchesTheReferenceWritersBytes) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("ref.safetensors");
  const std::vector<float> values = {0, 1, 2, 3, 4, 5};
  const std::string data = "\x00\x00\x00\x00"s "\x00\x00\x80\x3f"s "\x00\x00\x00\x40"s "\x00\x00\x40\x40"s
                           "\x00\x00\x80\x40"s "\x00\x00\xa0\x40"s;  // 0..5 as little-endian floats

  write_safetensors(path, {{"attn.0", ConstTensorView::contiguous(values.data(), DType::f32, {1, 2, 3})}});
  const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(json.size(), 64u);  // already a multiple of 8: no padding
  EXPECT_EQ(read_file(path), le64(64) + json + data);

  write_safetensors(path, {{"attn0", ConstTensorView::contiguous(values.data(), DType::f32, {1, 1, 2, 3})}});
  const std::string json2 = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  EXPECT_EQ(read_file(path), le64(72) + json2 + "       " + data);  // 65 bytes padded to 72

  const SafetensorsFile back = parse_safetensors(as_bytes(le64(64) + json + data));
  const Tensor& t = back.tensors.at("attn.0");
  EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(std::vector<float>(t.data<float>(), t.data<float>() + 6), values);
}

TEST(Safetensors, WritesTensorsInTheGivenOrderWithConsecutiveOffsets) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("order.safetensors");
  Tensor z(DType::i64, {1}), a(DType::f16, {3}), m(DType::boolean, {2, 1});
  fill_pattern(z);
  fill_pattern(a);
  fill_pattern(m);
  write_safetensors(path, {{"z", z.view()}, {"a", a.view()}, {"m", m.view()}});
  const std::string file = read_file(path);
  EXPECT_EQ(header_text(file),
            padded("{" + entry("z", "I64", "[1]", 0, 8) + "," + entry("a", "F16", "[3]", 8, 14) + "," +
                   entry("m", "BOOL", "[2,1]", 14, 16) + "}"));
  const SafetensorsFile back = parse_safetensors(as_bytes(file));
  std::vector<std::string> names;
  for (const auto& [name, tensor] : back.tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "m", "z"}));  // the map is sorted by name
  EXPECT_TRUE(same_tensor(back.tensors.at("z"), z));
  EXPECT_TRUE(same_tensor(back.tensors.at("a"), a));
  EXPECT_TRUE(same_tensor(back.tensors.at("m"), m));
}

TEST(Safetensors, WritesStridedViewsInLogicalOrder) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("strided.safetensors");
  std::vector<float> buffer(2 * 3 * 4);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i);
  std::vector<std::int64_t> ints(12);
  for (std::size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<std::int64_t>(i) * 10;
  std::vector<std::uint16_t> halves(8);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(0x3F80 + i);
  const unsigned char flags[4] = {0, 2, 255, 1};  // any non-zero byte is true

  const auto permuted = ConstTensorView::contiguous(buffer.data(), DType::f32, {2, 3, 4}).permuted({2, 0, 1});
  write_safetensors(path, {
                              {"permuted", permuted},
                              {"reversed", ConstTensorView(ints.data() + 11, DType::i64, {3, 4}, {-4, -1})},
                              {"broadcast", ConstTensorView(ints.data() + 4, DType::i64, {3, 4}, {0, 1})},
                              {"every_other", ConstTensorView(halves.data(), DType::bf16, {2, 2}, {4, 2})},
                              {"flags", ConstTensorView(flags, DType::boolean, {4}, {1})},
                          });
  const SafetensorsFile back = read_safetensors(path);

  const Tensor& p = back.tensors.at("permuted");
  ASSERT_EQ(p.shape(), (std::vector<std::int64_t>{4, 2, 3}));
  for (std::int64_t k = 0; k < 4; ++k) {
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t j = 0; j < 3; ++j) {
        EXPECT_EQ(p.data<float>()[(k * 2 + i) * 3 + j], *permuted.at<float>({k, i, j}));
      }
    }
  }
  const Tensor& r = back.tensors.at("reversed");
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(r.data<std::int64_t>()[i], (11 - i) * 10);
  const Tensor& b = back.tensors.at("broadcast");
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(b.data<std::int64_t>()[i], (4 + i % 4) * 10);
  const Tensor& e = back.tensors.at("every_other");
  ASSERT_EQ(e.dtype(), DType::bf16);
  const std::vector<std::uint16_t> expected = {0x3F80, 0x3F82, 0x3F84, 0x3F86};
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(e.data<attnkit::bfloat16>()[i].bits, expected[i]);
  const auto* f = static_cast<const unsigned char*>(back.tensors.at("flags").raw());
  EXPECT_EQ(std::vector<int>(f, f + 4), (std::vector<int>{0, 1, 1, 1}));
}

TEST(Safetensors, WholeFileOverloadWritesAnyRankAndRoundTripsExactly) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string first = dir.file("a.safetensors"), second = dir.file("b.safetensors");
  SafetensorsFile file;
  file.tensors.emplace("rank7", Tensor(DType::i32, {2, 1, 2, 1, 2, 1, 3}));
  file.tensors.emplace("rank0", Tensor(DType::f64, {}));
  file.tensors.emplace("empty", Tensor(DType::bf16, {3, 0, 2, 2, 2}));
  for (auto& [name, tensor] : file.tensors) fill_pattern(tensor);
  file.metadata = {{"format", "pt"}, {"step", "1200"}};
  write_safetensors(first, file);
  const SafetensorsFile back = read_safetensors(first);
  EXPECT_TRUE(same_files(back, file));
  write_safetensors(second, back);
  EXPECT_EQ(read_file(first), read_file(second));
}

// ============================================================================================
// Hand-built files the reader accepts
// ============================================================================================

TEST(Safetensors, ReadsAHandBuiltFileByteByByte) {
  // Tensors listed out of offset order, fields in any order, whitespace between tokens, escapes in
  // names and metadata, unaligned data, and header padding of JSON whitespace.
  const std::string header =
      "{ \"b\" : {\"shape\" : [ 2 ], \"dtype\":\"I64\", \"data_offsets\":[8 ,24]} ,\n"
      "  \"__metadata__\": {\"format\":\"pt\", \"k\\u00e9y\": \"\\ud83d\\ude00 \\\" \\\\ \\/ \\b\\f\\n\\r\\t\"},\n"
      "\t\"a\\u0000b\": {\"data_offsets\":[0,8],\"dtype\":\"F16\",\"shape\":[2,2]},\r\n"
      "  \"flags\": {\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[24,27]},\n"
      "  \"scalar\": {\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[27,35]},\n"
      "  \"empty\": {\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[35,35]},\n"
      "  \"caf\xc3\xa9\": {\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[35,39]},\n"
      "  \"bf\": {\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[39,41]},\n"
      "  \"f\": {\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[41,45]}\n"
      "}\n \t  ";
  const std::string data =
      "\x00\x3c" "\x00\xc0" "\x00\x38" "\x00\x7c"s                    // F16 1, -2, 0.5, inf
      "\xff\xff\xff\xff\xff\xff\xff\xff" "\x00\x00\x00\x00\x00\x01\x00\x00"s  // I64 -1, 2^40
      "\x00\x01\x07"s                                                // BOOL false, true, true (7)
      "\x00\x00\x00\x00\x00\x00\x0a\x40"s                            // F64 3.25
      "\xfe\xff\xff\xff"s                                            // I32 -2
      "\xc0\x3f"s                                                    // BF16 1.5
      "\x00\x00\x20\xc1"s;                                           // F32 -10
  const SafetensorsFile file = parse_safetensors(as_bytes(file_of(header, data)));

  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{
                               {"format", "pt"}, {"k\xc3\xa9y", "\xf0\x9f\x98\x80 \" \\ / \b\f\n\r\t"}}));
  ASSERT_EQ(file.tensors.size(), 8u);
  const Tensor& a = file.tensors.at("a\0b"s);
  ASSERT_EQ(a.dtype(), DType::f16);
  EXPECT_EQ(a.shape(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(attnkit::testing::values(a), (std::vector<double>{1, -2, 0.5, std::numeric_limits<double>::infinity()}));
  const Tensor& b = file.tensors.at("b");
  ASSERT_EQ(b.dtype(), DType::i64);
  EXPECT_EQ(std::vector<std::int64_t>(b.data<std::int64_t>(), b.data<std::int64_t>() + 2),
            (std::vector<std::int64_t>{-1, std::int64_t{1} << 40}));
  const auto* flags = static_cast<const unsigned char*>(file.tensors.at("flags").raw());
  EXPECT_EQ(std::vector<int>(flags, flags + 3), (std::vector<int>{0, 1, 1}));
  const Tensor& scalar = file.tensors.at("scalar");
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.data<double>()[0], 3.25);
  EXPECT_EQ(file.tensors.at("empty").shape(), (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(file.tensors.at("empty").dtype(), DType::bf16);
  EXPECT_EQ(file.tensors.at("caf\xc3\xa9").data<std::int32_t>()[0], -2);
  EXPECT_EQ(attnkit::to_float(file.tensors.at("bf").data<attnkit::bfloat16>()[0]), 1.5f);
  EXPECT_EQ(file.tensors.at("f").data<float>()[0], -10.0f);
}

TEST(Safetensors, AcceptsJsonWhitespaceAroundTheHeaderObject) {
  for (const std::string header : {"{}", " {}", "\n\t\r {\n}\n", "{}      ", R"( { "__metadata__" : { } } )"}) {
    const SafetensorsFile file = parse_safetensors(as_bytes(file_of(header)));
    EXPECT_TRUE(file.tensors.empty() && file.metadata.empty()) << header;
  }
}

TEST(Safetensors, ReadsZeroSizeTensorsAtAnyBoundary) {
  // Empty tensors at the start, between two tensors, at the end, and several at one offset.
  const std::string header = "{" + entry("e0", "F32", "[0]", 0, 0) + "," + entry("x", "I32", "[1]", 0, 4) + "," +
                             entry("e1", "F64", "[2,0]", 4, 4) + "," + entry("e2", "BOOL", "[0,0]", 4, 4) + "," +
                             entry("y", "I32", "[1]", 4, 8) + "," + entry("e3", "F16", "[0]", 8, 8) + "}";
  const SafetensorsFile file = parse_safetensors(as_bytes(file_of(padded(header), std::string(8, '\x01'))));
  EXPECT_EQ(file.tensors.size(), 6u);
  EXPECT_EQ(file.tensors.at("y").data<std::int32_t>()[0], 0x01010101);
}

// ============================================================================================
// Malformed files: format_error naming the file, the problem and the tensor
// ============================================================================================

TEST(Safetensors, RejectsFilesShorterThanTheHeaderLength) {
  for (std::size_t n = 0; n < 8; ++n) {
    EXPECT_TRUE(rejects(std::string(n, '\x02'), {"truncated in the header length", "8 bytes needed"})) << n;
  }
}

TEST(Safetensors, RejectsAHeaderLongerThanTheFile) {
  EXPECT_TRUE(rejects(le64(100) + std::string(20, ' '),
                      "truncated in the header: its length field says 100 bytes but only 20 follow"));
  EXPECT_TRUE(rejects(le64(1), "truncated in the header"));
}

TEST(Safetensors, RejectsOversizedHeaders) {
  EXPECT_TRUE(rejects(le64(100'000'001) + "{}", {"oversized header", "100000001", "limit is 100000000"}));
  EXPECT_TRUE(rejects(le64(std::numeric_limits<std::uint64_t>::max()) + "{}",
                      {"oversized header", "18446744073709551615"}));
}

TEST(Safetensors, RejectsEveryTruncatedPrefixOfAValidFile) {
  const std::string header = padded("{" + entry("w", "F32", "[2]", 0, 8) + "}");
  const std::string full = file_of(header, std::string(8, '\x11'));
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::string_view keyword = n < 8                   ? "truncated in the header length"
                                     : n < 8 + header.size() ? "truncated in the header"
                                                             : "out of range";
    EXPECT_TRUE(rejects(full.substr(0, n), keyword)) << n;
  }
}

TEST(Safetensors, RejectsMalformedJson) {
  const std::string w = entry("w", "F32", "[2]", 0, 8);
  const std::pair<std::string, std::vector<std::string_view>> cases[] = {
      {"", {"at the start of the header, which must be a JSON object", "unexpected end of input"}},
      {"   ", {"at the start of the header, which must be a JSON object", "unexpected end of input"}},
      {"[]", {"at the start of the header, which must be a JSON object: expected '{', not an array"}},
      {"\"w\"", {"at the start of the header", "expected '{', not a string"}},
      {"\xef\xbb\xbf{}", {"at the start of the header", "byte-order mark"}},  // nlohmann would skip it
      {"{", {"expected a key"}},
      {"{}x", {"unexpected text after the header object", "'x'"}},
      {"{}}", {"unexpected text after the header object"}},
      {"{}\0\0"s, {"unexpected text after the header object", "NUL", "\\x00"}},  // nlohmann stops at a NUL
      {"{\"w\"\0:1}"s, {"at byte 4", "NUL"}},
      {"{\"w\0\":1}"s, {"at byte 3", "NUL"}},
      {"{" + w + "}garbage", {"unexpected text after"}},
      {"{\"w\"}", {"expected ':'"}},
      {"{\"w\":", {"expected a JSON value"}},
      {"{\"w\" " + w.substr(4), {"expected ':'"}},
      {"{" + w + ",}", {"expected a key"}},
      {"{" + w + " " + entry("v", "F32", "[0]", 8, 8) + "}", {"expected ',' or '}'"}},
      {"{,}", {"expected a key"}},
      {"{'w': 1}", {"expected a key"}},
      {"{w: 1}", {"expected a key"}},
      {"{\"w", {"missing closing quote"}},
      {"{\"w\n\":1}", {"control character U+000A (LF) must be escaped"}},
      {"{\"w\t\":1}", {"control character U+0009 (HT) must be escaped"}},
      {"{\"w\\x\":1}", {"forbidden character after backslash"}},
      {"{\"w\\'\":1}", {"forbidden character after backslash"}},
      {"{\"w\\", {"forbidden character after backslash"}},
      {"{\"w\\u12\":1}", {"must be followed by 4 hex digits"}},
      {"{\"w\\u12g4\":1}", {"must be followed by 4 hex digits"}},
      {"{\"w\\ud800\":1}", {"surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"}},
      {"{\"w\\ud800\\u0041\":1}", {"surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"}},
      {"{\"w\\udbff\\udbff\":1}", {"surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"}},
      {"{\"w\\udc00\":1}", {"surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"}},
      {"{\"w\xff\":1}", {"ill-formed UTF-8"}},
      {"{\"w\xc0\xaf\":1}", {"ill-formed UTF-8"}},          // overlong '/'
      {"{\"w\xed\xa0\x80\":1}", {"ill-formed UTF-8"}},      // a UTF-16 surrogate in UTF-8
      {"{\"w\xe2\x82\":1}", {"ill-formed UTF-8"}},          // a cut sequence
      {"{\"w\xf4\x90\x80\x80\":1}", {"ill-formed UTF-8"}},  // above U+10FFFF
      {"{\"w\x80\":1}", {"ill-formed UTF-8"}},              // a stray continuation byte
      {"{\xef\xbb\xbf\"w\":1}", {"expected a key"}},     // a byte-order mark
      {R"({"w":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", {"leading zero", "the field 'shape' of tensor 'w'"}},
      {R"({"w":{"dtype":"F32","shape":[2,00],"data_offsets":[0,4]}})", {"leading zero"}},
      {R"({"w":{"dtype":"F32","shape":[1.],"data_offsets":[0,4]}})", {"expected digit after '.'"}},
      {R"({"w":{"dtype":"F32","shape":[1e],"data_offsets":[0,4]}})", {"expected '+', '-', or digit after exponent"}},
      {R"({"w":{"dtype":"F32","shape":[-],"data_offsets":[0,4]}})", {"invalid number"}},
      {R"({"w":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", {"number overflow parsing '1e400'"}},
      {R"({"w":{"dtype":"F32","shape":[+1],"data_offsets":[0,4]}})", {"invalid literal", "'+1]"}},
      {R"({"w":{"dtype":"F32","shape":[.5],"data_offsets":[0,4]}})", {"invalid literal"}},
      {R"({"w":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}})", {"invalid literal"}},
      {R"({"w":{"dtype":"F32","shape":[Infinity],"data_offsets":[0,4]}})", {"invalid literal"}},
      {R"({"w":{"dtype":"F32","shape":[1,],"data_offsets":[0,4]}})", {"expected a JSON value"}},
      {R"({"w":{"dtype":"F32","shape":[1 1],"data_offsets":[0,4]}})", {"expected ',' or ']'"}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],}})", {"reading a field name of tensor 'w'", "expected a key"}},
      {R"({"w":{"dtype":"F32" "shape":[1],"data_offsets":[0,4]}})", {"expected ',' or '}'", "tensor 'w'"}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", {"expected ',' or '}'"}},
      {R"({"__metadata__":{"a":tru}})", {"reading the '__metadata__' value of 'a'", "invalid literal"}},
      {R"({"__metadata__":{"a":"b",}})", {"reading a key in '__metadata__'", "expected a key"}},
      {R"({"__metadata__":{"a" "b"}})", {"expected ':'"}},
      {R"({"__metadata__":{"a":"b"})", {"expected ',' or '}'"}},
  };
  for (const auto& [header, keywords] : cases) {
    SCOPED_TRACE(header);
    const std::string bytes = file_of(header, std::string(8, '\0'));
    for (std::string_view keyword : keywords) EXPECT_TRUE(rejects(bytes, {"malformed header JSON", keyword}));
  }
}

TEST(Safetensors, RejectsValuesOfTheWrongType) {
  const std::pair<std::string, std::string_view> cases[] = {
      {R"({"w":"F32"})", "tensor 'w' must be an object with 'dtype', 'shape' and 'data_offsets', not a string"},
      {R"({"w":[1]})", "tensor 'w' must be an object with 'dtype', 'shape' and 'data_offsets', not an array"},
      {R"({"w":7})", "not the number '7'"},
      {R"({"w":null})", "tensor 'w' must be an object with 'dtype', 'shape' and 'data_offsets', not null"},
      {R"({"w":true})", "not true"},
      {R"({"w":{"dtype":32,"shape":[],"data_offsets":[0,4]}})",
       "tensor 'w': 'dtype' must be a string, not the number '32'"},
      {R"({"w":{"dtype":null,"shape":[],"data_offsets":[0,4]}})", "tensor 'w': 'dtype' must be a string, not null"},
      {R"({"w":{"dtype":["F32"],"shape":[],"data_offsets":[0,4]}})", "'dtype' must be a string, not an array"},
      {R"({"w":{"dtype":"F32","shape":"[1]","data_offsets":[0,4]}})",
       "tensor 'w': 'shape' must be an array of non-negative integers, not a string"},
      {R"({"w":{"dtype":"F32","shape":{},"data_offsets":[0,4]}})",
       "'shape' must be an array of non-negative integers, not an object"},
      {R"({"w":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})",
       "'shape' must be an array of non-negative integers, not the number '1'"},
      {R"({"w":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})",
       "tensor 'w': 'shape' entries must be non-negative integers, not an array"},
      {R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})",
       "'shape' entries must be non-negative integers, not a string"},
      {R"({"w":{"dtype":"F32","shape":[false],"data_offsets":[0,4]}})",
       "'shape' entries must be non-negative integers, not false"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":"0,4"}})",
       "tensor 'w': 'data_offsets' must be an array of non-negative integers, not a string"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,null]}})",
       "'data_offsets' entries must be non-negative integers, not null"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"begin":0,"end":4}}})",
       "'data_offsets' must be an array of non-negative integers, not an object"},
      {R"({"__metadata__":["pt"]})", "'__metadata__' must be an object of strings, not an array"},
      {R"({"__metadata__":null})", "'__metadata__' must be an object of strings, not null"},
      {R"({"__metadata__":"pt"})", "'__metadata__' must be an object of strings, not a string"},
      {R"({"__metadata__":{"step":1200}})", "'__metadata__' value of 'step' must be a string, not the number '1200'"},
      {R"({"__metadata__":{"nested":{"a":"b"}}})", "'__metadata__' value of 'nested' must be a string, not an object"},
      {R"({"__metadata__":{"flag":true}})", "'__metadata__' value of 'flag' must be a string, not true"},
  };
  for (const auto& [header, keyword] : cases) {
    EXPECT_TRUE(rejects(file_of(header, std::string(4, '\0')), keyword)) << header;
  }
}

TEST(Safetensors, RejectsMissingFields) {
  EXPECT_TRUE(rejects(with_info(R"({"shape":[2,3],"data_offsets":[0,24]})"), "tensor 'w' has no 'dtype' field"));
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","data_offsets":[0,24]})"), "tensor 'w' has no 'shape' field"));
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[2,3]})"), "tensor 'w' has no 'data_offsets' field"));
  EXPECT_TRUE(rejects(with_info("{}"), "tensor 'w' has no 'dtype' field"));
}

TEST(Safetensors, RejectsUnknownFields) {
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[2,3],"offsets":[0,24]})"),
                      "tensor 'w' has an unknown field 'offsets' (expected 'dtype', 'shape' and 'data_offsets')"));
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24],"order":"C"})"),
                      "tensor 'w' has an unknown field 'order'"));
}

TEST(Safetensors, RejectsNegativeAndNonIntegerSizes) {
  EXPECT_TRUE(rejects(with_shape("[2,-3]"), "tensor 'w': 'shape' entries must be non-negative integers, not '-3'"));
  for (const char* shape : {"[2.5]", "[2,3.0]", "[1e3]", "[1E2]", "[2e+1]", "[-0]", "[0.0]", "[2,-0.5e-3]"}) {
    EXPECT_TRUE(rejects(with_shape(shape), "tensor 'w': 'shape' entries must be non-negative integers, not '"))
        << shape;
  }
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[2,3],"data_offsets":[-4,20]})"),
                      "tensor 'w': 'data_offsets' entries must be non-negative integers, not '-4'"));
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24.0]})"),
                      "'data_offsets' entries must be non-negative integers, not '24.0'"));
}

TEST(Safetensors, RejectsSizesAndOffsetsThatOverflow) {
  EXPECT_TRUE(rejects(with_shape("[18446744073709551616]"), "'shape' entry '18446744073709551616' overflows 64 bits"));
  EXPECT_TRUE(rejects(with_shape("[99999999999999999999999]"), "overflows 64 bits"));
  EXPECT_TRUE(rejects(with_shape("[9223372036854775808]"), "tensor 'w': shape entry 9223372036854775808 overflows"));
  EXPECT_TRUE(rejects(with_shape("[4294967296,4294967296]"),
                      "tensor 'w': the element count of shape [4294967296, 4294967296] overflows 64 bits"));
  EXPECT_TRUE(rejects(with_shape("[4294967296,4294967296,0]"), "element count"));  // a zero size excuses nothing
  EXPECT_TRUE(rejects(with_shape("[2305843009213693952]"),
                      "tensor 'w': the byte count of shape [2305843009213693952] of F32 overflows"));
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,18446744073709551616]})"),
                      "'data_offsets' entry '18446744073709551616' overflows 64 bits"));
  // A huge claimed tensor with a consistent size: fails on the buffer, never reaches the allocator.
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4398046511104]})"),
                      "out of range"));
}

// The .npy reader's rule, which fuzzing found there: a zero size must not excuse the others, or
// [0, 2^32, 2^32] is read as an empty tensor whose strides do not fit in 64 bits.
TEST(Safetensors, RejectsOverflowingSizesBesideAZeroSizeAndNeverWritesThem) {
  EXPECT_TRUE(rejects(with_shape("[0,4294967296,4294967296]"), "tensor 'w': the element count of shape"));
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("x.safetensors");
  const std::int64_t big = std::int64_t{1} << 32;
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, {{"w", ConstTensorView(nullptr, DType::f32, {0, big, big}, {0, 0, 0})}}); },
                         ErrorCode::size_overflow, path, {"tensor 'w' of shape [0, 4294967296, 4294967296]", "element count"}));
  SafetensorsFile file;
  file.tensors.emplace("w", Tensor(DType::f32, {0, big, big}));
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, file); }, ErrorCode::size_overflow, path, {"element count"}));
  EXPECT_TRUE(dir.entries().empty());
}

// A case fuzz/fuzz_safetensors.cpp's round trip found: write_safetensors refuses empty names, so
// read_safetensors refuses a tensor named "" too, and whatever it returns can be written back.
TEST(Safetensors, RejectsAnEmptyTensorNameAsTheWriterDoes) {
  EXPECT_TRUE(rejects(file_of(header_of({entry("", "F32", "[1]", 0, 4)}), std::string(4, '\0')),
                      "a tensor name is empty"));
}

TEST(Safetensors, RejectsDataOffsetsThatAreNotAPair) {
  for (const char* offsets : {"[]", "[0]", "[0,24,48]"}) {
    EXPECT_TRUE(rejects(with_info("{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":" + std::string(offsets) + "}"),
                        "tensor 'w': 'data_offsets' must hold two integers [begin, end], not"))
        << offsets;
  }
}

TEST(Safetensors, RejectsOffsetsOutOfRange) {
  const std::string data(24, '\0');
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "F32", "[2,3]", 4, 28) + "}", data),
                      "tensor 'w': data_offsets [4, 28] are out of range: the data buffer holds only 24 bytes"));
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "F32", "[0]", 25, 25) + "}", data), {"tensor 'w'", "out of range"}));
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "F32", "[1]", 18446744073709551612u, 18446744073709551615u) + "}", data),
                      "out of range"));
}

TEST(Safetensors, RejectsEndBeforeBegin) {
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "F32", "[1]", 8, 4) + "}", std::string(8, '\0')),
                      "tensor 'w': data_offsets [8, 4] end before they begin"));
}

TEST(Safetensors, RejectsASpanThatDoesNotMatchTheShape) {
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "F32", "[2,3]", 0, 20) + "}", std::string(20, '\0')),
                      "tensor 'w': data_offsets [0, 20] span 20 bytes but shape [2, 3] of F32 needs 24"));
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "BF16", "[]", 0, 4) + "}", std::string(4, '\0')),
                      "span 4 bytes but shape [] of BF16 needs 2"));
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "I64", "[3,0]", 0, 8) + "}", std::string(8, '\0')),
                      "shape [3, 0] of I64 needs 0"));
}

TEST(Safetensors, RejectsOverlappingTensors) {
  const std::string data(24, '\0');
  EXPECT_TRUE(rejects(file_of(header_of({entry("a", "F32", "[4]", 0, 16), entry("b", "F32", "[4]", 8, 24)}), data),
                      "tensor 'b' (data_offsets [8, 24]) overlaps tensor 'a' (data_offsets [0, 16])"));
  // Listed in the other order: the message still pairs them by offset.
  EXPECT_TRUE(rejects(file_of(header_of({entry("b", "F32", "[4]", 8, 24), entry("a", "F32", "[4]", 0, 16)}), data),
                      "tensor 'b' (data_offsets [8, 24]) overlaps tensor 'a'"));
  // Two tensors on the same bytes, and an empty tensor inside another (the reference rejects both).
  EXPECT_TRUE(rejects(file_of(header_of({entry("a", "I32", "[6]", 0, 24), entry("b", "F32", "[6]", 0, 24)}), data),
                      "tensor 'b' (data_offsets [0, 24]) overlaps tensor 'a' (data_offsets [0, 24])"));
  EXPECT_TRUE(rejects(file_of(header_of({entry("a", "I32", "[6]", 0, 24), entry("e", "F32", "[0]", 8, 8)}), data),
                      "tensor 'e' (data_offsets [8, 8]) overlaps tensor 'a'"));
}

TEST(Safetensors, RejectsGapsAndUnusedBytes) {
  const std::string data(24, '\0');
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "F32", "[5]", 4, 24) + "}", data),
                      "the data buffer has 4 unused bytes before tensor 'w' (data_offsets [4, 24]): the tensors must "
                      "cover it without gaps"));
  EXPECT_TRUE(rejects(file_of(header_of({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 16, 24)}), data),
                      "8 unused bytes before tensor 'b'"));
  EXPECT_TRUE(rejects(file_of("{" + entry("w", "F32", "[5]", 0, 20) + "}", data),
                      "the data buffer has 4 unused bytes after the last tensor, tensor 'w' (data_offsets [0, 20])"));
  EXPECT_TRUE(rejects(file_of("{}", data), "24 unused bytes after the header, which lists no tensors"));
  EXPECT_TRUE(rejects(file_of(R"({"__metadata__":{"a":"b"}})", "x"), "1 unused bytes"));
}

TEST(Safetensors, RejectsUnknownDtypes) {
  for (const char* dtype : {"F33", "float32", "f32", "", "torch.float32", "F32 "}) {
    EXPECT_TRUE(rejects(with_info("{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":[2,3],\"data_offsets\":[0,24]}"),
                        {"tensor 'w': unknown dtype '" + std::string(dtype) + "'",
                         "supported: F64, F32, F16, BF16, I64, I32, BOOL"}))
        << dtype;
  }
}

TEST(Safetensors, RejectsUnsupportedDtypesByName) {
  for (const char* dtype : {"U8", "I8", "U16", "I16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "C64"}) {
    EXPECT_TRUE(rejects(file_of("{" + entry("layer.0.w", dtype, "[1]", 0, 8) + "}", std::string(8, '\0')),
                        {"tensor 'layer.0.w': unsupported dtype '" + std::string(dtype) + "'", "supported: F64"}))
        << dtype;
  }
}

TEST(Safetensors, RejectsDuplicateKeys) {
  const std::string a = entry("a", "F32", "[1]", 0, 4);
  EXPECT_TRUE(rejects(file_of("{" + a + "," + entry("a", "F32", "[1]", 4, 8) + "}", std::string(8, '\0')),
                      "the header has a duplicate key 'a'"));
  // The same name spelt with an escape is the same key.
  EXPECT_TRUE(rejects(file_of("{" + a + "," + entry("\\u0061", "F32", "[1]", 4, 8) + "}", std::string(8, '\0')),
                      "duplicate key 'a'"));
  EXPECT_TRUE(rejects(file_of(R"({"__metadata__":{},"__metadata__":{}})"),
                      "the header has a duplicate key '__metadata__'"));
  EXPECT_TRUE(rejects(file_of(R"({"__metadata__":{"k":"1","k":"2"}})"), "'__metadata__' has a duplicate key 'k'"));
  EXPECT_TRUE(rejects(with_info(R"({"dtype":"F32","shape":[2,3],"dtype":"F32","data_offsets":[0,24]})"),
                      "tensor 'w' has a duplicate field 'dtype'"));
}

TEST(Safetensors, MessagesQuoteNamesSafely) {
  // A name with control and non-ASCII bytes is printed escaped; a long one is cut short.
  EXPECT_TRUE(rejects(file_of("{\"a\\u0001\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "x"),
                      "tensor 'a\\x01\\xc3\\xa9': unsupported dtype 'U8'"));
  const std::string long_name(1000, 'n');
  EXPECT_TRUE(rejects(file_of("{" + entry(long_name, "X", "[1]", 0, 1) + "}", "x"),
                      "tensor '" + std::string(200, 'n') + "...': unknown dtype 'X'"));
}

// ============================================================================================
// I/O errors and invalid writes
// ============================================================================================

TEST(Safetensors, ReadReportsMissingFilesAndDirectoriesAsIoErrors) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string absent = dir.file("absent.safetensors");
  EXPECT_TRUE(fails_with([&] { read_safetensors(absent); }, ErrorCode::io_error, absent, {"cannot open"}));
  EXPECT_TRUE(fails_with([&] { read_safetensors(dir.path()); }, ErrorCode::io_error, dir.path(), {"directory"}));
}

TEST(Safetensors, WriteRejectsBadNamesAndMetadata) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("x.safetensors");
  const Tensor t(DType::f32, {2});
  const auto write = [&](Named named, std::map<std::string, std::string> metadata = {}) {
    return [&path, named, metadata] { write_safetensors(path, named, metadata); };
  };
  EXPECT_TRUE(fails_with(write({{"", t.view()}}), ErrorCode::invalid_argument, path, {"a tensor name is empty"}));
  EXPECT_TRUE(fails_with(write({{"__metadata__", t.view()}}), ErrorCode::invalid_argument, path,
                         {"the tensor name '__metadata__' is reserved"}));
  EXPECT_TRUE(fails_with(write({{"a", t.view()}, {"b", t.view()}, {"a", t.view()}}), ErrorCode::invalid_argument, path,
                         {"duplicate tensor 'a'"}));
  EXPECT_TRUE(fails_with(write({{"bad\xff", t.view()}}), ErrorCode::invalid_argument, path,
                         {"tensor 'bad\\xff': the name is not valid UTF-8"}));
  EXPECT_TRUE(fails_with(write({{"w", t.view()}}, {{"k\xc0", "v"}}), ErrorCode::invalid_argument, path,
                         {"metadata key 'k\\xc0' is not valid UTF-8"}));
  EXPECT_TRUE(fails_with(write({{"w", t.view()}}, {{"k", "\xed\xa0\x80"}}), ErrorCode::invalid_argument, path,
                         {"the value of metadata key 'k' is not valid UTF-8"}));
  SafetensorsFile with_empty;
  with_empty.tensors.emplace("", Tensor(DType::f32, {1}));
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, with_empty); }, ErrorCode::invalid_argument, path, {"empty"}));
  EXPECT_TRUE(dir.entries().empty());  // nothing is created before the arguments are checked
}

TEST(Safetensors, WriteRejectsInvalidViewsAndEmptyTensors) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("x.safetensors");
  const float value = 0;
  const auto null_view = ConstTensorView(nullptr, DType::f32, {2, 3}, {3, 1});
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, {{"w", null_view}}); }, ErrorCode::null_pointer, path,
                         {"tensor 'w' of shape [2, 3] with a null data pointer"}));
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, {{"w", ConstTensorView(&value, DType::f32, {-1}, {1})}}); },
                         ErrorCode::invalid_shape, path, {"tensor 'w' of shape [-1]: negative size"}));
  EXPECT_TRUE(fails_with(
      [&] { write_safetensors(path, {{"w", ConstTensorView(&value, DType::f64, {1 << 30, 1 << 30, 4}, {0, 0, 0})}}); },
      ErrorCode::size_overflow, path, {"byte count overflows"}));
  // A null pointer is fine when there is nothing to read.
  write_safetensors(path, {{"w", ConstTensorView(nullptr, DType::f32, {0, 3}, {3, 1})}});
  EXPECT_EQ(read_safetensors(path).tensors.at("w").shape(), (std::vector<std::int64_t>{0, 3}));
  fs::remove(path);

  SafetensorsFile file;
  file.tensors.emplace("w", Tensor());
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, file); }, ErrorCode::invalid_argument, path,
                         {"tensor 'w'", "default-constructed"}));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Safetensors, WriteRefusesHeadersTheReaderWouldRefuse) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("huge.safetensors");
  // Escapes count: 16,666,668 bytes of \x01 are 100,000,010 bytes of JSON ("\u0001..." with quotes),
  // plus 6 for "blob": refused before any header is built.
  std::map<std::string, std::string> metadata;
  metadata.emplace("blob", std::string(16'666'668, '\x01'));
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, Named{}, metadata); }, ErrorCode::invalid_argument, path,
                         {"the header would be at least 100000016 bytes, over the limit of 100000000"}));
  EXPECT_TRUE(dir.entries().empty());
  if (kSanitized) GTEST_SKIP() << "the 100 MB header below takes seconds under sanitizers";

  // {"__metadata__":{"blob":"..."}} is 28 bytes around the value: 100,000,001 in all, 100,000,008
  // padded, which only the header built in full reveals.
  metadata["blob"] = std::string(99'999'973, 'a');
  EXPECT_TRUE(fails_with([&] { write_safetensors(path, Named{}, metadata); }, ErrorCode::invalid_argument, path,
                         {"the header would be at least 100000008 bytes, over the limit of 100000000"}));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Safetensors, WriteReportsUnwritablePathsAsIoErrorsAndLeavesNoTemporaryFile) {
  const ScratchDir dir("attnkit_safetensors");
  const Tensor t(DType::f32, {2});
  const std::string missing = dir.file("no/such/dir/x.safetensors");
  EXPECT_TRUE(fails_with([&] { write_safetensors(missing, {{"w", t.view()}}); }, ErrorCode::io_error, missing,
                         {"cannot open for writing", "No such file or directory"}));

  // The path is a directory: refused before anything is written.
  const std::string target = dir.file("target");
  fs::create_directories(fs::path(target) / "inside");
  EXPECT_TRUE(fails_with([&] { write_safetensors(target, {{"w", t.view()}}); }, ErrorCode::io_error, target,
                         {"cannot open for writing", "Is a directory"}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"target"});  // the temporary file is gone
  EXPECT_TRUE(fs::is_directory(fs::path(target) / "inside"));
}

TEST(Safetensors, WriteReplacesAnExistingFileWhole) {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("w.safetensors");
  Tensor big(DType::f64, {100}), small(DType::i32, {1});
  fill_pattern(big);
  fill_pattern(small);
  write_safetensors(path, {{"big", big.view()}});
  write_safetensors(path, {{"small", small.view()}});
  const SafetensorsFile back = read_safetensors(path);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_TRUE(same_tensor(back.tensors.at("small"), small));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"});
}

// ============================================================================================
// Fuzzing: mutated files are parsed or rejected with an attnkit::Error, never anything else
// ============================================================================================

// About a second in Release and two under AddressSanitizer (Debug), on one core.
// ATTNKIT_FUZZ_ITERATIONS=<n> runs a longer campaign.
int fuzz_iterations() {
  if (const char* env = std::getenv("ATTNKIT_FUZZ_ITERATIONS")) return std::atoi(env);
  return kSanitized ? 20'000 : 50'000;
}

// Valid files to start from: what our writer produces, and hand-written headers with escapes,
// whitespace, metadata, empty tensors and every dtype.
std::vector<std::string> fuzz_seeds() {
  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("seed.safetensors");
  std::vector<std::string> seeds;
  Named named;
  std::vector<Tensor> tensors;
  for (DType dtype : kAllDtypes) {
    tensors.emplace_back(dtype, std::vector<std::int64_t>{2, 3});
    fill_pattern(tensors.back());
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) named.emplace_back("layer." + std::to_string(i), tensors[i].view());
  write_safetensors(path, named, {{"format", "pt"}, {"note", "caf\xc3\xa9 \"q\"\n"}});
  seeds.push_back(read_file(path));
  write_safetensors(path, Named{});
  seeds.push_back(read_file(path));
  const std::string header =
      "{\"b\\u00e9\" : {\"shape\":[2],\"dtype\":\"I32\",\"data_offsets\":[4,12]},"
      " \"__metadata__\":{\"k\":\"\\ud83d\\ude00\\n\"},"
      " \"a\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[0,4]},"
      "\"e\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[12,12]},\"s\":{\"dtype\":\"F64\",\"shape\":[],"
      "\"data_offsets\":[12,20]}}";
  seeds.push_back(file_of(padded(header), std::string(20, '\x3c')));
  return seeds;
}

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  std::string mutate(const std::string& seed) {
    std::string file = seed;
    if (coin()) return mutate_header(file);
    for (std::size_t n = 1 + below(4); n > 0; --n) mutate_bytes(file, 0);
    return file;
  }

 private:
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }
  bool coin() { return (rng_() & 1) != 0; }

  char interesting_byte() {
    static constexpr std::string_view kBytes = "{}[]\":,\\-+.0123456789eEu \t\n\x00\x01\x7f\x80\xbf\xc3\xed\xf4\xff"sv;
    return coin() ? kBytes[below(kBytes.size())] : static_cast<char>(rng_());
  }

  std::uint64_t interesting_length(std::size_t size) {
    const std::uint64_t values[] = {0, 1, 2, 7, 8, size, size - 8, size - 7, size + 1, 100'000'000, 100'000'001,
                                    std::numeric_limits<std::uint64_t>::max(), std::uint64_t{1} << 63, rng_()};
    return values[below(std::size(values))];
  }

  // One random edit anywhere from `from` on: flip a bit, set a byte, insert, erase, truncate, or
  // duplicate a stretch.
  void mutate_bytes(std::string& s, std::size_t from) {
    const std::size_t span = s.size() > from ? s.size() - from : 0;
    const std::size_t at = from + below(span + 1);
    switch (below(7)) {
      case 0: if (at < s.size()) s[at] = static_cast<char>(s[at] ^ (1 << below(8))); break;
      case 1: if (at < s.size()) s[at] = interesting_byte(); break;
      case 2: s.insert(at, 1 + below(3), interesting_byte()); break;
      case 3: s.erase(at, 1 + below(8)); break;
      case 4: s.resize(at); break;
      case 5: if (at < s.size()) s.insert(below(s.size() + 1), s.substr(at, 1 + below(16))); break;
      case 6:
        if (s.size() >= 8) {
          const std::string length = le64(interesting_length(s.size()));
          std::copy(length.begin(), length.end(), s.begin());
        }
        break;
    }
  }

  // Edits the header text only, then (usually) rewrites the length field to match, so the edits reach
  // the JSON parser and the layout checks rather than failing on the length.
  std::string mutate_header(const std::string& file) {
    const std::uint64_t n = header_length(file);
    std::string header = file.substr(8, n), data = file.substr(8 + n);
    for (std::size_t k = 1 + below(3); k > 0; --k) mutate_bytes(header, 0);
    if (below(4) == 0) mutate_bytes(data, 0);
    return le64(below(5) == 0 ? interesting_length(header.size()) : header.size()) + header + data;
  }

  std::mt19937_64 rng_;
};

TEST(Safetensors, FuzzedFilesParseOrThrowAttnkitErrorOnly) {
  ATTNKIT_TRACE_SEED();
  const std::uint64_t seed = attnkit::testing::test_seed();
  const int iterations = fuzz_iterations();
  std::cout << "[ fuzz     ] seed " << seed << " (rerun with ATTNKIT_TEST_SEED=" << seed << "), " << iterations
            << " iterations\n";
  const std::vector<std::string> seeds = fuzz_seeds();
  for (const std::string& s : seeds) ASSERT_NO_THROW(parse_safetensors(as_bytes(s)));

  const ScratchDir dir("attnkit_safetensors");
  const std::string path = dir.file("fuzz.safetensors");
  Mutator mutator(seed);
  int accepted = 0, round_tripped = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    const std::string input = mutator.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    try {
      const SafetensorsFile file = parse_safetensors(as_bytes(input));
      ++accepted;
      // What was accepted is consistent: the tensors' bytes add up to the data buffer, and a file we
      // write back reads back the same (when every name is one the writer takes).
      std::uint64_t total = 0;
      for (const auto& [name, tensor] : file.tensors) total += tensor.nbytes();
      ASSERT_EQ(8 + header_length(input) + total, input.size()) << "iteration " << i;
      if (file.tensors.count("") == 0 && round_tripped < 200) {
        write_safetensors(path, file);
        ASSERT_TRUE(same_files(read_safetensors(path), file)) << "iteration " << i;
        ++round_tripped;
      }
    } catch (const Error& e) {
      // Rejected with a message that names the source.
      ASSERT_NE(std::string(e.what()).find("<memory>: "), std::string::npos) << "iteration " << i << ": " << e.what();
    } catch (const std::exception& e) {
      FAIL() << "iteration " << i << " threw a non-attnkit exception: " << e.what();
    } catch (...) {
      FAIL() << "iteration " << i << " threw something that is not a std::exception";
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ fuzz     ] " << accepted << " of " << iterations << " mutants accepted, " << round_tripped
            << " round-tripped, " << seconds << " s\n";
  EXPECT_GT(accepted, 0);  // the mutations must not all be trivially fatal
  EXPECT_LT(accepted, iterations);
}

}  // namespace
