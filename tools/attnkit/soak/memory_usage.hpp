// The process's memory, read from the system: resident pages and bytes the C heap has handed out.
// The soak run compares them after warm-up and at the end to show the memory stays flat.
#pragma once

#include <cstdint>

namespace attnkit::cli::soak {

struct MemoryUsage {
  std::int64_t resident_bytes = 0;  // /proc/self/statm: pages in RAM
  std::int64_t heap_bytes = 0;      // mallinfo2: bytes allocated and not freed (arena + mmapped)
  // False when malloc is not glibc's (AddressSanitizer, valgrind): mallinfo2 then reads 0, and the
  // resident set holds freed memory in quarantine, so neither says anything about leaks; those
  // tools check for leaks themselves, at exit.
  bool heap_known = false;
};

MemoryUsage memory_usage();

}  // namespace attnkit::cli::soak
