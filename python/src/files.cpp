// attnkit._core — files: the library's own .safetensors reader, its tensors as numpy arrays.
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <map>
#include <string>
#include <utility>

#include "arrays.hpp"
#include "attnkit/safetensors.hpp"
#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attnkit::python {
namespace {

// (tensors by name, metadata): the file read with the GIL released, then handed to numpy.
std::pair<std::map<std::string, nb::ndarray<nb::numpy>>, std::map<std::string, std::string>> read(const std::string& path) {
  SafetensorsFile file;
  {
    nb::gil_scoped_release release;
    file = read_safetensors(path);
  }
  std::map<std::string, nb::ndarray<nb::numpy>> arrays;
  for (auto& [name, tensor] : file.tensors) arrays.emplace(name, owned_numpy(std::move(tensor)));
  return {std::move(arrays), std::move(file.metadata)};
}

}  // namespace

void bind_files(nb::module_& m) {
  m.def("read_safetensors", &read, "path"_a,
        "Reads a .safetensors file with attnkit's reader: (tensors by name as numpy arrays, metadata).");
}

}  // namespace attnkit::python
