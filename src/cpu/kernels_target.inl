// The kernels of every kernels_<target>.cpp: the forward and backward kernels compiled once for the
// target's ISA wrapper, inside the unit's target region (target_region.hpp). The file that includes
// this defines ATTNKIT_ISA and ATTNKIT_ISA_NAMESPACE, and has included cpu/kernel_headers.hpp before
// the region. No include guard on purpose.
#ifndef ATTNKIT_KERNEL_HEADERS_INCLUDED
#error "include cpu/kernel_headers.hpp before the target region: shared headers must be compiled for the baseline CPU"
#endif
#include "cpu/flash_forward.inl"
#include "cpu/flash_backward.inl"
