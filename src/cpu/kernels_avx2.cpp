// The fast kernels for x86-64 with AVX2, FMA and F16C (compiled with -mavx2 -mfma -mf16c; only
// called when the CPU has all three).
#include "cpu/simd/avx2.hpp"
#define ATTNKIT_ISA Avx2Isa
#define ATTNKIT_ISA_NAMESPACE avx2_target
#include "cpu/flash_forward.inl"
#include "cpu/flash_backward.inl"

namespace attnkit::cpu {
ForwardKernels forward_kernels_avx2() { return {avx2_target::run_item, avx2_target::run_probs_item, avx2_target::exp_array}; }
BackwardKernels backward_kernels_avx2() { return {avx2_target::run_backward_item}; }
}  // namespace attnkit::cpu
