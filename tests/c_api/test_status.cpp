// The C API's error boundary on its own (src/c_api/status.cpp compiled into this test, without the
// shared library): every attnkit::ErrorCode has its status and name, including the file codes no C
// function returns yet, and whatever a body throws becomes a status with its message recorded.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

#include "attnkit/attnkit.h"
#include "c_api/status.hpp"

namespace attnkit::c_api {
namespace {

TEST(CApiStatus, EveryErrorCodeHasItsStatusAndName) {
  const std::pair<ErrorCode, attnkit_status> codes[] = {
      {ErrorCode::invalid_argument, ATTNKIT_INVALID_ARGUMENT}, {ErrorCode::invalid_shape, ATTNKIT_INVALID_SHAPE},
      {ErrorCode::invalid_dtype, ATTNKIT_INVALID_DTYPE},       {ErrorCode::null_pointer, ATTNKIT_NULL_POINTER},
      {ErrorCode::overlap, ATTNKIT_OVERLAP},                   {ErrorCode::size_overflow, ATTNKIT_SIZE_OVERFLOW},
      {ErrorCode::out_of_memory, ATTNKIT_OUT_OF_MEMORY},       {ErrorCode::unsupported, ATTNKIT_UNSUPPORTED},
      {ErrorCode::io_error, ATTNKIT_IO_ERROR},                 {ErrorCode::format_error, ATTNKIT_FORMAT_ERROR},
      {ErrorCode::capacity_exceeded, ATTNKIT_CAPACITY_EXCEEDED},
  };
  for (const auto& [code, status] : codes) {
    EXPECT_EQ(status_of(code), status) << error_code_name(code);
    EXPECT_STREQ(attnkit_status_name(status), error_code_name(code));
    const attnkit_status got = guarded([code = code] { throw Error(code, std::string("x: ") + error_code_name(code)); });
    EXPECT_EQ(got, status);
    EXPECT_EQ(attnkit_last_error_message(), std::string("x: ") + error_code_name(code));
  }
  EXPECT_STREQ(attnkit_status_name(ATTNKIT_OK), "ok");
  EXPECT_STREQ(attnkit_status_name(ATTNKIT_INTERNAL_ERROR), "internal_error");
  EXPECT_STREQ(attnkit_status_name(12345), "unknown");
}

TEST(CApiStatus, AnyExceptionBecomesAStatus) {
  EXPECT_EQ(guarded([] {}), ATTNKIT_OK);
  EXPECT_EQ(guarded([] { throw std::bad_alloc(); }), ATTNKIT_OUT_OF_MEMORY);
  EXPECT_EQ(guarded([] { throw std::logic_error("a broken invariant"); }), ATTNKIT_INTERNAL_ERROR);
  EXPECT_EQ(std::string(attnkit_last_error_message()), "internal error: a broken invariant");
  EXPECT_EQ(guarded([] { throw 42; }), ATTNKIT_INTERNAL_ERROR);
  EXPECT_EQ(std::string(attnkit_last_error_message()), "internal error: an exception of unknown type");
}

}  // namespace
}  // namespace attnkit::c_api
