/// \file
/// Errors.
///
/// Every failure the library reports is an attnkit::Error. Its message names the argument, the
/// shapes involved and what was expected, e.g.
/// \code{.unparsed}
///   "k: batch size 3 does not match q's batch size 2 (q [2, 8, 128, 64], k [3, 8, 128, 64])".
/// \endcode
/// The code lets a caller branch without parsing text.
#pragma once

#include <stdexcept>
#include <string>

namespace attnkit {

/// What kind of failure an attnkit::Error reports.
enum class ErrorCode {
  invalid_argument,  ///< a scalar option out of range: scale <= 0, dropout outside [0, 1), softcap < 0, ...
  invalid_shape,     ///< wrong rank, mismatched sizes, not broadcastable, wrong element count
  invalid_dtype,     ///< a dtype the argument or the chosen kernel does not take
  null_pointer,      ///< a null data pointer on a view with a non-zero number of elements
  overlap,           ///< an output's memory overlaps an input's or another output's
  size_overflow,     ///< a size or byte count that does not fit in 64 bits
  out_of_memory,     ///< an allocation the request needs failed
  unsupported,       ///< a valid request this build cannot serve (e.g. a kernel not compiled in)
  io_error,          ///< a file could not be opened, read or written
  format_error,      ///< a file's contents are malformed (truncated, bad header, unsupported layout)
  capacity_exceeded, ///< a fixed-size resource is full: a KV cache's sequences, a sequence's length, the block pool
};

/// Stable lower-case name of a code, as printed by the CLI ("invalid_shape").
const char* error_code_name(ErrorCode code) noexcept;

/// The exception every attnkit failure raises: a message naming the argument, the shapes and what
/// was expected (what()), and an ErrorCode to branch on (code()).
class Error : public std::runtime_error {
 public:
  /// An error of kind `code` with the full `message`.
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// The kind of failure.
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace attnkit
