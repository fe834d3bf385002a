// Peak extra memory of a long forward call, from /proc/self/status.
#include "bench/peak_memory.hpp"

#include <fstream>
#include <limits>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/tensor.hpp"
#include "bench/attnkit_threads.hpp"
#include "bench/timing.hpp"

namespace attnkit::bench {

namespace {

constexpr std::int64_t kSequence = 65536;  // n = m: the scores alone would be 16 GiB in f32
constexpr std::int64_t kHeadDim = 64;
constexpr std::int64_t kBytesPerKiB = 1024;
constexpr float kFill = 0.5f;  // any finite value: the call's memory does not depend on the numbers
// Writing this to /proc/<pid>/clear_refs resets the peak resident set size (VmHWM), Linux >= 4.0.
constexpr const char* kResetPeakRss = "5";

// A "VmRSS:   1234 kB" style field of /proc/self/status, in bytes; -1 if absent.
std::int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string name;
  std::int64_t kib = 0;
  while (status >> name) {
    if (name == field + ":" && status >> kib) return kib * kBytesPerKiB;
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return -1;
}

bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << kResetPeakRss;
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

Tensor filled(std::int64_t rows) {
  Tensor t(DType::f32, {1, 1, rows, kHeadDim});
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = kFill;
  return t;
}

}  // namespace

PeakMemoryResult peak_memory_case(int threads) {
  PeakMemoryResult r;
  r.name = "peak_memory_n" + std::to_string(kSequence) + "_d" + std::to_string(kHeadDim);
  r.n = r.m = kSequence;
  r.d = kHeadDim;
  r.threads = threads;
  r.score_matrix_bytes = r.n * r.m * static_cast<std::int64_t>(sizeof(float));
  return r;
}

PeakMemoryResult measure_peak_memory(int threads, const std::optional<std::string>& skip_reason) {
  PeakMemoryResult r = peak_memory_case(threads);
  if (skip_reason) {
    r.skipped = skip_reason;
    return r;
  }
  const Tensor q = filled(r.n), k = filled(r.m), v = filled(r.m);
  Tensor out = filled(r.n);
  r.operand_bytes = static_cast<std::int64_t>(q.nbytes() + k.nbytes() + v.nbytes() + out.nbytes());
  AttentionOptions options;
  options.kernel = Kernel::fast;
  r.kernel = kernel_name(resolve_kernel(options.kernel));
  const AttnkitThreads scope(threads);
  if (!reset_peak_rss()) {
    r.skipped = "cannot reset the peak resident set size through /proc/self/clear_refs";
    return r;
  }
  const std::int64_t before = status_bytes("VmRSS");
  r.seconds = seconds_of([&] { forward(q.view(), k.view(), v.view(), out.view(), options); });
  r.extra_bytes = status_bytes("VmHWM") - before;
  return r;
}

}  // namespace attnkit::bench
