/// \file
/// NumPy .npy files.
///
/// Reads versions 1.0, 2.0 and 3.0 with little-endian float16/32/64, bool, int32 and int64 data in
/// C order. Big-endian, Fortran-order, object or other dtypes, truncated files and malformed or
/// oversized headers raise attnkit::Error (format_error) naming the file and the problem. The file's
/// size is checked against its header before anything is allocated, so a hostile header cannot make
/// the reader allocate more than the data the file really holds (plus the header, capped at 1 MiB).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "attnkit/tensor.hpp"

namespace attnkit {

/// Reads the .npy file at `path` into a tensor of its dtype and shape. Raises Error(io_error) if
/// the file cannot be read and Error(format_error) if it is not a supported .npy file.
Tensor read_npy(const std::string& path);

/// The same, from the bytes of a whole file in memory (the same parser and checks); `source_name`
/// starts every error message where read_npy names the path.
Tensor parse_npy(std::span<const std::byte> bytes, const std::string& source_name = "<memory>");

/// Writes a contiguous copy of `tensor` to the .npy file `path`. f64, f32, f16, bool, i32 and i64
/// are written as themselves; bf16 has no .npy type and is written as float32 (exactly).
void write_npy(const std::string& path, const Tensor& tensor);
/// Writes a contiguous copy of `view` (any rank, any strides); dtypes as for the Tensor overload.
void write_npy(const std::string& path, ConstTensorView view);

}  // namespace attnkit
