// The fast kernels for any CPU: the same algorithms with one-float "vectors" (no target region: the
// whole unit is compiled for the baseline CPU).
#include "cpu/kernel_headers.hpp"
#define ATTNKIT_ISA ScalarIsa
#define ATTNKIT_ISA_NAMESPACE scalar_target
#define ATTNKIT_TARGET_NAME scalar
#include "cpu/simd/scalar.hpp"
#include "cpu/kernels_target.inl"
#include "cpu/kernel_entry_points.inl"
