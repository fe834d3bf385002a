// attnkit._core — the pieces of the extension module, one per concern, each adding its functions.
#pragma once

#include <nanobind/nanobind.h>

namespace attnkit::python {

void bind_runtime(nanobind::module_& m);   // runtime.cpp: error translation, threads, version
void bind_sdpa(nanobind::module_& m);      // sdpa.cpp: the attention call, forward and backward
void bind_kv_cache(nanobind::module_& m);  // kv_cache.cpp: the KV cache and attention over it
void bind_varlen(nanobind::module_& m);    // varlen.cpp: packed variable-length batches
void bind_files(nanobind::module_& m);     // files.cpp: the .safetensors reader
void bind_drawing(nanobind::module_& m);   // drawing.cpp: heatmap pictures and pages (or drawing_missing.cpp)

}  // namespace attnkit::python
