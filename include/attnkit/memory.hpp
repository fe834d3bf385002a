/// \file
/// The memory budget.
///
/// Linux overcommits: an allocation far larger than RAM can "succeed" and the process is killed later,
/// when the pages are touched. So attnkit asks first: before it allocates a large block (a Tensor, a
/// kernel's scratch, a KV cache's pools), it compares the request with the memory the system can give
/// and raises Error(out_of_memory) naming what needed how much, before anything is allocated. An
/// allocation that still fails raises Error(out_of_memory) too; attnkit never aborts for memory.
#pragma once

#include <cstdint>

namespace attnkit {

/// Bytes one request may take. Default: what the system can give now, the smallest of
/// MemAvailable + SwapFree (/proc/meminfo), the cgroup's limit minus its usage, and RLIMIT_AS minus
/// the address space in use. Requests under 64 MiB are not checked (asking costs a few system calls).
std::uint64_t available_memory();

/// Sets the bytes one request may take, in place of what the system reports (0 restores that). For
/// engines that budget memory, and for tests that need "too large" to be deterministic. It is a limit
/// per request, not a running total.
void set_memory_limit(std::uint64_t bytes);

}  // namespace attnkit
