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
  switch (status) {
    case ATTNKIT_OK: return "ok";
    case ATTNKIT_INVALID_ARGUMENT: return attnkit::error_code_name(attnkit::ErrorCode::invalid_argument);
    case ATTNKIT_INVALID_SHAPE: return attnkit::error_code_name(attnkit::ErrorCode::invalid_shape);
    case ATTNKIT_INVALID_DTYPE: return attnkit::error_code_name(attnkit::ErrorCode::invalid_dtype);
    case ATTNKIT_NULL_POINTER: return attnkit::error_code_name(attnkit::ErrorCode::null_pointer);
    case ATTNKIT_OVERLAP: return attnkit::error_code_name(attnkit::ErrorCode::overlap);
    case ATTNKIT_SIZE_OVERFLOW: return attnkit::error_code_name(attnkit::ErrorCode::size_overflow);
    case ATTNKIT_OUT_OF_MEMORY: return attnkit::error_code_name(attnkit::ErrorCode::out_of_memory);
    case ATTNKIT_UNSUPPORTED: return attnkit::error_code_name(attnkit::ErrorCode::unsupported);
    case ATTNKIT_IO_ERROR: return attnkit::error_code_name(attnkit::ErrorCode::io_error);
    case ATTNKIT_FORMAT_ERROR: return attnkit::error_code_name(attnkit::ErrorCode::format_error);
    case ATTNKIT_CAPACITY_EXCEEDED: return attnkit::error_code_name(attnkit::ErrorCode::capacity_exceeded);
    case ATTNKIT_INTERNAL_ERROR: return "internal_error";
    default: return "unknown";
  }
}

}  // extern "C"
