// The memory budget: what the system can give this process now, and the error when a request exceeds it.
#include "core/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "attnkit/error.hpp"
#include "attnkit/memory.hpp"

namespace attnkit {
namespace detail {
namespace {

constexpr std::uint64_t kUnknown = ByteCount::kSaturated;

std::atomic<std::uint64_t> g_memory_limit{0};  // 0 = ask the system

// The number after `key` in /proc/meminfo (in kB there), in bytes; kUnknown if absent.
std::uint64_t meminfo_bytes(const std::string& text, const char* key) {
  const std::size_t at = text.find(key);
  if (at == std::string::npos) return kUnknown;
  return (ByteCount(std::strtoull(text.c_str() + at + std::strlen(key), nullptr, 10)) * 1024).value();
}

std::string read_small_file(const char* path) {
  std::ifstream file(path);
  std::string text;
  std::getline(file, text, '\0');
  return text;
}

// A cgroup file holding a byte count, or "max" (cgroup v2) / a huge number (v1) for no limit.
std::uint64_t cgroup_bytes(const char* path) {
  const std::string text = read_small_file(path);
  if (text.empty() || text.compare(0, 3, "max") == 0) return kUnknown;
  return std::strtoull(text.c_str(), nullptr, 10);
}

// The cgroup's limit minus its usage (v2, then v1), or kUnknown without a limit.
std::uint64_t cgroup_headroom() {
  const std::pair<const char*, const char*> files[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limit_path, usage_path] : files) {
    const std::uint64_t limit = cgroup_bytes(limit_path);
    if (limit == kUnknown || limit >= (std::uint64_t{1} << 60)) continue;  // v1 writes ~2^63 for "none"
    const std::uint64_t usage = cgroup_bytes(usage_path);
    return usage == kUnknown || usage >= limit ? 0 : limit - usage;
  }
  return kUnknown;
}

// RLIMIT_AS minus the address space already mapped, or kUnknown without a limit.
std::uint64_t address_space_headroom() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kUnknown;
  const std::string statm = read_small_file("/proc/self/statm");
  const std::uint64_t mapped = (ByteCount(std::strtoull(statm.c_str(), nullptr, 10)) *
                                static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE))).value();
  return mapped >= limit.rlim_cur ? 0 : limit.rlim_cur - mapped;
}

std::uint64_t system_available_memory() {
  std::uint64_t available = kUnknown;
  const std::string meminfo = read_small_file("/proc/meminfo");
  const std::uint64_t mem = meminfo_bytes(meminfo, "MemAvailable:");
  if (mem != kUnknown) {
    const std::uint64_t swap = meminfo_bytes(meminfo, "SwapFree:");
    available = (ByteCount(mem) + ByteCount(swap == kUnknown ? 0 : swap)).value();
  } else {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = (ByteCount::of(pages) * ByteCount::of(page)).value();
  }
  return std::min({available, cgroup_headroom(), address_space_headroom()});
}

}  // namespace

std::uint64_t available_memory_now() {
  const std::uint64_t limit = g_memory_limit.load(std::memory_order_relaxed);
  return limit != 0 ? limit : system_available_memory();
}

std::string human_bytes(std::uint64_t bytes) {
  if (bytes == ByteCount::kSaturated) return "more than 2^64 bytes";
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.2f %s (%llu bytes)", value, units[unit], static_cast<unsigned long long>(bytes));
  }
  return text;
}

void fail_memory(ByteCount bytes, std::uint64_t available, const std::string& what) {
  throw Error(ErrorCode::out_of_memory, what + " needs " + human_bytes(bytes.value()) + ", but " +
                                            human_bytes(available) + " are available" +
                                            (g_memory_limit.load(std::memory_order_relaxed) != 0 ? " (set_memory_limit)" : ""));
}

}  // namespace detail

std::uint64_t available_memory() { return detail::available_memory_now(); }

void set_memory_limit(std::uint64_t bytes) { detail::g_memory_limit.store(bytes, std::memory_order_relaxed); }

}  // namespace attnkit
