// The fast forward kernel for any CPU: the same algorithm with one-float "vectors".
#include "cpu/simd/scalar.hpp"
#define ATTNKIT_ISA ScalarIsa
#define ATTNKIT_ISA_NAMESPACE scalar_target
#include "cpu/flash_forward.inl"

namespace attnkit::cpu {
ForwardKernels forward_kernels_scalar() { return {scalar_target::run_item, scalar_target::run_probs_item, scalar_target::exp_array}; }
}  // namespace attnkit::cpu
