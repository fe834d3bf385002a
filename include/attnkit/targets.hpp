/// \file
/// SIMD targets of the fast kernels.
///
/// The fast kernels are compiled once per instruction set and the best one the CPU supports is chosen
/// at run time. The caller can see the active target and force another one (tests run the kernels on
/// every target the CPU supports). ATTNKIT_TARGET=NAME in the environment forces one at start-up.
///
/// The emulated targets are test stand-ins, compiled into builds with ATTNKIT_EMULATED_TARGETS (on
/// when the tests are built): the AVX-512 kernels' source and tile geometry run on 16-lane vectors
/// made of two AVX2 halves, and vdpbf16ps and the AMX tiles by portable models, so that a machine
/// without AVX-512 or AMX tests the same code paths. They are never chosen by default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/dtype.hpp"

namespace attnkit {

/// An instruction set the fast kernels are compiled for.
enum class Target : std::uint8_t {
  scalar,                ///< portable C++, any CPU
  avx2,                  ///< x86-64 with AVX2, FMA and F16C
  avx512,                ///< x86-64 with AVX-512F/BW/VL/DQ (and AVX2, FMA, F16C)
  avx512_bf16,           ///< avx512 plus AVX512_BF16: bf16 inputs' products with vdpbf16ps
  avx512_emulated,       ///< test stand-in for avx512 on any AVX2 CPU
  avx512_bf16_emulated,  ///< test stand-in for avx512_bf16 on any AVX2 CPU (vdpbf16ps modelled)
  amx_bf16,              ///< avx512_bf16 plus AMX-TILE and AMX-BF16: bf16 attention's products on AMX tiles
  amx_bf16_emulated,     ///< test stand-in for amx_bf16 on any AVX2 CPU (the tiles modelled)
  amx_fp16,              ///< amx_bf16 plus AMX-FP16: f16 attention's forward products on the tiles too
  amx_fp16_emulated,     ///< test stand-in for amx_fp16 on any AVX2 CPU (the tiles modelled)
};

/// The kernels of a call: the forward or the backward.
enum class Pass : std::uint8_t {
  forward,   ///< attention, decoding, packed batches
  backward,  ///< the gradients
};

/// Stable name of a target: "scalar", "avx2", "avx512", "avx512_bf16", "avx512_emulated",
/// "avx512_bf16_emulated", "amx_bf16", "amx_bf16_emulated", "amx_fp16", "amx_fp16_emulated".
const char* target_name(Target target) noexcept;
/// The CPU features a target needs, e.g. "AVX2, FMA, F16C".
const char* target_requirements(Target target) noexcept;
/// Whether the target is an emulated test stand-in.
bool target_is_emulated(Target target) noexcept;
/// Whether the target computes bf16 inputs' products with bf16 dot products (P rounded to bf16
/// before P·V, as FlashAttention and torch do) rather than f32 FMA. A tile target's bf16 calls run on
/// its tiles with P rounded the same way (target_uses_tiles).
bool target_uses_bf16_dot(Target target) noexcept;
/// Whether the target runs bf16 attention's products on matrix tiles (AMX). Such a target runs on its
/// tiles the forward and backward of every call whose q, k and v are bf16, and every other call (f32
/// and f16 inputs, quantized KV caches) on its vector target (tile_vector_target).
bool target_uses_tiles(Target target) noexcept;
/// Whether the target also runs the forward of calls whose q, k and v are f16 on its tiles
/// (tdpfp16ps, P rounded to f16 before P·V): amx_fp16 and its stand-in. Their f16 backward stays on
/// the vector target, in float32 products: its dS can exceed f16's range.
bool target_uses_f16_tiles(Target target) noexcept;
/// The vector target a tile target hands its other calls to: avx512 for amx_bf16 and amx_fp16 (whose
/// CPUs run vdpbf16ps at half the f32 FMA rate), avx512_emulated for their stand-ins; any other target
/// itself.
Target tile_vector_target(Target target) noexcept;
/// The target whose kernels run a pass of a call of q, k and v of these dtypes while `target` is in
/// use: `target` itself, but that a tile target runs on its tiles only calls whose q, k and v are all
/// bf16 (both passes) or, with target_uses_f16_tiles, all f16 (the forward), and the others on
/// tile_vector_target(target). It never depends on the sizes, so that a packed sequence is computed as
/// a call on it alone would be.
Target call_target(Target target, DType q, DType k, DType v, Pass pass) noexcept;

/// Targets built into this library, best first (emulated ones last but for scalar).
std::vector<Target> compiled_targets();
/// Targets built into this library that this CPU can run, best first (emulated ones last but for
/// scalar).
std::vector<Target> supported_targets();
/// The target called `name` ("avx2", as target_name gives), or nothing.
std::optional<Target> target_from_name(std::string_view name) noexcept;
/// Every target's name, "avx512_bf16, avx512, ...", for messages that list them.
std::string target_names();

/// The first feature of target_requirements this CPU (or its operating system) lacks; empty when it
/// has them all.
std::string missing_cpu_feature(Target target);
/// The target chosen when none is forced: the best supported non-emulated target, except that
/// avx512_bf16 is chosen over avx512 only on CPUs known to run vdpbf16ps at least at the f32 FMA rate.
/// amx_bf16 is chosen on CPUs with AMX-TILE and AMX-BF16 whose operating system grants the tile data,
/// amx_fp16 on those that have AMX-FP16 as well.
Target default_target();
/// Why default_target() chose its target: the target's name and the reason, for messages.
std::string default_target_reason();

/// The target the fast kernels use now: the one forced by set_target or ATTNKIT_TARGET, else
/// default_target(). Raises Error(unsupported) naming the missing CPU feature if ATTNKIT_TARGET names
/// a target this CPU cannot run, and Error(invalid_argument) if it names no target at all.
Target active_target();
/// Forces a target (Error(unsupported), naming the missing feature, if the CPU cannot run it).
void set_target(Target target);
/// Returns to the default: default_target(), or the one ATTNKIT_TARGET names.
void reset_target();

}  // namespace attnkit
