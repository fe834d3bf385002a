// attnkit/blas.hpp: the check of OpenBLAS's core (the kernels it chose for this CPU), apart from the
// projections that use it (linear.cpp).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>

#include "attnkit/blas.hpp"

extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

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
