#include "bench/varlen_cases.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "bench/length_draw.hpp"

namespace attnkit::bench {
namespace {

constexpr std::int64_t kSequences = 16;
constexpr std::int64_t kHeadDim = 128;
constexpr std::uint32_t kLengthSeed = 18;  // fixed, so that every run times the same packing

const LengthRange kMixed{"mixed", 64, 4096};
const LengthRange kShort{"short", 64, 1024};  // --quick

double sum_of_squares(const std::vector<std::int64_t>& lengths) {
  double sum = 0;
  for (std::int64_t l : lengths) sum += static_cast<double>(l) * static_cast<double>(l);
  return sum;
}

}  // namespace

std::int64_t VarlenCase::longest() const { return *std::max_element(lengths.begin(), lengths.end()); }

std::int64_t VarlenCase::equal_length() const {
  return std::llround(std::sqrt(sum_of_squares(lengths) / static_cast<double>(lengths.size())));
}

double VarlenCase::flops() const {
  return 4.0 * static_cast<double>(heads * d) * sum_of_squares(lengths) * (causal ? 0.5 : 1.0);
}

double VarlenCase::equal_flops() const {
  const double l = static_cast<double>(equal_length());
  return 4.0 * static_cast<double>(heads * d) * static_cast<double>(lengths.size()) * l * l * (causal ? 0.5 : 1.0);
}

double VarlenCase::padded_flops() const {
  const double longest_length = static_cast<double>(longest());
  double pairs = 0;
  for (std::int64_t length : lengths) {
    const double l = static_cast<double>(length);
    pairs += causal ? l * l / 2 + (longest_length - l) * l : longest_length * l;
  }
  return 4.0 * static_cast<double>(heads * d) * pairs;
}

std::vector<VarlenCase> select_varlen_cases(const CaseSelection& sel) {
  const LengthRange range = length_range(sel, kMixed, kShort);
  const std::vector<std::int64_t> lengths = draw_lengths(range, kSequences, kLengthSeed);
  const std::vector<std::int64_t> dims = sel.dims.empty() ? std::vector<std::int64_t>{kHeadDim} : sel.dims;
  std::vector<VarlenCase> cases;
  for (std::int64_t d : dims) {
    for (bool causal : {false, true}) {
      for (int threads : sel.threads) {
        VarlenCase c;
        c.name = "varlen_f32_b" + std::to_string(kSequences) + "_" + range.label + "_d" + std::to_string(d) +
                 (causal ? "_causal" : "");
        c.lengths = lengths;
        c.seed = kLengthSeed;
        c.d = d;
        c.causal = causal;
        c.threads = threads;
        if (matches_filter(c.name, sel.filter)) cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

}  // namespace attnkit::bench
