// attnkit._core — files: the library's own .safetensors reader, its tensors as numpy arrays.
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/safetensors.hpp"
#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attnkit::python {
namespace {

// A tensor of any rank as a numpy array that owns it. numpy has no bfloat16, so bf16 comes back as
// float32 (exactly: every bf16 value is a float32 value).
nb::ndarray<nb::numpy> owned_array(Tensor tensor) {
  if (tensor.dtype() == DType::bf16) tensor = Tensor::converted(tensor.view(), DType::f32);
  const DType dtype = tensor.dtype();
  const auto code = dtype == DType::boolean                   ? nb::dlpack::dtype_code::Bool
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

// (tensors by name, metadata): the file read with the GIL released, then handed to numpy.
std::pair<std::map<std::string, nb::ndarray<nb::numpy>>, std::map<std::string, std::string>> read(const std::string& path) {
  SafetensorsFile file;
  {
    nb::gil_scoped_release release;
    file = read_safetensors(path);
  }
  std::map<std::string, nb::ndarray<nb::numpy>> arrays;
  for (auto& [name, tensor] : file.tensors) arrays.emplace(name, owned_array(std::move(tensor)));
  return {std::move(arrays), std::move(file.metadata)};
}

}  // namespace

void bind_files(nb::module_& m) {
  m.def("read_safetensors", &read, "path"_a,
        "Reads a .safetensors file with attnkit's reader: (tensors by name as numpy arrays, metadata).");
}

}  // namespace attnkit::python
