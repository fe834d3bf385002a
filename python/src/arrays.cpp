// attnkit._core — array conversion (see arrays.hpp).
#include "arrays.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"

namespace nb = nanobind;

namespace attnkit::python {
namespace {

std::string dlpack_dtype_name(nb::dlpack::dtype dtype) {
  using Code = nb::dlpack::dtype_code;
  std::string kind;
  switch (static_cast<Code>(dtype.code)) {
    case Code::Int: kind = "int"; break;
    case Code::UInt: kind = "uint"; break;
    case Code::Float: kind = "float"; break;
    case Code::Bfloat: kind = "bfloat"; break;
    case Code::Complex: kind = "complex"; break;
    case Code::Bool: return "bool";
    default: kind = "dtype code " + std::to_string(dtype.code) + " of "; break;
  }
  std::string name = kind + std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

template <class View, class Array>
View view_of(const char* name, const Array& array, int rank) {
  if (array.ndim() != static_cast<std::size_t>(rank)) {
    throw Error(ErrorCode::invalid_shape, std::string(name) + ": expected " + std::to_string(rank) +
                                              " dimensions, got " + std::to_string(array.ndim()));
  }
  const DType dtype = dtype_of(name, array.dtype());
  return View(array.data(), dtype, array.shape_ptr(), array.stride_ptr(), rank);
}

}  // namespace

DType dtype_of(const char* name, nb::dlpack::dtype dtype) {
  using Code = nb::dlpack::dtype_code;
  if (dtype.lanes == 1) {
    if (dtype.code == static_cast<std::uint8_t>(Code::Float)) {
      if (dtype.bits == 64) return DType::f64;
      if (dtype.bits == 32) return DType::f32;
      if (dtype.bits == 16) return DType::f16;
    }
    if (dtype.code == static_cast<std::uint8_t>(Code::Bfloat) && dtype.bits == 16) return DType::bf16;
    if (dtype.code == static_cast<std::uint8_t>(Code::Bool) && dtype.bits == 8) return DType::boolean;
    if (dtype.code == static_cast<std::uint8_t>(Code::Int) && dtype.bits == 32) return DType::i32;  // offsets
    if (dtype.code == static_cast<std::uint8_t>(Code::Int) && dtype.bits == 64) return DType::i64;
  }
  throw Error(ErrorCode::invalid_dtype, std::string(name) + ": dtype " + dlpack_dtype_name(dtype) +
                                            " is not one of float16, bfloat16, float32, float64, bool, int32 or int64");
}

ConstTensorView input_view(const char* name, const InputArray& array, int rank) {
  return view_of<ConstTensorView>(name, array, rank);
}

TensorView output_view(const char* name, const OutputArray& array, int rank) {
  return view_of<TensorView>(name, array, rank);
}

nb::ndarray<nb::numpy> owned_numpy(Tensor tensor) {
  if (tensor.dtype() == DType::bf16) tensor = Tensor::converted(tensor.view(), DType::f32);
  const DType dtype = tensor.dtype();
  const auto code = dtype == DType::boolean                      ? nb::dlpack::dtype_code::Bool
                    : dtype == DType::i32 || dtype == DType::i64 ? nb::dlpack::dtype_code::Int
                                                                 : nb::dlpack::dtype_code::Float;
  const nb::dlpack::dtype element{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(8 * dtype_size(dtype)), 1};
  std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
  auto owned = std::make_unique<Tensor>(std::move(tensor));
  void* data = owned->raw();
  nb::capsule owner(owned.get(), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  owned.release();  // the capsule deletes it now
  return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, element);
}

}  // namespace attnkit::python
