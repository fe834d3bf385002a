// attnkit._core — drawing, in a build without Cairo or fontconfig: the head viewer
// (python/attnkit/heads.py) reads has_drawing and says what to install.
#include "bindings.hpp"

namespace attnkit::python {

void bind_drawing(nanobind::module_& m) { m.attr("has_drawing") = false; }

}  // namespace attnkit::python
