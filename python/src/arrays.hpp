// attnkit._core — array conversion: numpy arrays and torch tensors (through DLPack or the buffer
// protocol, without a copy) seen as attnkit tensor views.
#pragma once

#include <nanobind/ndarray.h>

#include "attnkit/tensor.hpp"

namespace attnkit::python {

// Any dtype, any strides, CPU memory; read-only for inputs, writable for outputs. No conversion is
// ever requested, so what arrives is the caller's memory.
using InputArray = nanobind::ndarray<nanobind::ro, nanobind::device::cpu>;
using OutputArray = nanobind::ndarray<nanobind::device::cpu>;

// The attnkit dtype of a DLPack dtype: float16/32/64, bfloat16, bool, or int32/64 (offsets). Raises Error(invalid_dtype)
// naming the argument for anything else.
DType dtype_of(const char* name, nanobind::dlpack::dtype dtype);

// A view of `array`, which must have `rank` dimensions (Error(invalid_shape) otherwise). Strides are
// in elements, as DLPack gives them: zero and negative strides pass through unchanged.
ConstTensorView input_view(const char* name, const InputArray& array, int rank);
TensorView output_view(const char* name, const OutputArray& array, int rank);

// A tensor of any rank handed to Python as a numpy array that owns it (the array keeps the tensor
// alive). numpy has no bfloat16, so bf16 comes back as float32 (exactly: every bf16 value is a
// float32 value); bool and int32/64 as themselves, the other floats as themselves.
nanobind::ndarray<nanobind::numpy> owned_numpy(Tensor tensor);

}  // namespace attnkit::python
