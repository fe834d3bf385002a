// attnkit._core: the C++ side of the Python package. The Python side (python/attnkit/functional.py)
// checks and reshapes the arguments, allocates the outputs, and makes one call into sdpa().
#include "bindings.hpp"

NB_MODULE(_core, m) {
  m.doc() = "attnkit's C++ library, bound with nanobind; use the functions of the attnkit package instead.";
  attnkit::python::bind_runtime(m);
  attnkit::python::bind_sdpa(m);
  attnkit::python::bind_kv_cache(m);
  attnkit::python::bind_varlen(m);
  attnkit::python::bind_files(m);
  attnkit::python::bind_drawing(m);
}
