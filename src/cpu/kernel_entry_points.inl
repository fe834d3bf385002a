// The pair of entry points of a kernels_<target>.cpp, which the target table (target.cpp) lists:
// after the unit's target region, so that they are compiled for the baseline CPU (the table may call
// them on any CPU). The file that includes this defines ATTNKIT_ISA, ATTNKIT_ISA_NAMESPACE and
// ATTNKIT_TARGET_NAME (the suffix of the entry points). No include guard on purpose.
#define ATTNKIT_CONCAT_INNER(a, b) a##b
#define ATTNKIT_CONCAT(a, b) ATTNKIT_CONCAT_INNER(a, b)

namespace attnkit::cpu {
ForwardKernels ATTNKIT_CONCAT(forward_kernels_, ATTNKIT_TARGET_NAME)() {
  namespace t = ATTNKIT_ISA_NAMESPACE;
  using Isa = ATTNKIT_ISA;
  return {ATTNKIT_ISA::kGeometry, t::run_item, t::run_probs_item, t::exp_array<exp<Isa>>,
          t::exp_array<exp_of_nonpositive<Isa>>, t::round_to_bf16};
}
BackwardKernels ATTNKIT_CONCAT(backward_kernels_, ATTNKIT_TARGET_NAME)() {
  return {ATTNKIT_ISA::kGeometry, ATTNKIT_ISA::kDotBf16, ATTNKIT_ISA_NAMESPACE::run_backward_item};
}
}  // namespace attnkit::cpu
