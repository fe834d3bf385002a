#include "bench/batch_decode_cases.hpp"

#include <algorithm>
#include <string>

#include "attnkit/quantized.hpp"
#include "bench/length_draw.hpp"

namespace attnkit::bench {
namespace {

constexpr std::int64_t kSequences = 32;
constexpr std::int64_t kHeadDim = 128;
constexpr std::uint32_t kLengthSeed = 54;  // fixed, so that every run times the same batch
// bf16 first: the other dtypes' speed-ups are over its step.
constexpr DType kCacheDTypes[] = {DType::bf16, DType::f32, DType::f16, DType::int8, DType::int4, DType::fp8_e4m3, DType::fp8_e5m2};

const LengthRange kMixed{"mixed", 512, 32768};
const LengthRange kShort{"short", 64, 1024};  // --quick

}  // namespace

std::int64_t BatchDecodeCase::tokens() const {
  std::int64_t sum = 0;
  for (std::int64_t l : lengths) sum += l;
  return sum;
}

double BatchDecodeCase::kv_bytes() const {
  const double row_bytes = is_quantized(dtype) ? static_cast<double>(quantized_row_bytes(dtype, d))
                                               : static_cast<double>(d) * static_cast<double>(dtype_size(dtype));
  return static_cast<double>(tokens() * kv_heads) * 2 * row_bytes;
}

double BatchDecodeCase::flops() const { return 4.0 * static_cast<double>(heads * d) * static_cast<double>(tokens()); }

std::vector<BatchDecodeCase> select_batch_decode_cases(const CaseSelection& sel) {
  const LengthRange range = length_range(sel, kMixed, kShort);
  const std::vector<std::int64_t> lengths = draw_lengths(range, kSequences, kLengthSeed);
  const std::vector<std::int64_t> dims = sel.dims.empty() ? std::vector<std::int64_t>{kHeadDim} : sel.dims;
  std::vector<BatchDecodeCase> cases;
  for (std::int64_t d : dims) {
    for (DType dtype : kCacheDTypes) {
      if (is_quantized(dtype) && d % kQuantBlock != 0) continue;  // quantized rows are whole blocks
      for (int threads : sel.threads) {
        BatchDecodeCase c;
        c.group = "b" + std::to_string(kSequences) + "_" + range.label + "_d" + std::to_string(d);
        c.name = "decode_batch_" + std::string(dtype_name(dtype)) + "_" + c.group;
        c.dtype = dtype;
        c.lengths = lengths;
        c.seed = kLengthSeed;
        c.d = d;
        c.threads = threads;
        if (matches_filter(c.name, sel.filter)) cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

}  // namespace attnkit::bench
