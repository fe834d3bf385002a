// Which SIMD target the fast kernels run: one table of the targets (name, required CPU features,
// kernels), CPU detection, ATTNKIT_TARGET, and forcing by the caller.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "attnkit/error.hpp"
#include "attnkit/targets.hpp"
#include "cpu/kernels.hpp"

namespace attnkit {
namespace {

// CPU features, as bits of a set.
enum Feature : std::uint32_t {
  kAvx2 = 1u << 0,
  kFma = 1u << 1,
  kF16c = 1u << 2,
  kOsAvxState = 1u << 3,  // the OS saves YMM registers (XCR0 bits 1, 2)
  kAvx512f = 1u << 4,
  kAvx512bw = 1u << 5,
  kAvx512vl = 1u << 6,
  kAvx512dq = 1u << 7,
  kOsAvx512State = 1u << 8,  // the OS saves ZMM and mask registers (XCR0 bits 5, 6, 7)
  kAvx512Bf16 = 1u << 9,
  kAmxTile = 1u << 10,
  kAmxBf16 = 1u << 11,
  kOsAmxState = 1u << 12,       // the OS enables the tile configuration and data (XCR0 bits 17, 18)
  kAmxTileDataGranted = 1u << 13,  // Linux granted this process the tile data (arch_prctl)
  kAmxFp16 = 1u << 14,
};
// In the order errors name them: instruction sets first, then the operating system's support.
constexpr std::pair<Feature, const char*> kFeatureNames[] = {
    {kAvx2, "AVX2"},
    {kFma, "FMA"},
    {kF16c, "F16C"},
    {kAvx512f, "AVX512F"},
    {kAvx512bw, "AVX512BW"},
    {kAvx512vl, "AVX512VL"},
    {kAvx512dq, "AVX512DQ"},
    {kAvx512Bf16, "AVX512_BF16"},
    {kAmxTile, "AMX-TILE"},
    {kAmxBf16, "AMX-BF16"},
    {kAmxFp16, "AMX-FP16"},
    {kOsAvxState, "operating-system support for AVX registers (XCR0)"},
    {kOsAvx512State, "operating-system support for AVX-512 registers (XCR0)"},
    {kOsAmxState, "operating-system support for AMX tiles (XCR0)"},
    {kAmxTileDataGranted, "the AMX tile data, which Linux did not grant (arch_prctl ARCH_REQ_XCOMP_PERM)"},
};

constexpr std::uint32_t kAvx2Features = kAvx2 | kFma | kF16c | kOsAvxState;
constexpr std::uint32_t kAvx512Features = kAvx2Features | kAvx512f | kAvx512bw | kAvx512vl | kAvx512dq | kOsAvx512State;
constexpr std::uint32_t kAmxBf16Features =
    kAvx512Features | kAvx512Bf16 | kAmxTile | kAmxBf16 | kOsAmxState | kAmxTileDataGranted;
constexpr std::uint32_t kAmxFp16Features = kAmxBf16Features | kAmxFp16;

struct TargetEntry {
  Target target;
  const char* name;
  const char* requirements;
  std::uint32_t features;  // what the CPU must have
  bool emulated;           // a test stand-in, never the default
  bool bf16_dot;           // bf16 inputs' products by bf16 dot products
  Target vectors;          // a tile target's vector target (target_uses_tiles); else the target itself
  bool f16_tiles;          // f16 inputs' forward products on the tiles too (target_uses_f16_tiles)
  cpu::ForwardKernels (*forward)();  // nullptr: not compiled into this build
  cpu::BackwardKernels (*backward)();
};

#if defined(__x86_64__) || defined(__i386__)
#define ATTNKIT_X86_KERNELS(name) &cpu::forward_kernels_##name, &cpu::backward_kernels_##name
#else
#define ATTNKIT_X86_KERNELS(name) nullptr, nullptr
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(ATTNKIT_EMULATED_TARGETS)
#define ATTNKIT_EMULATED_KERNELS(name) &cpu::forward_kernels_##name, &cpu::backward_kernels_##name
#else
#define ATTNKIT_EMULATED_KERNELS(name) nullptr, nullptr
#endif

// Best first.
constexpr TargetEntry kTargets[] = {
    {Target::amx_fp16, "amx_fp16",
     "AMX-TILE, AMX-BF16, AMX-FP16 and the tile data from the operating system, AVX-512F/BW/VL/DQ, AVX512_BF16, AVX2, "
     "FMA, F16C",
     kAmxFp16Features, false, true, Target::avx512, true, ATTNKIT_X86_KERNELS(amx_fp16)},
    {Target::amx_bf16, "amx_bf16",
     "AMX-TILE, AMX-BF16 and the tile data from the operating system, AVX-512F/BW/VL/DQ, AVX512_BF16, AVX2, FMA, F16C",
     kAmxBf16Features, false, true, Target::avx512, false, ATTNKIT_X86_KERNELS(amx_bf16)},
    {Target::avx512_bf16, "avx512_bf16", "AVX-512F/BW/VL/DQ, AVX512_BF16, AVX2, FMA, F16C",
     kAvx512Features | kAvx512Bf16, false, true, Target::avx512_bf16, false, ATTNKIT_X86_KERNELS(avx512_bf16)},
    {Target::avx512, "avx512", "AVX-512F/BW/VL/DQ, AVX2, FMA, F16C", kAvx512Features, false, false, Target::avx512,
     false, ATTNKIT_X86_KERNELS(avx512)},
    {Target::avx2, "avx2", "AVX2, FMA, F16C", kAvx2Features, false, false, Target::avx2, false,
     ATTNKIT_X86_KERNELS(avx2)},
    {Target::amx_fp16_emulated, "amx_fp16_emulated", "AVX2, FMA, F16C", kAvx2Features, true, true,
     Target::avx512_emulated, true, ATTNKIT_EMULATED_KERNELS(amx_fp16_emulated)},
    {Target::amx_bf16_emulated, "amx_bf16_emulated", "AVX2, FMA, F16C", kAvx2Features, true, true,
     Target::avx512_emulated, false, ATTNKIT_EMULATED_KERNELS(amx_bf16_emulated)},
    {Target::avx512_bf16_emulated, "avx512_bf16_emulated", "AVX2, FMA, F16C", kAvx2Features, true, true,
     Target::avx512_bf16_emulated, false, ATTNKIT_EMULATED_KERNELS(avx512_bf16_emulated)},
    {Target::avx512_emulated, "avx512_emulated", "AVX2, FMA, F16C", kAvx2Features, true, false, Target::avx512_emulated,
     false, ATTNKIT_EMULATED_KERNELS(avx512_emulated)},
    {Target::scalar, "scalar", "nothing", 0, false, false, Target::scalar, false, &cpu::forward_kernels_scalar,
     &cpu::backward_kernels_scalar},
};

const TargetEntry& entry(Target target) {
  for (const TargetEntry& e : kTargets)
    if (e.target == target) return e;
  return kTargets[std::size(kTargets) - 1];  // unreachable for a valid enumerator
}

#if defined(__x86_64__) || defined(__i386__)
// Whether cpuid's vendor string (leaf 0: EBX, EDX, ECX) is `name`, e.g. "GenuineIntel".
bool vendor_is(std::string_view name) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  char vendor[12];
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string_view(vendor, sizeof vendor) == name;
}

std::uint64_t read_xcr0() {
  std::uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));  // _xgetbv would need -mxsave
  return (std::uint64_t{edx} << 32) | eax;
}

// Linux gives a process the AMX tile data (8 KiB of register state per thread) only on request, once
// for all its threads (Linux 5.16 and later); without it the first tile instruction faults. Asked
// only on CPUs with tiles.
bool tile_data_granted() {
#if defined(__linux__)
  constexpr long kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM (asm/prctl.h)
  constexpr long kTileData = 18;               // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
  return false;
#endif
}

std::uint32_t detect_features() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  std::uint32_t f = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return 0;
  if (ecx & bit_FMA) f |= kFma;
  if (ecx & bit_F16C) f |= kF16c;
  if ((ecx & bit_OSXSAVE) && (ecx & bit_AVX)) {
    const std::uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) == 0x6) f |= kOsAvxState;
    if ((xcr0 & 0xE6) == 0xE6) f |= kOsAvx512State;
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
    if (ebx & bit_AVX2) f |= kAvx2;
    if (ebx & bit_AVX512F) f |= kAvx512f;
    if (ebx & bit_AVX512DQ) f |= kAvx512dq;
    if (ebx & bit_AVX512BW) f |= kAvx512bw;
    if (ebx & bit_AVX512VL) f |= kAvx512vl;
    if (edx & (1u << 24)) f |= kAmxTile;
    if (edx & (1u << 22)) f |= kAmxBf16;
    if (eax >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) {
      if (eax & (1u << 5)) f |= kAvx512Bf16;
      if (eax & (1u << 21)) f |= kAmxFp16;
    }
  }
  if ((f & kOsAvxState) && ((read_xcr0() >> 17) & 3) == 3) f |= kOsAmxState;
  if ((f & kAmxTile) && (f & kOsAmxState) && tile_data_granted()) f |= kAmxTileDataGranted;
  return f;
}

// CPUs known to run vdpbf16ps at least at the f32 FMA rate: AMD Zen 4 and Zen 5 (family 19h models
// 10h and up, family 1Ah), measured at twice the FMA rate. Intel's (Cooper Lake to Granite Rapids)
// run it at half the FMA rate (measured on a Xeon of family 6, model 207), so there bf16 inputs are
// widened and multiplied by f32 FMA. See docs/tuning.md, "Choosing the target".
bool detect_fast_bf16_dot() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!vendor_is("AuthenticAMD") || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned family = ((eax >> 8) & 0xF) + ((eax >> 20) & 0xFF);
  const unsigned model = ((eax >> 4) & 0xF) | (((eax >> 16) & 0xF) << 4);
  return family >= 0x1A || (family == 0x19 && model >= 0x10);
}
#else
bool vendor_is(std::string_view) { return false; }
std::uint32_t detect_features() { return 0; }
bool detect_fast_bf16_dot() { return false; }
#endif

// Both read once: every call resolves its target (default_target), and under a hypervisor each
// cpuid instruction traps to it. Asked per call, the vendor check's two cpuid took about 17 µs, 6% of
// a 0.28 ms decode step on an AVX-512 Zen 5 VM (docs/tuning.md, "Choosing the target").
bool bf16_dot_is_fast() {
  static const bool fast = detect_fast_bf16_dot();
  return fast;
}

// -1: as the CPU's vendor says; 0 or 1: forced by a test.
std::atomic<int> g_short_decode_blocks{-1};

std::uint32_t cpu_features() {
  static const std::uint32_t features = detect_features();
  return features;
}

bool compiled(const TargetEntry& e) { return e.forward != nullptr; }
bool runnable(const TargetEntry& e) { return compiled(e) && (cpu_features() & e.features) == e.features; }

constexpr int kNoForcedTarget = -1;
std::atomic<int> g_forced_target{kNoForcedTarget};

// The target named by ATTNKIT_TARGET, read once; -2 for a name that is no target.
int environment_target() {
  static const int from_env = [] {
    const char* env = std::getenv("ATTNKIT_TARGET");
    if (env == nullptr || *env == '\0') return kNoForcedTarget;
    const std::optional<Target> target = target_from_name(env);
    return target ? static_cast<int>(*target) : -2;  // an unknown name: reported by active_target()
  }();
  return from_env;
}

// Why `target` cannot run here, for errors: "this CPU cannot run target avx512: it lacks AVX512F".
std::string cannot_run(Target target) {
  const TargetEntry& e = entry(target);
  std::string why = std::string("this CPU cannot run target ") + e.name;
  if (!compiled(e)) return why + ": it is not compiled into this build";
  return why + ": it lacks " + missing_cpu_feature(target) + " (" + e.name + " needs " + e.requirements + ")";
}

}  // namespace

const char* target_name(Target target) noexcept { return entry(target).name; }
const char* target_requirements(Target target) noexcept { return entry(target).requirements; }
bool target_is_emulated(Target target) noexcept { return entry(target).emulated; }
bool target_uses_bf16_dot(Target target) noexcept { return entry(target).bf16_dot; }
bool target_uses_tiles(Target target) noexcept { return entry(target).vectors != target; }
Target tile_vector_target(Target target) noexcept { return entry(target).vectors; }
bool target_uses_f16_tiles(Target target) noexcept { return entry(target).f16_tiles; }
Target call_target(Target target, DType q, DType k, DType v, Pass pass) noexcept {
  const bool all_bf16 = q == DType::bf16 && k == DType::bf16 && v == DType::bf16;
  const bool all_f16 = q == DType::f16 && k == DType::f16 && v == DType::f16;
  if (all_bf16 || (all_f16 && pass == Pass::forward && target_uses_f16_tiles(target))) return target;
  return tile_vector_target(target);
}

std::vector<Target> compiled_targets() {
  std::vector<Target> out;
  for (const TargetEntry& e : kTargets)
    if (compiled(e)) out.push_back(e.target);
  return out;
}

std::vector<Target> supported_targets() {
  std::vector<Target> out;
  for (const TargetEntry& e : kTargets)
    if (runnable(e)) out.push_back(e.target);
  return out;
}

std::optional<Target> target_from_name(std::string_view name) noexcept {
  for (const TargetEntry& e : kTargets) {
    if (name == e.name) return e.target;
  }
  return std::nullopt;
}

std::string target_names() {
  std::string out;
  for (const TargetEntry& e : kTargets) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

std::string missing_cpu_feature(Target target) {
  const std::uint32_t missing = entry(target).features & ~cpu_features();
  for (const auto& [feature, name] : kFeatureNames)
    if (missing & feature) return name;
  return {};
}

namespace {

// The best compiled, non-emulated target a CPU with these features runs: the first in the table, but
// that a vector bf16-dot target needs a CPU known to run vdpbf16ps at least at the f32 FMA rate.
Target best_target_for(std::uint32_t features, bool fast_bf16_dot) {
  for (const TargetEntry& e : kTargets) {
    if (!compiled(e) || e.emulated || (features & e.features) != e.features) continue;
    if (e.bf16_dot && !target_uses_tiles(e.target) && !fast_bf16_dot) continue;
    return e.target;
  }
  return Target::scalar;
}

}  // namespace

Target default_target() { return best_target_for(cpu_features(), bf16_dot_is_fast()); }

std::string default_target_reason() {
  const Target best = default_target();
  std::string why = std::string(target_name(best)) + ": the best target this CPU supports";
  if (best == Target::avx512 && runnable(entry(Target::avx512_bf16))) {
    why += " (avx512_bf16 is supported too, but this CPU is not known to run vdpbf16ps at the f32 FMA "
           "rate, so bf16 inputs are widened to f32 and multiplied with FMA; ATTNKIT_TARGET=avx512_bf16 "
           "forces the bf16 dot products)";
  } else if (best == Target::amx_fp16) {
    why += " (bf16 attention, forward and backward, and f16 attention's forward on the AMX tiles, bf16 decoding of up "
           "to 8 rows a KV head on vectors; f16 backward, f32 inputs and quantized caches on avx512)";
  } else if (best == Target::amx_bf16) {
    why += " (bf16 attention, forward and backward, on the AMX tiles, decoding of up to 8 rows a KV head on vectors; f32 "
           "and f16 inputs and quantized caches on avx512)";
  } else if (best == Target::avx512_bf16) {
    why += " (bf16 inputs' products with vdpbf16ps, which this CPU runs at least at the f32 FMA rate)";
  }
  return why;
}

void set_target(Target target) {
  if (!runnable(entry(target))) throw Error(ErrorCode::unsupported, "set_target: " + cannot_run(target));
  g_forced_target.store(static_cast<int>(target));
}

void reset_target() { g_forced_target.store(kNoForcedTarget); }

Target active_target() {
  const int forced = g_forced_target.load();
  if (forced != kNoForcedTarget) return static_cast<Target>(forced);
  const int from_env = environment_target();
  if (from_env == -2) {
    throw Error(ErrorCode::invalid_argument, std::string("ATTNKIT_TARGET: unknown target '") +
                                                 std::getenv("ATTNKIT_TARGET") + "' (targets: " + target_names() + ")");
  }
  if (from_env != kNoForcedTarget) {
    const auto target = static_cast<Target>(from_env);
    if (!runnable(entry(target))) throw Error(ErrorCode::unsupported, "ATTNKIT_TARGET: " + cannot_run(target));
    return target;
  }
  return default_target();
}

namespace cpu {

bool short_decode_blocks() {
  static const bool intel = vendor_is("GenuineIntel");
  const int forced = g_short_decode_blocks.load(std::memory_order_relaxed);
  return forced < 0 ? intel : forced == 1;
}
void set_decode_blocks_for_testing(std::optional<bool> short_blocks) {
  g_short_decode_blocks.store(short_blocks ? (*short_blocks ? 1 : 0) : -1, std::memory_order_relaxed);
}

Target kernel_target(const detail::Problem& p, Pass pass) {
  return call_target(p.target, p.q.dtype(), p.k.dtype(), p.v.dtype(), pass);
}

Target default_target_for(const CpuProfile& cpu) {
  std::uint32_t features = 0;
  if (cpu.avx2) features |= kAvx2Features;
  if (cpu.avx512) features |= kAvx512Features;
  if (cpu.avx512_bf16) features |= kAvx512Bf16;
  if (cpu.amx_bf16) features |= kAmxTile | kAmxBf16 | kOsAmxState;
  if (cpu.amx_fp16) features |= kAmxFp16;
  if (cpu.tile_data_granted) features |= kAmxTileDataGranted;
  return best_target_for(features, cpu.fast_bf16_dot);
}

ForwardKernels forward_kernels(Target target) { return entry(target).forward(); }
BackwardKernels backward_kernels(Target target) { return entry(target).backward(); }

}  // namespace cpu
}  // namespace attnkit
