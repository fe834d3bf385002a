// Runs a kernel only if the scratch memory it will allocate fits the budget (attnkit/memory.hpp), and
// turns an allocation that fails inside it into Error(out_of_memory): a call never aborts for memory,
// and (the kernels compute before they write) leaves its outputs as they were.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "attnkit/error.hpp"
#include "core/memory.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

// "forward (fast kernel) with q [1, 8, 4096, 64], k [1, 8, 4096, 64], v [1, 8, 4096, 64]"
inline std::string describe_call(const char* call, Kernel kernel, const Problem& p) {
  return std::string(call) + " (" + kernel_name(kernel) + " kernel) with q " + p.q.shape_string() + ", k " +
         p.k.shape_string() + ", v " + p.v.shape_string();
}

template <class Run>
void run_within_memory(const char* call, Kernel kernel, const Problem& p, ByteCount scratch, Run&& run) {
  require_memory(scratch, [&] { return describe_call(call, kernel, p) + ": its scratch memory"; });
  try {
    run();
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, describe_call(call, kernel, p) + ": an allocation of scratch memory failed");
  } catch (const std::length_error&) {  // a std::vector asked for more than it can ever hold
    throw Error(ErrorCode::out_of_memory, describe_call(call, kernel, p) + ": an allocation of scratch memory failed");
  }
}

// Runs a public call whole (validation, bookkeeping, kernel), so that memory that runs out anywhere
// in it raises Error(out_of_memory), never a bare std::bad_alloc. run_within_memory's message, which
// names the shapes, reaches the caller when the kernel's scratch is what failed.
template <class Body>
void reporting_out_of_memory(const char* call, Body&& body) {
  try {
    body();
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, std::string(call) + ": out of memory");
  } catch (const std::length_error&) {
    throw Error(ErrorCode::out_of_memory, std::string(call) + ": out of memory (a buffer larger than can exist)");
  }
}

}  // namespace attnkit::detail
