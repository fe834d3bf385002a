// The entry points each target compiles (src/cpu/kernels_<target>.cpp), and the target-independent
// pieces they share (src/cpu/forward.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "attnkit/targets.hpp"
#include "core/problem.hpp"
#include "core/softmax_partial.hpp"
#include "cpu/backward_plan.hpp"
#include "cpu/forward_plan.hpp"
#include "cpu/geometry.hpp"

namespace attnkit::cpu {

struct ForwardKernels {
  Geometry geometry;  // the tiles the plan pads rows and d_v to
  // Streams one work item's keys in the given split; finalizes its rows when the plan has one split,
  // else stores their partial (max, sum, acc).
  void (*run_item)(const ForwardPlan& plan, std::int64_t item, std::int64_t split);
  // Writes the item's probabilities (plan.row_lse must hold its rows' log-sum-exp).
  void (*run_probs_item)(const ForwardPlan& plan, std::int64_t item);
  // out[i] = e^in[i] with the kernels' vector exp, so tests can measure its error on each target.
  void (*exp)(const float* in, float* out, std::int64_t count);
  // The same with the online softmax's exp, for in[i] <= 0 or NaN (simd/math.hpp exp_of_nonpositive).
  void (*softmax_exp)(const float* in, float* out, std::int64_t count);
  // out[i] = in[i] rounded to bf16 (core/bf16_rounding.hpp's bf16_bits_nearest_even, bit for bit),
  // kLanes at a time: finalize_row's bf16 output rows.
  void (*round_to_bf16)(const float* in, std::uint16_t* out, std::int64_t count);
};

struct BackwardKernels {
  Geometry geometry;  // the tiles the plan pads rows, d_k and d_v to
  bool dot_bf16;      // bf16 inputs take bf16 dot products (the plan then holds Q and dO as bf16 pairs)
  // Computes one work item: dK and dV of its keys, and its chunk's share of dQ.
  void (*run_item)(const BackwardPlan& plan, std::int64_t item);
};

// Whether decoding (an item of one tile) steps over Geometry::decode_key_block keys, requesting its
// value rows into L1, rather than over the forward's key blocks with f32 value rows requested into
// L2: each was measured the faster on its vendor's CPUs, the short blocks on Intel (geometry.hpp;
// docs/tuning.md, "Decode blocks").
// Read once (cpuid); set_decode_blocks_for_testing(true or false) forces either, std::nullopt undoes it.
bool short_decode_blocks();
void set_decode_blocks_for_testing(std::optional<bool> short_blocks);

// The kernels of a target, from the target table (target.cpp); the target must be compiled in.
ForwardKernels forward_kernels(Target target);
BackwardKernels backward_kernels(Target target);

// The target whose kernels run a problem's pass: call_target of its target and its q, k and v dtypes
// (a tile target hands the calls it does not run on its tiles to its vector target, whose figures
// those calls keep).
Target kernel_target(const detail::Problem& p, Pass pass);

// What default_target() chooses from, so that tests can ask for the choice on CPUs other than this
// one: the instruction sets the CPU and its operating system support, whether Linux granted the AMX
// tile data, and whether the CPU is known to run vdpbf16ps at least at the f32 FMA rate.
struct CpuProfile {
  bool avx2 = false, avx512 = false, avx512_bf16 = false, amx_bf16 = false, amx_fp16 = false, tile_data_granted = false;
  bool fast_bf16_dot = false;
};
Target default_target_for(const CpuProfile& cpu);

// Each target's translation unit (kernels_<target>.cpp) defines its pair.
#define ATTNKIT_DECLARE_TARGET_KERNELS(name) \
  ForwardKernels forward_kernels_##name();   \
  BackwardKernels backward_kernels_##name();
ATTNKIT_DECLARE_TARGET_KERNELS(scalar)
ATTNKIT_DECLARE_TARGET_KERNELS(avx2)
ATTNKIT_DECLARE_TARGET_KERNELS(avx512)
ATTNKIT_DECLARE_TARGET_KERNELS(avx512_bf16)
ATTNKIT_DECLARE_TARGET_KERNELS(avx512_emulated)
ATTNKIT_DECLARE_TARGET_KERNELS(avx512_bf16_emulated)
ATTNKIT_DECLARE_TARGET_KERNELS(amx_bf16)
ATTNKIT_DECLARE_TARGET_KERNELS(amx_bf16_emulated)
ATTNKIT_DECLARE_TARGET_KERNELS(amx_fp16)
ATTNKIT_DECLARE_TARGET_KERNELS(amx_fp16_emulated)
#undef ATTNKIT_DECLARE_TARGET_KERNELS

// Writes row `row` of an item from its softmax partial: out = acc / sum and lse = max + log sum, or 0
// and −inf for a row with no visible key; records the log-sum-exp when probabilities are requested.
// Divides the partial's acc in place (it is the row's last use), so that writing a row needs no
// scratch of its own.
void finalize_row(const ForwardPlan& plan, std::int64_t item, std::int64_t row, std::int64_t head, std::int64_t query,
                  detail::SoftmaxPartial partial);

}  // namespace attnkit::cpu
