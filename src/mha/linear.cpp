#include "mha/linear.hpp"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdio>
#include <mutex>
#include <string>

#include "attnkit/blas.hpp"
#include "attnkit/error.hpp"
#include "core/parallel_for.hpp"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

namespace attnkit::mha {
namespace {

// Fixed block sizes: each block is one BLAS call on one of our threads.
constexpr std::int64_t kRowBlock = 64;
constexpr std::int64_t kFeatureBlock = 64;
constexpr std::int64_t kFewRows = 4;  // up to this many rows, linear reads the weights by matrix-vector products

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// BLAS takes int sizes; the module validates its sizes against this before any call.
int blas_int(std::int64_t x) {
  if (x > INT_MAX) throw Error(ErrorCode::size_overflow, "projection: a size of " + std::to_string(x) + " exceeds BLAS's int");
  return static_cast<int>(x);
}

// OpenBLAS runs one thread per call: attnkit's pool splits the work. (This sets OpenBLAS's
// process-wide thread count, once.) Also once: a generic core on a capable CPU is said on stderr,
// since every projection then runs several times slower than it could (see attnkit/blas.hpp).
void hold_blas_to_one_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_set_num_threads(1);
    const BlasCoreVerdict verdict = projection_blas().verdict;
    if (verdict.generic) std::fprintf(stderr, "attnkit: %s\n", verdict.message.c_str());
  });
}

// A few rows (a decoding step): the weights are read once and dominate. sgemm would pack them for
// reuse that never comes (at one row it streamed them at a quarter of sgemv's rate here), and
// blocks of rows would leave one thread doing everything; so blocks of output features, each a
// matrix-vector product per row, spread over the threads.
void linear_few_rows(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out,
                     const float* b, float* y) {
  detail::parallel_for(ceil_div(out, kFeatureBlock), [&](std::int64_t block) {
    const std::int64_t o0 = block * kFeatureBlock, count = std::min(kFeatureBlock, out - o0);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* y_row = y + r * out + o0;
      if (b != nullptr) {
        std::copy(b + o0, b + o0 + count, y_row);
      } else {
        std::fill(y_row, y_row + count, 0.0f);
      }
      if (in == 0) continue;
      cblas_sgemv(CblasRowMajor, CblasNoTrans, blas_int(count), blas_int(in), 1.0f, w + o0 * in, blas_int(in),
                  x + r * in, 1, 1.0f, y_row, 1);
    }
  });
}

}  // namespace

void linear(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out, const float* b,
            float* y) {
  if (rows == 0 || out == 0) return;
  hold_blas_to_one_thread();
  if (rows <= kFewRows) return linear_few_rows(x, rows, in, w, out, b, y);
  detail::parallel_for(ceil_div(rows, kRowBlock), [&](std::int64_t block) {
    const std::int64_t r0 = block * kRowBlock, count = std::min(kRowBlock, rows - r0);
    float* y_rows = y + r0 * out;
    for (std::int64_t r = 0; r < count; ++r) {
      if (b != nullptr) {
        std::copy(b, b + out, y_rows + r * out);
      } else {
        std::fill(y_rows + r * out, y_rows + (r + 1) * out, 0.0f);
      }
    }
    if (in == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(count), blas_int(out), blas_int(in), 1.0f,
                x + r0 * in, blas_int(in), w, blas_int(in), 1.0f, y_rows, blas_int(out));
  });
}

void linear_input_gradient(const float* dy, std::int64_t rows, std::int64_t out, const float* w, std::int64_t in,
                           float* dx) {
  if (rows == 0 || in == 0) return;
  hold_blas_to_one_thread();
  detail::parallel_for(ceil_div(rows, kRowBlock), [&](std::int64_t block) {
    const std::int64_t r0 = block * kRowBlock, count = std::min(kRowBlock, rows - r0);
    if (out == 0) {
      std::fill(dx + r0 * in, dx + (r0 + count) * in, 0.0f);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(count), blas_int(in), blas_int(out), 1.0f,
                dy + r0 * out, blas_int(out), w, blas_int(in), 0.0f, dx + r0 * in, blas_int(in));
  });
}

void linear_weight_gradient(const float* dy, std::int64_t rows, std::int64_t out, const float* x, std::int64_t in,
                            float* dw, float* db) {
  if (out == 0) return;
  hold_blas_to_one_thread();
  detail::parallel_for(ceil_div(out, kFeatureBlock), [&](std::int64_t block) {
    const std::int64_t o0 = block * kFeatureBlock, count = std::min(kFeatureBlock, out - o0);
    if (db != nullptr) {
      for (std::int64_t o = o0; o < o0 + count; ++o) {
        double sum = 0;  // a fixed order, in double: the bias gradient sums every row
        for (std::int64_t r = 0; r < rows; ++r) sum += dy[r * out + o];
        db[o] = static_cast<float>(sum);
      }
    }
    if (in == 0) return;
    if (rows == 0) {
      std::fill(dw + o0 * in, dw + (o0 + count) * in, 0.0f);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(count), blas_int(in), blas_int(rows), 1.0f, dy + o0,
                blas_int(out), x, blas_int(in), 0.0f, dw + o0 * in, blas_int(in));
  });
}

const char* blas_description() { return openblas_get_config(); }

}  // namespace attnkit::mha

// ---- attnkit/blas.hpp: the check of OpenBLAS's core ----

namespace attnkit {

namespace {

// OpenBLAS's x86 core names (openblas_get_corename(): OpenBLAS 0.3.21's list, plus SapphireRapids
// of later releases), lower case, by the widest vectors their sgemm kernels use.
constexpr std::array<std::string_view, 3> kAvx512Cores = {"skylakex", "cooperlake", "sapphirerapids"};
constexpr std::array<std::string_view, 2> kAvx2Cores = {"haswell", "zen"};
constexpr std::array<std::string_view, 22> kPreAvx2Cores = {
    "katmai",  "coppermine", "northwood",  "prescott", "banias",       "atom",         "core2",     "penryn",
    "dunnington", "nehalem", "athlon",     "opteron",  "opteron_sse3", "opteron(sse3)", "barcelona", "bobcat",
    "nano",    "sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"};
constexpr std::array<std::string_view, 3> kGenericCores = {"", "generic", "unknown"};

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

BlasCoreKind kind_of(std::string_view core) {
  std::string name;
  for (char c : core) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (listed(kAvx512Cores, name)) return BlasCoreKind::avx512;
  if (listed(kAvx2Cores, name)) return BlasCoreKind::avx2;
  if (listed(kPreAvx2Cores, name)) return BlasCoreKind::pre_avx2;
  if (listed(kGenericCores, name)) return BlasCoreKind::generic;
  return BlasCoreKind::other;
}

}  // namespace

const char* blas_core_kind_name(BlasCoreKind kind) noexcept {
  switch (kind) {
    case BlasCoreKind::avx512: return "avx512";
    case BlasCoreKind::avx2: return "avx2";
    case BlasCoreKind::pre_avx2: return "pre_avx2";
    case BlasCoreKind::generic: return "generic";
    case BlasCoreKind::other: return "other";
  }
  return "other";
}

CpuVectorFeatures cpu_vector_features() noexcept {
  CpuVectorFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports takes literals only.
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
#endif
  return f;
}

BlasCoreVerdict judge_blas_core(std::string_view core, CpuVectorFeatures cpu) {
  BlasCoreVerdict v;
  v.kind = kind_of(core);
  const bool old = v.kind == BlasCoreKind::pre_avx2 || v.kind == BlasCoreKind::generic;
  if (!old || !(cpu.avx2_fma || cpu.avx512f)) return v;
  v.generic = true;
  v.coretype = cpu.avx512f ? "SkylakeX" : "Haswell";
  const std::string kernels = v.kind == BlasCoreKind::generic ? "its generic kernels: it did not recognise this CPU"
                                                              : "pre-AVX2 kernels, likely a fallback for a CPU it "
                                                                "does not know";
  v.message = "OpenBLAS runs its '" + std::string(core.empty() ? "(unnamed)" : core) + "' core (" + kernels +
              ") on a CPU with " + (cpu.avx512f ? "AVX-512F" : "AVX2 and FMA") +
              ", so BLAS products run several times slower than they could; set OPENBLAS_CORETYPE=" + v.coretype +
              " in the environment";
  return v;
}

ProjectionBlas projection_blas() {
  ProjectionBlas p;
  p.config = openblas_get_config();
  p.core = openblas_get_corename();
  p.verdict = judge_blas_core(p.core, cpu_vector_features());
  return p;
}

}  // namespace attnkit
