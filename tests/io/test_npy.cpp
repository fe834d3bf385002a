// Tests for .npy reading and writing: round trips of every dtype and rank, strided views, the exact
// header bytes numpy writes, hand-built files of versions 1.0, 2.0 and 3.0, and one test per kind of
// malformed file, each checking the error code and that the message names the file and the problem.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "attnkit/npy.hpp"
#include "attnkit/tensor.hpp"
#include "support/scratch_dir.hpp"

namespace {

namespace fs = std::filesystem;
using attnkit::ConstTensorView;
using attnkit::DType;
using attnkit::Error;
using attnkit::ErrorCode;
using attnkit::Tensor;
using attnkit::read_npy;
using attnkit::write_npy;
using attnkit::testing::ScratchDir;

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr std::size_t kAlignment = 64;

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

// ---- building .npy bytes by hand ----

std::string little_endian(std::uint64_t value, std::size_t width) {
  std::string out;
  for (std::size_t i = 0; i < width; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

std::size_t length_width(int major) { return major == 1 ? 2 : 4; }

// Magic, version and a header length field, without the header.
std::string preamble(int major, int minor, std::uint64_t header_length) {
  return std::string(kMagic) + static_cast<char>(major) + static_cast<char>(minor) +
         little_endian(header_length, length_width(major));
}

// A file whose header is exactly `header` (no padding added): for malformed headers.
std::string raw_npy(int major, std::string_view header, std::string_view data = {}) {
  return preamble(major, 0, header.size()) + std::string(header) + std::string(data);
}

// A well-formed file: `dict` padded with spaces and ending in '\n' so that the data starts on a
// multiple of `alignment` (numpy uses 64; numpy before 1.9 used 16).
std::string npy(int major, std::string_view dict, std::string_view data = {}, std::size_t alignment = kAlignment) {
  std::string header(dict);
  const std::size_t unpadded = kMagic.size() + 2 + length_width(major) + header.size() + 1;
  header.append((alignment - unpadded % alignment) % alignment, ' ');
  header += '\n';
  return raw_npy(major, header, data);
}

std::string dict(std::string_view descr, std::string_view shape, std::string_view fortran = "False") {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': " + std::string(fortran) +
         ", 'shape': " + std::string(shape) + ", }";
}

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// ---- checking errors ----

// read_npy(path) throws an attnkit::Error with `code` whose message names the path and has `keyword`.
::testing::AssertionResult read_fails(const std::string& path, ErrorCode code, const std::string& keyword) {
  try {
    read_npy(path);
  } catch (const Error& e) {
    const std::string message = e.what();
    if (e.code() != code) {
      return ::testing::AssertionFailure() << "code " << attnkit::error_code_name(e.code()) << ", expected "
                                           << attnkit::error_code_name(code) << ": " << message;
    }
    if (message.find(path) == std::string::npos) {
      return ::testing::AssertionFailure() << "message does not name the file: " << message;
    }
    if (message.find(keyword) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks \"" << keyword << "\": " << message;
    }
    return ::testing::AssertionSuccess() << message;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "not an attnkit::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "read_npy succeeded";
}

// Writes `bytes` to a file and expects read_npy to reject it as format_error with `keyword`.
::testing::AssertionResult rejects(const std::string& bytes, const std::string& keyword) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("bad.npy");
  write_file(path, bytes);
  return read_fails(path, ErrorCode::format_error, keyword);
}

template <class Fn>
::testing::AssertionResult write_fails(Fn&& write, const std::string& path, ErrorCode code,
                                       const std::string& keyword) {
  try {
    write();
  } catch (const Error& e) {
    const std::string message = e.what();
    if (e.code() != code || message.find(path) == std::string::npos || message.find(keyword) == std::string::npos) {
      return ::testing::AssertionFailure() << attnkit::error_code_name(e.code()) << ": " << message;
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "write_npy succeeded";
}

// ---- tensors ----

// Fills a tensor with distinct, dtype-appropriate values (including negatives and fractions).
void fill_pattern(Tensor& t) {
  auto* bytes = static_cast<std::byte*>(t.raw());
  const std::size_t size = attnkit::dtype_size(t.dtype());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::byte* element = bytes + i * static_cast<std::int64_t>(size);
    switch (t.dtype()) {
      case DType::boolean: *element = std::byte{static_cast<unsigned char>(i % 3 == 0)}; break;
      case DType::i32: {
        const auto v = static_cast<std::int32_t>(i * 7919 - 100000);
        std::memcpy(element, &v, sizeof v);
        break;
      }
      case DType::i64: {
        const std::int64_t v = i * 123456789012LL - (std::int64_t{1} << 40);
        std::memcpy(element, &v, sizeof v);
        break;
      }
      default: attnkit::store_from_double(element, t.dtype(), 0.37 * static_cast<double>(i) - 3.0 + 1e-3); break;
    }
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// Where the data starts: magic, version, the length field (2 or 4 bytes) and the header it counts.
std::uint64_t header_end(const std::string& file) {
  const std::size_t width = length_width(file[6]);
  std::uint64_t length = 0;
  for (std::size_t i = width; i-- > 0;) length = (length << 8) | static_cast<unsigned char>(file[8 + i]);
  return 8 + width + length;
}

// ============================================================================================
// Round trips
// ============================================================================================

TEST(Npy, RoundTripsEveryDtypeAndRankIncludingZeroSize) {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {},        {1},          {7},          {2, 3},          {3, 1, 4},    {2, 3, 1, 5}, {2, 1, 3, 2, 2},
      {0},       {0, 3},       {4, 0},       {2, 0, 3},       {1, 2, 0, 1}, {2, 2, 2, 2, 0}};
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::boolean, DType::i32, DType::i64};
  const ScratchDir dir("attnkit_npy");
  for (DType dtype : dtypes) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE(std::string(attnkit::dtype_name(dtype)) + " rank " + std::to_string(shape.size()));
      Tensor original(dtype, shape);
      fill_pattern(original);
      const std::string path = dir.file("t.npy");
      write_npy(path, original);

      const std::string file = read_file(path);
      EXPECT_EQ(header_end(file) % kAlignment, 0u);
      EXPECT_EQ(file.size(), header_end(file) + original.nbytes());

      const Tensor loaded = read_npy(path);
      EXPECT_EQ(loaded.dtype(), dtype);
      EXPECT_EQ(loaded.shape(), shape);
      EXPECT_EQ(loaded.numel(), original.numel());
      EXPECT_TRUE(same_bytes(loaded, original));
    }
  }
}

TEST(Npy, RoundTripKeepsSpecialFloatBits) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("special.npy");
  // f16: +0, -0, smallest subnormal, 1, max finite, +inf, -inf, quiet NaN with a payload.
  const std::vector<std::uint16_t> half = {0x0000, 0x8000, 0x0001, 0x3C00, 0x7BFF, 0x7C00, 0xFC00, 0x7E01};
  Tensor t16(DType::f16, {static_cast<std::int64_t>(half.size())});
  std::memcpy(t16.raw(), half.data(), half.size() * 2);
  write_npy(path, t16);
  EXPECT_TRUE(same_bytes(read_npy(path), t16));

  const std::vector<std::uint64_t> dbl = {0x8000000000000000u, 0x0000000000000001u, 0x7FF0000000000000u,
                                          0x7FF8000000000123u, 0xFFEFFFFFFFFFFFFFu};
  Tensor t64(DType::f64, {static_cast<std::int64_t>(dbl.size())});
  std::memcpy(t64.raw(), dbl.data(), dbl.size() * 8);
  write_npy(path, t64);
  EXPECT_TRUE(same_bytes(read_npy(path), t64));
}

TEST(Npy, TensorOfRankSevenRoundTrips) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("r7.npy");
  Tensor t(DType::i32, {2, 1, 2, 1, 2, 1, 3});
  fill_pattern(t);
  write_npy(path, t);
  const Tensor back = read_npy(path);
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_TRUE(same_bytes(back, t));
}

TEST(Npy, Bf16IsWrittenAsFloat32Exactly) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("bf16.npy");
  // 1, -2.5, largest finite, smallest subnormal, -0, +inf, NaN, 1 + 2^-7 (needs all 7 mantissa bits).
  const std::vector<std::uint16_t> bits = {0x3F80, 0xC020, 0x7F7F, 0x0001, 0x8000, 0x7F80, 0x7FC1, 0x3F81};
  Tensor t(DType::bf16, {2, 4});
  std::memcpy(t.raw(), bits.data(), bits.size() * 2);
  write_npy(path, t);

  const std::string file = read_file(path);
  EXPECT_NE(file.find("'descr': '<f4'"), std::string::npos);
  const Tensor back = read_npy(path);
  ASSERT_EQ(back.dtype(), DType::f32);
  EXPECT_EQ(back.shape(), (std::vector<std::int64_t>{2, 4}));
  for (std::size_t i = 0; i < bits.size(); ++i) {
    std::uint32_t got = 0;
    std::memcpy(&got, back.data<float>() + i, 4);
    EXPECT_EQ(got, std::uint32_t{bits[i]} << 16) << "element " << i;  // bf16 is the top half of an f32
  }
}

// ============================================================================================
// Writing views
// ============================================================================================

TEST(Npy, PermutedViewIsWrittenInLogicalOrder) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("permuted.npy");
  std::vector<float> buffer(2 * 3 * 4);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i);
  const auto view = ConstTensorView::contiguous(buffer.data(), DType::f32, {2, 3, 4}).permuted({2, 0, 1});
  write_npy(path, view);

  const Tensor back = read_npy(path);
  ASSERT_EQ(back.shape(), (std::vector<std::int64_t>{4, 2, 3}));
  const float* out = back.data<float>();
  for (std::int64_t k = 0; k < 4; ++k) {
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t j = 0; j < 3; ++j) {
        EXPECT_EQ(out[(k * 2 + i) * 3 + j], static_cast<float>(i * 12 + j * 4 + k));
        EXPECT_EQ(out[(k * 2 + i) * 3 + j], *view.at<float>({k, i, j}));
      }
    }
  }
}

TEST(Npy, NegativeAndZeroStridesAndRankZeroViews) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("strided.npy");
  std::vector<std::int64_t> buffer(12);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<std::int64_t>(i) * 10;

  // Both axes reversed: the view starts at the last element.
  write_npy(path, ConstTensorView(buffer.data() + 11, DType::i64, {3, 4}, {-4, -1}));
  Tensor back = read_npy(path);
  ASSERT_EQ(back.shape(), (std::vector<std::int64_t>{3, 4}));
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(back.data<std::int64_t>()[i], (11 - i) * 10);

  // A broadcast row: stride 0 repeats row 1 three times.
  write_npy(path, ConstTensorView(buffer.data() + 4, DType::i64, {3, 4}, {0, 1}));
  back = read_npy(path);
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(back.data<std::int64_t>()[i], (4 + i % 4) * 10);

  // Every other column of a rank-4 view.
  write_npy(path, ConstTensorView(buffer.data(), DType::i64, {1, 2, 3, 2}, {0, 6, 2, 1}));
  back = read_npy(path);
  EXPECT_EQ(back.shape(), (std::vector<std::int64_t>{1, 2, 3, 2}));
  const std::vector<std::int64_t> expected = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110};
  EXPECT_EQ(std::vector<std::int64_t>(back.data<std::int64_t>(), back.data<std::int64_t>() + 12), expected);

  // Rank 0.
  write_npy(path, ConstTensorView(buffer.data() + 3, DType::i64, {}, {}));
  back = read_npy(path);
  EXPECT_EQ(back.rank(), 0);
  EXPECT_EQ(back.data<std::int64_t>()[0], 30);

  // Zero elements: a null pointer is fine.
  write_npy(path, ConstTensorView(nullptr, DType::f32, {2, 0}, {0, 1}));
  back = read_npy(path);
  EXPECT_EQ(back.shape(), (std::vector<std::int64_t>{2, 0}));
}

TEST(Npy, StridedBf16ViewIsWrittenAsFloat32) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("bf16view.npy");
  std::vector<std::uint16_t> bits(6);
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = attnkit::to_bfloat16(static_cast<float>(i) + 0.5f).bits;
  write_npy(path, ConstTensorView(bits.data(), DType::bf16, {3, 2}, {1, 3}));  // the transpose of a 2x3
  const Tensor back = read_npy(path);
  ASSERT_EQ(back.dtype(), DType::f32);
  const std::vector<float> expected = {0.5f, 3.5f, 1.5f, 4.5f, 2.5f, 5.5f};
  EXPECT_EQ(std::vector<float>(back.data<float>(), back.data<float>() + 6), expected);
}

TEST(Npy, BoolsAreWrittenAndReadAsZeroOrOne) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("bool.npy");
  const unsigned char raw[] = {0, 1, 2, 255};  // numpy and C++ both read non-zero as true
  write_npy(path, ConstTensorView::contiguous(raw, DType::boolean, {4}));
  const std::string file = read_file(path);
  EXPECT_EQ(file.substr(file.size() - 4), std::string("\0\1\1\1", 4));

  write_file(path, npy(1, dict("|b1", "(4,)"), std::string("\0\1\2\xff", 4)));
  const Tensor back = read_npy(path);
  const auto* bytes = static_cast<const unsigned char*>(back.raw());
  EXPECT_EQ(std::vector<int>(bytes, bytes + 4), (std::vector<int>{0, 1, 1, 1}));
}

// ============================================================================================
// The exact bytes the writer produces
// ============================================================================================

TEST(Npy, HeaderBytesMatchNumpyForFloat32Of2x3) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("f32.npy");
  Tensor t(DType::f32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i);
  write_npy(path, t);

  // What numpy.save writes: the 59-character dict, 58 spaces (numpy 2 puts 20 of them right after
  // the dict to let shape[0] grow in place, older numpy pads the same total) and '\n'; 128 bytes in all.
  const std::string dict_text = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(dict_text.size(), 59u);
  const std::string expected_header = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict_text +
                                      std::string(58, ' ') + "\n";
  ASSERT_EQ(expected_header.size(), 128u);
  const std::string file = read_file(path);
  EXPECT_EQ(file.substr(0, 128), expected_header);
  EXPECT_EQ(file.substr(128), bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST(Npy, HeaderBytesIncludeNumpy2GrowthPadding) {
  // A shape whose dict fits in 128 bytes without numpy 2's growth spaces but not with them: numpy 2
  // writes 192 bytes (older numpy wrote 128). Checked against numpy 2.4's np.save.
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("growth.npy");
  std::vector<std::int64_t> shape(16, 1);
  shape[0] = 0;
  write_npy(path, Tensor(DType::f32, shape));
  const std::string dict_text =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), }";
  const std::string expected = std::string("\x93NUMPY\x01\x00\xb6\x00", 10) + dict_text +
                               std::string(20 + 60, ' ') + "\n";  // 20 growth spaces, 60 alignment spaces
  ASSERT_EQ(expected.size(), 192u);
  EXPECT_EQ(read_file(path), expected);
}

TEST(Npy, HeaderLayoutForEveryDtypeAndRank) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("h.npy");
  const std::pair<DType, std::string> descrs[] = {{DType::f64, "<f8"}, {DType::f32, "<f4"}, {DType::f16, "<f2"},
                                                  {DType::bf16, "<f4"}, {DType::boolean, "|b1"},
                                                  {DType::i32, "<i4"}, {DType::i64, "<i8"}};
  const std::pair<std::vector<std::int64_t>, std::string> shapes[] = {
      {{}, "()"}, {{5}, "(5,)"}, {{12345, 2}, "(12345, 2)"}, {{0, 1, 2}, "(0, 1, 2)"}};
  for (const auto& [dtype, descr] : descrs) {
    for (const auto& [shape, repr] : shapes) {
      SCOPED_TRACE(descr + " " + repr);
      write_npy(path, Tensor(dtype, shape));
      const std::string file = read_file(path);
      ASSERT_GE(file.size(), kAlignment);
      EXPECT_EQ(file.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
      const std::size_t end = header_end(file);
      EXPECT_EQ(end % kAlignment, 0u);
      const std::string header = file.substr(10, end - 10);
      const std::string text = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + repr + ", }";
      EXPECT_EQ(header.substr(0, text.size()), text);
      // numpy pads with 1 to 64 spaces, plus 21 - digits(shape[0]) for growth when rank >= 1.
      const std::size_t spaces = header.size() - text.size() - 1;
      const std::size_t growth = shape.empty() ? 0 : 21 - std::to_string(shape[0]).size();
      EXPECT_EQ(header.find_first_not_of(' ', text.size()), header.size() - 1);
      EXPECT_EQ(header.back(), '\n');
      EXPECT_GE(spaces, growth + 1);
      EXPECT_LE(spaces, growth + 64);
    }
  }
}

TEST(Npy, WritesVersion2WhenTheHeaderExceeds65535Bytes) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("v2.npy");
  const std::vector<std::int64_t> shape(22000, 1);  // "(1, 1, ..., 1)": 66,000 characters
  Tensor t(DType::f32, shape);
  t.data<float>()[0] = 42.0f;
  write_npy(path, t);

  const std::string file = read_file(path);
  EXPECT_EQ(file.substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  const std::uint64_t end = header_end(file);
  EXPECT_GT(end, 65535u);
  EXPECT_EQ(end % kAlignment, 0u);
  EXPECT_EQ(file.size(), end + 4);
  const Tensor back = read_npy(path);
  EXPECT_EQ(back.shape(), shape);
  EXPECT_EQ(back.data<float>()[0], 42.0f);
}

TEST(Npy, WriteRefusesHeadersTheReaderWouldRefuse) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("huge_rank.npy");
  const Tensor t(DType::f32, std::vector<std::int64_t>(400000, 1));  // a header of about 1.2 MB
  EXPECT_TRUE(write_fails([&] { write_npy(path, t); }, path, ErrorCode::invalid_shape, "rank 400000"));
  EXPECT_FALSE(fs::exists(path));
}

// ============================================================================================
// Hand-built files the reader accepts
// ============================================================================================

TEST(Npy, ReadsVersion1AsNumpyWritesIt) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("v1.npy");
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  write_file(path, npy(1, dict("<f4", "(2, 3)") + std::string(20, ' '), bytes_of(values)));
  const Tensor t = read_npy(path);
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(std::vector<float>(t.data<float>(), t.data<float>() + 6), values);
}

TEST(Npy, ReadsVersion2WithDoubleQuotesAndNoTrailingComma) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("v2.npy");
  const std::vector<std::int64_t> values = {1, -2, std::int64_t{1} << 62, -(std::int64_t{1} << 40)};
  write_file(path, npy(2, R"({"descr": "<i8", "fortran_order": False, "shape": (2, 2)})", bytes_of(values)));
  const Tensor t = read_npy(path);
  EXPECT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(std::vector<std::int64_t>(t.data<std::int64_t>(), t.data<std::int64_t>() + 4), values);
}

TEST(Npy, ReadsVersion3WithKeysInAnyOrderAndLooseWhitespace) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("v3.npy");
  const std::string header = "{ 'shape' : ( 3 , ) ,\t'fortran_order':False,'descr':\"|b1\" , }";
  write_file(path, npy(3, header, std::string("\1\0\1", 3)));
  const Tensor t = read_npy(path);
  EXPECT_EQ(t.dtype(), DType::boolean);
  EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{3}));
  const auto* b = static_cast<const unsigned char*>(t.raw());
  EXPECT_EQ(std::vector<int>(b, b + 3), (std::vector<int>{1, 0, 1}));
}

TEST(Npy, ReadsRankZeroHalfAndInt32WithOldSixteenByteAlignment) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("old.npy");
  write_file(path, npy(1, dict("<f2", "()"), bytes_of(std::vector<std::uint16_t>{0x3C00}), 16));
  Tensor t = read_npy(path);
  EXPECT_EQ(t.dtype(), DType::f16);
  EXPECT_EQ(t.rank(), 0);
  EXPECT_EQ(attnkit::to_float(t.data<attnkit::float16>()[0]), 1.0f);

  write_file(path, npy(1, dict("<i4", "(2, 0, 3,)"), "", 16));
  t = read_npy(path);
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{2, 0, 3}));
}

TEST(Npy, ReadsPython2LongsInVersions1And2Only) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("py2.npy");
  const std::string data = bytes_of(std::vector<double>{1, 2, 3, 4, 5, 6});
  write_file(path, npy(1, dict("<f8", "(2L, 3L)"), data));
  EXPECT_EQ(read_npy(path).shape(), (std::vector<std::int64_t>{2, 3}));
  write_file(path, npy(3, dict("<f8", "(2L, 3L)"), data));
  EXPECT_TRUE(read_fails(path, ErrorCode::format_error, "non-negative integers"));
}

TEST(Npy, ReadsBoolWithAnyByteOrderCharacter) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("b.npy");
  for (const char* descr : {"|b1", "<b1", ">b1", "=b1"}) {
    write_file(path, npy(1, dict(descr, "(1,)"), std::string("\1", 1)));
    EXPECT_EQ(read_npy(path).dtype(), DType::boolean) << descr;
  }
}

// ============================================================================================
// Malformed files: format_error naming the file and the problem
// ============================================================================================

TEST(Npy, RejectsEmptyFile) { EXPECT_TRUE(rejects("", "truncated")); }

TEST(Npy, RejectsTruncationInTheMagicString) { EXPECT_TRUE(rejects("\x93NUM", "truncated in the magic")); }

TEST(Npy, RejectsTruncationInTheVersion) {
  EXPECT_TRUE(rejects(std::string(kMagic) + "\x01", "truncated in the format version"));
}

TEST(Npy, RejectsTruncationInTheHeaderLength) {
  EXPECT_TRUE(rejects(std::string(kMagic) + std::string("\x01\x00\x76", 3), "truncated in the header length"));
  EXPECT_TRUE(rejects(std::string(kMagic) + std::string("\x02\x00\x76\x00\x00", 5), "truncated in the header length"));
}

TEST(Npy, RejectsTruncationInTheHeader) {
  const std::string full = npy(1, dict("<f4", "(2,)"), bytes_of(std::vector<float>{1, 2}));
  EXPECT_TRUE(rejects(full.substr(0, 40), "truncated in the header"));
}

TEST(Npy, RejectsTruncationInTheData) {
  const std::string full = npy(1, dict("<f4", "(2, 3)"), bytes_of(std::vector<float>(6, 1.0f)));
  EXPECT_TRUE(rejects(full.substr(0, full.size() - 1), "truncated in the data"));
  EXPECT_TRUE(rejects(full.substr(0, full.size() - 24), "needs 24 bytes"));
}

TEST(Npy, RejectsEveryTruncatedPrefixOfAValidFile) {
  const std::string full = npy(1, dict("<i4", "(3,)"), bytes_of(std::vector<std::int32_t>{1, 2, 3}));
  for (std::size_t n = 0; n < full.size(); ++n) EXPECT_TRUE(rejects(full.substr(0, n), "truncated")) << n;
}

TEST(Npy, RejectsAHugeShapeWithoutAllocatingIt) {
  // 2^40 floats (4 TiB) claimed, none present: must fail on the size check, not in the allocator.
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(1099511627776,)")), "truncated in the data"));
}

TEST(Npy, RejectsWrongMagic) {
  EXPECT_TRUE(rejects("\x93NUMPX\x01\x00", "not a .npy file"));
  EXPECT_TRUE(rejects("hello", "not a .npy file"));
  EXPECT_TRUE(rejects(std::string("PK\x03\x04\x14\x00\x00\x00", 8), ".npz"));
}

TEST(Npy, RejectsUnsupportedVersions) {
  const std::string body = npy(1, dict("<f4", "(1,)"), bytes_of(std::vector<float>{1})).substr(8);
  EXPECT_TRUE(rejects(std::string(kMagic) + std::string("\x04\x00", 2) + body, "version 4.0"));
  EXPECT_TRUE(rejects(std::string(kMagic) + std::string("\x01\x01", 2) + body, "version 1.1"));
  EXPECT_TRUE(rejects(std::string(kMagic) + std::string("\x00\x00", 2) + body, "version 0.0"));
}

TEST(Npy, RejectsBigEndianData) {
  const std::string data = bytes_of(std::vector<float>{1, 2});
  EXPECT_TRUE(rejects(npy(1, dict(">f4", "(2,)"), data),
                      "big-endian data ('>f4') is not supported; convert with arr.astype('<f4')"));
  EXPECT_TRUE(rejects(npy(1, dict(">i8", "(1,)"), data), "astype('<i8')"));
}

TEST(Npy, RejectsNativeAndNotApplicableByteOrderForMultiByteTypes) {
  const std::string data = bytes_of(std::vector<float>{1});
  EXPECT_TRUE(rejects(npy(1, dict("=f4", "(1,)"), data), "not explicitly little-endian"));
  EXPECT_TRUE(rejects(npy(1, dict("|f4", "(1,)"), data), "not explicitly little-endian"));
}

TEST(Npy, RejectsFortranOrder) {
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(2, 3)", "True"), bytes_of(std::vector<float>(6))), "Fortran"));
}

TEST(Npy, RejectsObjectArrays) {
  EXPECT_TRUE(rejects(npy(1, dict("|O", "(2,)"), std::string(16, '\0')), "object arrays"));
}

TEST(Npy, RejectsOtherDtypes) {
  for (const char* descr : {"<c8", "<u2", "<U3", "|u1", "|i1", "<f16", "<i2", "<M8[ns]", "|V4", "f4", "", "<"}) {
    EXPECT_TRUE(rejects(npy(1, dict(descr, "(1,)"), std::string(16, '\0')), "unsupported dtype")) << descr;
  }
}

TEST(Npy, RejectsStructuredDtypes) {
  EXPECT_TRUE(rejects(npy(1, "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (2,), }",
                          std::string(16, '\0')),
                      "structured"));
}

TEST(Npy, RejectsOversizedHeaders) {
  // Header length fields far beyond the 1 MiB cap; the file itself is small.
  EXPECT_TRUE(rejects(preamble(2, 0, 2u << 20) + std::string(64, ' '), "oversized header"));
  EXPECT_TRUE(rejects(preamble(3, 0, 0xFFFFFFFFu) + std::string(64, ' '), "oversized header"));
}

TEST(Npy, RejectsAHeaderLengthLargerThanTheFile) {
  EXPECT_TRUE(rejects(preamble(1, 0, 65535) + dict("<f4", "(1,)") + "\n", "says 65535 bytes"));
}

TEST(Npy, RejectsNegativeShapeEntries) {
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(2, -3)")), "negative shape entry '-3'"));
}

TEST(Npy, RejectsNonIntegerShapeEntries) {
  for (const char* shape : {"(2.5,)", "(2, 3.0)", "('a',)", "(None,)", "(True,)", "(1e3,)", "(0x10,)", "(1_000,)",
                            "(,)", "(+2,)"}) {
    EXPECT_TRUE(rejects(npy(1, dict("<f4", shape)), "non-negative integers")) << shape;
  }
}

TEST(Npy, RejectsShapesThatAreNotTuples) {
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(5)"), std::string(20, '\0')), "not a tuple"));
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "5")), "'shape' tuple"));
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "[2, 3]")), "'shape' tuple"));
}

TEST(Npy, RejectsShapeOverflow) {
  // Element count 2^64; a single entry beyond int64; byte count 2^61 * 8 = 2^64.
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(4294967296, 4294967296)")), "element count"));
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(99999999999999999999,)")), "overflows 64 bits"));
  EXPECT_TRUE(rejects(npy(1, dict("<f8", "(2305843009213693952,)")), "byte count"));
  EXPECT_TRUE(rejects(npy(1, dict("|b1", "(3037000500, 3037000500, 2)")), "overflows 64 bits"));
}

// A case fuzz/fuzz_npy.cpp found: a zero size must not excuse the others, or (0, 2**43, 2**40) is read
// as an empty tensor whose strides do not fit in 64 bits (and write_npy overflows computing them).
TEST(Npy, RejectsOverflowingSizesBesideAZeroSizeAndNeverWritesThem) {
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(0, 8796093022208, 1099511627776)")), "element count"));
  EXPECT_TRUE(rejects(npy(1, dict("<f8", "(1152921504606846976, 0, 2)")), "byte count"));
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("empty.npy");
  const Tensor empty(DType::f32, {0, std::int64_t{1} << 43, std::int64_t{1} << 40});
  EXPECT_TRUE(write_fails([&] { write_npy(path, empty); }, path, ErrorCode::size_overflow, "element count"));
  EXPECT_FALSE(fs::exists(path));
  write_npy(path, Tensor(DType::f32, {0, std::int64_t{1} << 20, 3}));  // empty, with sizes that fit
  EXPECT_EQ(read_npy(path).shape(), (std::vector<std::int64_t>{0, std::int64_t{1} << 20, 3}));
}

TEST(Npy, RejectsTrailingBytesAfterTheData) {
  const std::string three_floats = bytes_of(std::vector<float>{1, 2, 3});
  EXPECT_TRUE(rejects(npy(1, dict("<f4", "(2,)"), three_floats), "4 unexpected trailing bytes"));
}

TEST(Npy, RejectsMissingKeys) {
  EXPECT_TRUE(rejects(npy(1, "{'descr': '<f4', 'fortran_order': False, }"), "missing the key 'shape'"));
  EXPECT_TRUE(rejects(npy(1, "{'fortran_order': False, 'shape': (1,), }"), "missing the key 'descr'"));
  EXPECT_TRUE(rejects(npy(1, "{'descr': '<f4', 'shape': (1,), }"), "missing the key 'fortran_order'"));
  EXPECT_TRUE(rejects(npy(1, "{}"), "missing the key"));
}

TEST(Npy, RejectsUnknownKeys) {
  EXPECT_TRUE(rejects(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1, }"),
                      "unknown key 'extra'"));
}

TEST(Npy, RejectsDuplicateKeys) {
  EXPECT_TRUE(rejects(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'descr': '<f4', }"),
                      "duplicate key 'descr'"));
}

TEST(Npy, RejectsGarbageHeaders) {
  using namespace std::string_literals;
  const std::string good = dict("<f4", "(2, 3)");
  const std::pair<std::string, std::string> cases[] = {
      {"", "does not end with a newline"},
      {good, "does not end with a newline"},
      {"\n", "malformed header"},
      {"not a dict\n", "expected '{'"},
      {"[1, 2]\n", "expected '{'"},
      {good + " junk\n", "unexpected text after"},
      {good + "}\n", "unexpected text after"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }\n", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }\n", "True or False"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }\n", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),, }\n", "quoted key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }\n", "expected ',' or ')'"},
      {"{descr: '<f4', 'fortran_order': False, 'shape': (2,), }\n", "quoted key"},
      {"{'descr': b'<f4', 'fortran_order': False, 'shape': (2,), }\n", "dtype string"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,), }\n", "escape"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }\n", "malformed header"},
      {"{'descr': '<f4\n", "unterminated string"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }\n", "expected ':'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), \n", "quoted key"},
      {"{'descr': '<f4',\0 'fortran_order': False, 'shape': (2,), }\n"s, "\\x00"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\xff\n", "\\xff"},
  };
  for (const auto& [header, keyword] : cases) {
    EXPECT_TRUE(rejects(raw_npy(1, header), keyword)) << header;
  }
}

// ============================================================================================
// In memory: parse_npy runs the same reader on bytes
// ============================================================================================

std::span<const std::byte> as_bytes(const std::string& text) { return std::as_bytes(std::span(text)); }

TEST(Npy, ParseNpyReadsWhatReadNpyReadsFromTheSameBytes) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("same.npy");
  for (const std::string& bytes :
       {npy(1, dict("<f4", "(2, 3)"), bytes_of(std::vector<float>{1.5f, -2, 3.25f, 0, 1e-30f, -7})),
        npy(2, R"({"descr": "<i8", "fortran_order": False, "shape": (2,)})", bytes_of(std::vector<std::int64_t>{-1, 9})),
        npy(3, dict("|b1", "(3,)"), std::string("\1\0\7", 3)), npy(1, dict("<f8", "(0, 4)"))}) {
    write_file(path, bytes);
    const Tensor from_file = read_npy(path);
    const Tensor from_memory = attnkit::parse_npy(as_bytes(bytes));
    EXPECT_EQ(from_memory.dtype(), from_file.dtype());
    EXPECT_EQ(from_memory.shape(), from_file.shape());
    EXPECT_TRUE(same_bytes(from_memory, from_file));
  }
}

TEST(Npy, ParseNpyNamesTheSourceAndChecksSizesBeforeAllocating) {
  const auto parse_error = [](const std::string& bytes, const std::string& source) -> std::string {
    try {
      attnkit::parse_npy(as_bytes(bytes), source);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::format_error) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "parse_npy accepted the bytes";
    return "";
  };
  const std::string full = npy(1, dict("<i4", "(3,)"), bytes_of(std::vector<std::int32_t>{1, 2, 3}));
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::string message = parse_error(full.substr(0, n), "weights.npy");
    EXPECT_EQ(message.rfind("weights.npy: ", 0), 0u) << message;
    EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  }
  EXPECT_EQ(parse_error(full + "x", "<memory>").rfind("<memory>: 1 unexpected trailing byte", 0), 0u);
  // 2^40 floats claimed, none present: refused by the size check, not by the allocator.
  EXPECT_NE(parse_error(npy(1, dict("<f4", "(1099511627776,)")), "big").find("truncated in the data"), std::string::npos);
}

// ============================================================================================
// I/O errors and invalid writes
// ============================================================================================

TEST(Npy, ReadReportsMissingFilesAndDirectoriesAsIoErrors) {
  const ScratchDir dir("attnkit_npy");
  EXPECT_TRUE(read_fails(dir.file("absent.npy"), ErrorCode::io_error, "cannot open"));
  EXPECT_TRUE(read_fails(dir.path(), ErrorCode::io_error, "it is a directory, not a regular file"));
  if (fs::exists("/dev/zero")) {  // endless: reading it as a file would never finish
    EXPECT_TRUE(read_fails("/dev/zero", ErrorCode::io_error, "it is a character device"));
  }
}

// Opening a FIFO waits for a writer: an input that is one is refused before it is opened.
TEST(Npy, ReadRefusesAFifoWithoutWaitingForAWriter) {
  const ScratchDir dir("attnkit_npy");
  const std::string fifo = dir.file("pipe.npy");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto refused = std::async(std::launch::async, [&] { return read_fails(fifo, ErrorCode::io_error, "FIFO"); });
  if (refused.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    ADD_FAILURE() << "read_npy waited on the FIFO";
    const int writer = open(fifo.c_str(), O_WRONLY);  // lets the waiting open return, then read end of file
    if (writer >= 0) close(writer);
  }
  EXPECT_TRUE(refused.get());
}

TEST(Npy, WriteReportsUnwritablePathsAsIoErrors) {
  const ScratchDir dir("attnkit_npy");
  const Tensor t(DType::f32, {2});
  const std::string missing = dir.file("no/such/dir/x.npy");
  EXPECT_TRUE(write_fails([&] { write_npy(missing, t); }, missing, ErrorCode::io_error, "cannot open for writing"));
  EXPECT_TRUE(write_fails([&] { write_npy(dir.path(), t.view()); }, dir.path(), ErrorCode::io_error, "cannot open"));
}

TEST(Npy, WriteReportsAFullDeviceAsAnIoError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const Tensor t(DType::f64, {1 << 16});  // more than stdio buffers, so fwrite itself fails
  EXPECT_TRUE(write_fails([&] { write_npy("/dev/full", t); }, "/dev/full", ErrorCode::io_error, "write failed"));
  const Tensor small(DType::f32, {1});  // only the final flush in fclose fails
  EXPECT_TRUE(write_fails([&] { write_npy("/dev/full", small); }, "/dev/full", ErrorCode::io_error, "write failed"));
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A write that fails in the middle (here: past the process's file size limit, as a full disk would)
// leaves an existing file as it was, and no temporary file beside it.
TEST(Npy, AFailedWriteLeavesTheTargetAsItWasAndNoTemporaryFile) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("o.npy");
  Tensor before(DType::f32, {3});
  before.data<float>()[1] = 7.0f;
  write_npy(path, before);
  const std::string original = file_bytes(path);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the limit and the failing write stay in the child
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead of killing the process
    const rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_npy(path, Tensor(DType::f64, {1 << 16}));  // 512 KiB
    } catch (const Error& e) {
      _exit(e.code() == ErrorCode::io_error && std::string(e.what()).find(path) != std::string::npos ? 0 : 2);
    }
    _exit(3);  // the write succeeded
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(file_bytes(path), original) << "the target changed";
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.npy"}) << "a temporary file was left";
}

// Writing through a symbolic link replaces the file it points to (the link stays); a device is
// written in place, never replaced.
TEST(Npy, WriteFollowsLinksAndWritesDevicesInPlace) {
  const ScratchDir dir("attnkit_npy");
  const std::string file = dir.file("real.npy"), link = dir.file("link.npy");
  write_npy(file, Tensor(DType::f32, {1}));
  fs::create_symlink(file, link);
  Tensor t(DType::f32, {2});
  t.data<float>()[0] = 5.0f;
  write_npy(link, t);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_npy(file).numel(), 2);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"link.npy", "real.npy"}));
  if (fs::exists("/dev/null")) {
    write_npy("/dev/null", t);
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
  }
}

TEST(Npy, WriteRejectsInvalidViewsAndEmptyTensors) {
  const ScratchDir dir("attnkit_npy");
  const std::string path = dir.file("x.npy");
  EXPECT_TRUE(write_fails([&] { write_npy(path, ConstTensorView(nullptr, DType::f32, {2, 3}, {3, 1})); }, path,
                          ErrorCode::null_pointer, "null data pointer"));
  const float value = 0;
  EXPECT_TRUE(write_fails([&] { write_npy(path, ConstTensorView(&value, DType::f32, {-1}, {1})); }, path,
                          ErrorCode::invalid_shape, "negative size"));
  EXPECT_TRUE(write_fails([&] { write_npy(path, Tensor()); }, path, ErrorCode::invalid_argument,
                          "default-constructed"));
  EXPECT_FALSE(fs::exists(path));  // nothing is created before the arguments are checked
}

}  // namespace
