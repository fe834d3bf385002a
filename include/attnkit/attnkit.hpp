/// \file
/// Exact scaled dot-product attention. The one header to include: it includes every other public
/// C++ header of attnkit (except attnkit/dist.hpp, which needs MPI).
#pragma once

#include "attnkit/attention.hpp"
#include "attnkit/blas.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"
#include "attnkit/memory.hpp"
#include "attnkit/mha.hpp"
#include "attnkit/npy.hpp"
#include "attnkit/options.hpp"
#include "attnkit/quantized.hpp"
#include "attnkit/safetensors.hpp"
#include "attnkit/staged_outputs.hpp"
#include "attnkit/targets.hpp"
#include "attnkit/tensor.hpp"
#include "attnkit/varlen.hpp"
