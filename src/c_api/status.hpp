// The C API's error boundary: every attnkit_* function runs its body through guarded(), which turns
// any exception into a status code and the thread's last error message. No exception crosses it.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "attnkit/attnkit.h"
#include "attnkit/error.hpp"

namespace attnkit::c_api {

// The status of an attnkit::Error's code (every code has one).
attnkit_status status_of(ErrorCode code) noexcept;

// Records `message` as this thread's last error and returns `status`.
attnkit_status fail(attnkit_status status, const char* message) noexcept;

// Runs body(); ATTNKIT_OK, or the failure's status with its message recorded.
template <class Body>
attnkit_status guarded(Body&& body) noexcept {
  try {
    body();
    return ATTNKIT_OK;
  } catch (const Error& error) {
    return fail(status_of(error.code()), error.what());
  } catch (const std::bad_alloc&) {
    return fail(ATTNKIT_OUT_OF_MEMORY, "out of memory: an allocation failed");
  } catch (const std::exception& error) {
    return fail(ATTNKIT_INTERNAL_ERROR, (std::string("internal error: ") + error.what()).c_str());
  } catch (...) {
    return fail(ATTNKIT_INTERNAL_ERROR, "internal error: an exception of unknown type");
  }
}

}  // namespace attnkit::c_api
