/// \file
/// The BLAS behind the multi-head module's projections (OpenBLAS), and a check of the
/// kernels it chose for this CPU.
///
/// OpenBLAS picks its kernels (its "core") from the CPU's model number when it loads. A release older
/// than the CPU does not know it and falls back to a generic core: OpenBLAS 0.3.21 (Debian 12) runs
/// its SSE3 'Prescott' kernels on an Intel Xeon of 2023 (family 6, model 207), and sgemm runs about
/// 10× below what the CPU can do. OPENBLAS_CORETYPE in the environment forces a core: Haswell on a
/// CPU with AVX2 and FMA, SkylakeX on one with AVX-512. The module checks this once, when its first
/// projection runs, and writes judge_blas_core's message to stderr when the core is generic;
/// `attnkit bench` prints the same verdict.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace attnkit {

/// The vector instructions a BLAS core can use, as this CPU and OS provide them.
struct CpuVectorFeatures {
  bool avx2_fma = false;  ///< AVX2 and FMA: what OpenBLAS's Haswell and Zen cores need
  bool avx512f = false;   ///< AVX-512 Foundation: what its SkylakeX core needs
};

/// This CPU's vector features (checked with __builtin_cpu_supports, which also asks whether the OS
/// saves the registers); all false on a CPU that is not x86-64.
CpuVectorFeatures cpu_vector_features() noexcept;

/// What an OpenBLAS core name says about its kernels.
enum class BlasCoreKind : std::uint8_t {
  avx512,    ///< SkylakeX, Cooperlake, SapphireRapids
  avx2,      ///< Haswell, Zen
  pre_avx2,  ///< SSE and AVX-only cores (Prescott, Core2, Nehalem, Sandybridge, Opteron, Bobcat, ...)
             ///< and AMD's family-15h cores (Bulldozer to Excavator)
  generic,   ///< "generic", "Unknown" or empty: OpenBLAS did not recognise the CPU
  other,     ///< a name this list does not know (a newer OpenBLAS, another architecture): not judged
};

/// Stable name of a core kind: "avx512", "avx2", "pre_avx2", "generic" or "other".
const char* blas_core_kind_name(BlasCoreKind kind) noexcept;

/// What judge_blas_core concludes about a BLAS core on this CPU.
struct BlasCoreVerdict {
  BlasCoreKind kind = BlasCoreKind::other;  ///< the kind of the core's kernels
  /// The core is pre_avx2 or generic while the CPU has AVX2 + FMA or AVX-512F: the BLAS runs far
  /// below this CPU's speed.
  bool generic = false;
  std::string coretype;  ///< when generic: the OPENBLAS_CORETYPE to set, "SkylakeX" or "Haswell"; else ""
  std::string message;   ///< when generic: one sentence saying what runs and what to set; else ""
};

/// Judges a BLAS core. A pure function of its arguments: the core name as openblas_get_corename()
/// gives it (compared without regard to case) and the CPU's features.
BlasCoreVerdict judge_blas_core(std::string_view core, CpuVectorFeatures cpu);

/// The OpenBLAS the projections run with, as projection_blas() reports it.
struct ProjectionBlas {
  std::string config;       ///< openblas_get_config(): version, build options and core
  std::string core;         ///< openblas_get_corename()
  BlasCoreVerdict verdict;  ///< judge_blas_core(core, cpu_vector_features())
};

/// The OpenBLAS this process runs the projections with.
ProjectionBlas projection_blas();

}  // namespace attnkit
