// The fast kernels for any CPU: the same algorithms with one-float "vectors".
#include "cpu/simd/scalar.hpp"
#define ATTNKIT_ISA ScalarIsa
#define ATTNKIT_ISA_NAMESPACE scalar_target
#define ATTNKIT_TARGET_NAME scalar
#include "cpu/kernels_target.inl"
