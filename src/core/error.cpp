#include "attnkit/error.hpp"

namespace attnkit {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::invalid_shape: return "invalid_shape";
    case ErrorCode::invalid_dtype: return "invalid_dtype";
    case ErrorCode::null_pointer: return "null_pointer";
    case ErrorCode::overlap: return "overlap";
    case ErrorCode::size_overflow: return "size_overflow";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::io_error: return "io_error";
    case ErrorCode::format_error: return "format_error";
    case ErrorCode::capacity_exceeded: return "capacity_exceeded";
  }
  return "unknown";
}

}  // namespace attnkit
