// Status codes and the per-thread last error message of the C API.
#include "c_api/status.hpp"

#include <string>

namespace attnkit::c_api {
namespace {

thread_local std::string last_error;

}  // namespace

attnkit_status status_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return ATTNKIT_INVALID_ARGUMENT;
    case ErrorCode::invalid_shape: return ATTNKIT_INVALID_SHAPE;
    case ErrorCode::invalid_dtype: return ATTNKIT_INVALID_DTYPE;
    case ErrorCode::null_pointer: return ATTNKIT_NULL_POINTER;
    case ErrorCode::overlap: return ATTNKIT_OVERLAP;
    case ErrorCode::size_overflow: return ATTNKIT_SIZE_OVERFLOW;
    case ErrorCode::out_of_memory: return ATTNKIT_OUT_OF_MEMORY;
    case ErrorCode::unsupported: return ATTNKIT_UNSUPPORTED;
    case ErrorCode::io_error: return ATTNKIT_IO_ERROR;
    case ErrorCode::format_error: return ATTNKIT_FORMAT_ERROR;
    case ErrorCode::capacity_exceeded: return ATTNKIT_CAPACITY_EXCEEDED;
  }
  return ATTNKIT_INTERNAL_ERROR;
}

attnkit_status fail(attnkit_status status, const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {  // no memory even for the message: keep the status, lose the text
    last_error.clear();
  }
  return status;
}

}  // namespace attnkit::c_api

extern "C" {

const char* attnkit_last_error_message(void) { return attnkit::c_api::last_error.c_str(); }

const char* attnkit_status_name(attnkit_status status) {
  if (status == ATTNKIT_OK) return "ok";
  if (status == ATTNKIT_INTERNAL_ERROR) return "internal_error";
  // The inverse of status_of: every other status is some ErrorCode's, named as the C++ API names it
  // (capacity_exceeded is the last ErrorCode).
  for (int code = 0; code <= static_cast<int>(attnkit::ErrorCode::capacity_exceeded); ++code) {
    const auto error_code = static_cast<attnkit::ErrorCode>(code);
    if (attnkit::c_api::status_of(error_code) == status) return attnkit::error_code_name(error_code);
  }
  return "unknown";
}

}  // extern "C"
