// The body of every kernels_<target>.cpp: the forward and backward kernels compiled once for the
// target's ISA wrapper, and the pair of entry points the target table (target.cpp) lists. The file
// that includes this defines ATTNKIT_ISA, ATTNKIT_ISA_NAMESPACE and ATTNKIT_TARGET_NAME (the suffix of
// its entry points). No include guard on purpose.
#include "cpu/flash_forward.inl"
#include "cpu/flash_backward.inl"

#define ATTNKIT_CONCAT_INNER(a, b) a##b
#define ATTNKIT_CONCAT(a, b) ATTNKIT_CONCAT_INNER(a, b)

namespace attnkit::cpu {
ForwardKernels ATTNKIT_CONCAT(forward_kernels_, ATTNKIT_TARGET_NAME)() {
  namespace t = ATTNKIT_ISA_NAMESPACE;
  using Isa = ATTNKIT_ISA;
  return {ATTNKIT_ISA::kGeometry, t::run_item, t::run_probs_item, t::exp_array<exp<Isa>>,
          t::exp_array<exp_of_nonpositive<Isa>>};
}
BackwardKernels ATTNKIT_CONCAT(backward_kernels_, ATTNKIT_TARGET_NAME)() {
  return {ATTNKIT_ISA::kGeometry, ATTNKIT_ISA::kDotBf16, ATTNKIT_ISA_NAMESPACE::run_backward_item};
}
}  // namespace attnkit::cpu
