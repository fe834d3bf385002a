// attnkit._core — files: the library's own .safetensors reader, its tensors as numpy arrays, and
// several output files written all or nothing (attnkit::StagedOutputs).
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <map>
#include <string>
#include <utility>

#include "arrays.hpp"
#include "attnkit/safetensors.hpp"
#include "attnkit/staged_outputs.hpp"
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
  nb::class_<StagedOutputs>(m, "StagedOutputs",
                            "Several output files, all or nothing (attnkit/staged_outputs.hpp): add() checks a "
                            "path up front, write() writes it under a temporary name, commit() replaces every "
                            "target or none.")
      .def(nb::init<>())
      .def("add", &StagedOutputs::add, "path"_a, "argument"_a = "",
           "Checks `path` as an output (ValueError naming `argument` and the path) and reserves its temporary file.")
      .def("write", &StagedOutputs::write, "path"_a, "write_to"_a,
           "Calls write_to(file) with the file to write `path`'s contents to now.")
      .def("commit", &StagedOutputs::commit, "Replaces every written target, or none.")
      .def("discard", &StagedOutputs::discard,
           "Removes every temporary file not committed, leaving each target as it was (after a failure).");
}

}  // namespace attnkit::python
