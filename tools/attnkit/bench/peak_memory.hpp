// Peak extra memory of one long-sequence forward call (n = m = 65536, d = 64, one head), which must
// stay O((n + m)·d): the fast kernel streams keys and never holds the n×m scores (16 GiB here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace attnkit::bench {

struct PeakMemoryResult {
  std::string name;  // "peak_memory_n65536_d64", matched by --filter like a case name
  std::int64_t n = 0, m = 0, d = 0;
  int threads = 0;
  std::optional<std::string> skipped;  // why it did not run
  std::string kernel;
  double seconds = 0;
  std::int64_t extra_bytes = 0;         // peak resident memory during the call minus that before it
  std::int64_t operand_bytes = 0;       // q, k, v and out, allocated and touched before the call
  std::int64_t score_matrix_bytes = 0;  // n·m f32: what materialising the scores would take
};

// The case's identity, without running it.
PeakMemoryResult peak_memory_case(int threads);

// Runs the case with Kernel::fast on `threads` threads, unless `skip_reason` is given. Measured in
// this process: the kernel's peak resident set (VmHWM, reset through /proc/self/clear_refs just
// before the call) minus the resident set at that moment. Not in a forked child: a child forked
// while a thread pool runs inherits its locks but none of its threads.
PeakMemoryResult measure_peak_memory(int threads, const std::optional<std::string>& skip_reason);

}  // namespace attnkit::bench
