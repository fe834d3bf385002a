// Every header the per-target kernel units use (flash_forward.inl, flash_backward.inl and what they
// include), included before the target region so that all of it is compiled for the baseline CPU
// (target_region.hpp says why). Only the vector wrappers (simd/avx2.hpp, ...) and simd/math.hpp's
// templates over them go inside the region.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "attnkit/dtype.hpp"
#include "attnkit/quantized.hpp"
#include "core/element_io.hpp"
#include "core/integer.hpp"
#include "core/philox.hpp"
#include "core/softmax_partial.hpp"
#include "cpu/backward_plan.hpp"
#include "cpu/forward_plan.hpp"
#include "cpu/geometry.hpp"
#include "cpu/kernels.hpp"
#include "cpu/simd/amx_model.hpp"
#include "cpu/simd/bf16_dot_model.hpp"
#include "cpu/target_region.hpp"
#include "cpu/visibility.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu {
using detail::ceil_div;
using detail::load_mask_row;
using detail::load_row;
using detail::load_row_part;
using detail::round_up;
using detail::store_row_part;
}  // namespace attnkit::cpu

#define ATTNKIT_KERNEL_HEADERS_INCLUDED
