/// \file
/// .safetensors files (the format of huggingface/safetensors, as PyTorch users save weights).
///
/// A .safetensors file is
/// \code{.unparsed}
///   N, the header length, as 8 bytes little-endian | N bytes of UTF-8 JSON | the data buffer.
/// \endcode
/// The JSON object maps each tensor name to
/// \code{.unparsed}
///   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
/// \endcode
/// with byte offsets relative to the start of the data buffer; the optional key "__metadata__" maps
/// to an object of string values. The elements are little-endian, in C order.
///
/// Reading takes the dtypes F64, F32, F16, BF16, I64, I32 and BOOL (attnkit's DTypes) and tensors of
/// any rank. The reader trusts nothing: a header longer than 100,000,000 bytes or than the file, JSON
/// that is not strictly valid (bad syntax or UTF-8, duplicate keys, wrong value types, missing or
/// unknown fields), a negative, fractional or overflowing size, offsets outside the data buffer or
/// whose span does not match shape × dtype size, tensors that overlap or leave a gap (the tensors,
/// sorted by offset, must tile the data buffer exactly, as the reference implementation requires),
/// and unknown or unsupported dtypes (U8, I8, F8_E4M3, ...) all raise attnkit::Error(format_error)
/// naming the file, the problem and the tensor. Lengths are checked against the file size before
/// anything is allocated, so a hostile header cannot make the reader allocate more than the file holds
/// (plus bookkeeping for the header, itself capped). Files that cannot be opened or read raise
/// io_error. BOOL bytes are read as 0 or 1 (any non-zero byte is true).
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/tensor.hpp"

namespace attnkit {

/// The contents of a .safetensors file.
struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;         ///< by name, sorted
  std::map<std::string, std::string> metadata;   ///< the "__metadata__" object; empty if absent
};

/// Reads the .safetensors file at `path`, checking it as described for this file
/// (Error(format_error) or Error(io_error) otherwise).
SafetensorsFile read_safetensors(const std::string& path);

/// The same, from the bytes of a whole file in memory; `source_name` starts every error message.
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& source_name = "<memory>");

/// Writes the tensors in the given order, their data contiguous and little-endian, after a header
/// padded with spaces to a multiple of 8 bytes (as the reference writer does). Views may have any
/// strides; every DType is written as itself. Names must be non-empty, unique, valid UTF-8 and not
/// "__metadata__"; metadata keys and values must be valid UTF-8 (invalid_argument otherwise, and
/// invalid_shape, size_overflow or null_pointer for a view that cannot be read). The file is written
/// under a temporary name in the same directory and renamed over `path` at the end, so a failed write
/// (io_error) leaves no partial file and an existing file at `path` untouched.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, ConstTensorView>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Writes every tensor of `file` (any rank) in name order, with its metadata: what read_safetensors
/// returned round-trips to the same tensors.
void write_safetensors(const std::string& path, const SafetensorsFile& file);

}  // namespace attnkit
