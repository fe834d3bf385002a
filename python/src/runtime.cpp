// attnkit._core — what is not one call: attnkit::Error as Python exceptions, the thread count, the
// library's version and SIMD target.
#include <nanobind/stl/string.h>

#include <exception>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/memory.hpp"
#include "attnkit/targets.hpp"
#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attnkit::python {
namespace {

// A dtype the argument does not take is a TypeError, as in Python; a failed allocation is a
// MemoryError; every other attnkit::Error (shapes, option values, ...) is a ValueError.
PyObject* python_type_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_dtype: return PyExc_TypeError;
    case ErrorCode::out_of_memory: return PyExc_MemoryError;
    default: return PyExc_ValueError;
  }
}

// The exception keeps the library's message unchanged and carries its code, e.g.
// ValueError("scale: must be finite and > 0, got -1") with .code == "invalid_argument".
void translate_attnkit_error(const std::exception_ptr& error, void*) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    PyObject* type = python_type_of(e.code());
    nb::object exception = nb::borrow(type)(nb::str(e.what()));
    nb::setattr(exception, "code", nb::str(error_code_name(e.code())));
    PyErr_SetObject(type, exception.ptr());
  }
}

}  // namespace

void bind_runtime(nb::module_& m) {
  nb::register_exception_translator(translate_attnkit_error);

  m.def("set_num_threads", &set_num_threads, "n"_a,
        "Threads attnkit's kernels use; n <= 0 restores the default (ATTNKIT_NUM_THREADS, else all cores); "
        "more than 1024 (attnkit's kMaxThreads) raises ValueError.");
  m.def("get_num_threads", &num_threads, "Threads attnkit's kernels use now.");
  m.def("version", [] { return std::string(version()); }, "The C++ library's version, \"MAJOR.MINOR.PATCH\".");
  m.def("set_memory_limit", &set_memory_limit, "bytes"_a,
        "Bytes one request may take, in place of what the system reports; 0 restores that.");
  m.def("available_memory", &available_memory, "Bytes one request may take now.");
  m.def("active_target", [] { return std::string(target_name(active_target())); },
        "The SIMD target the fast kernels run on (\"avx512_bf16\", \"avx512\", \"avx2\", \"scalar\", ...).");
}

}  // namespace attnkit::python
