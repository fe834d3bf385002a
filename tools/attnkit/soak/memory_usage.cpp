#include "soak/memory_usage.hpp"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace attnkit::cli::soak {

MemoryUsage memory_usage() {
  MemoryUsage usage;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    long size = 0, resident = 0;
    if (std::fscanf(statm, "%ld %ld", &size, &resident) == 2) usage.resident_bytes = resident * sysconf(_SC_PAGESIZE);
    std::fclose(statm);
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();
  usage.heap_bytes = static_cast<std::int64_t>(info.uordblks + info.hblkhd);
  usage.heap_known = usage.heap_bytes > 0;  // glibc's heap is never empty by the time this is asked
#endif
  return usage;
}

}  // namespace attnkit::cli::soak
