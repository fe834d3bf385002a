// The fast kernels for any CPU: the same algorithms with one-float "vectors".
#include "cpu/simd/scalar.hpp"
#define ATTNKIT_ISA ScalarIsa
#define ATTNKIT_ISA_NAMESPACE scalar_target
#include "cpu/flash_forward.inl"
#include "cpu/flash_backward.inl"

namespace attnkit::cpu {
ForwardKernels forward_kernels_scalar() { return {scalar_target::run_item, scalar_target::run_probs_item, scalar_target::exp_array}; }
BackwardKernels backward_kernels_scalar() { return {scalar_target::run_backward_item}; }
}  // namespace attnkit::cpu
