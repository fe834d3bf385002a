// The memory budget: requests larger than the memory the system can give raise out_of_memory before
// anything is allocated, and an allocation that fails anyway raises too; nothing aborts.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"

namespace attnkit {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::int64_t kHuge = std::int64_t{1} << 40;  // a size that only zero strides make cheap

// Restores the system's figure when a test that set a limit ends, pass or fail.
struct MemoryLimit {
  explicit MemoryLimit(std::uint64_t bytes) { set_memory_limit(bytes); }
  ~MemoryLimit() { set_memory_limit(0); }
};

// The error a call raised, or nothing.
template <class Call>
std::optional<Error> error_of(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MemoryBudget, TheSystemFigureIsPlausible) {
  const std::uint64_t available = available_memory();
  EXPECT_GT(available, 64 * kMiB) << "a machine that runs the tests has more than 64 MiB free";
  EXPECT_LT(available, std::uint64_t{1} << 60) << "no machine has an exbibyte";
  {
    MemoryLimit limit(300 * kMiB);
    EXPECT_EQ(available_memory(), 300 * kMiB);
  }
  EXPECT_NE(available_memory(), 300 * kMiB);
}

TEST(MemoryBudget, TensorLargerThanTheBudgetRaisesBeforeAllocating) {
  MemoryLimit limit(256 * kMiB);
  const auto error = error_of([] { Tensor t(DType::f32, {1024, 1024, 128}); });  // 512 MiB
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::out_of_memory);
  EXPECT_TRUE(contains(error->what(), "Tensor f32 [1024, 1024, 128] needs 512.00 MiB")) << error->what();
  EXPECT_TRUE(contains(error->what(), "256.00 MiB (268435456 bytes) are available (set_memory_limit)")) << error->what();
  EXPECT_NO_THROW(Tensor(DType::f32, {1024, 1024, 32}));  // 128 MiB: within the budget
}

TEST(MemoryBudget, TensorBeyondTheMachineRaisesWithoutALimit) {
  // 2^50 floats: 4 PiB. Overcommit could let the allocation "succeed" and the zero-fill kill us.
  const auto error = error_of([] { Tensor t(DType::f32, {std::int64_t{1} << 25, std::int64_t{1} << 25}); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::out_of_memory);
  EXPECT_TRUE(contains(error->what(), "needs 4.00 PiB")) << error->what();
}

TEST(MemoryBudget, TensorSizesThatOverflowAreSizeErrors) {
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(error_of([&] { Tensor t(DType::f32, {max, 2}); })->code(), ErrorCode::size_overflow);
  EXPECT_EQ(error_of([&] { Tensor t(DType::f64, {max / 4}); })->code(), ErrorCode::size_overflow);
  EXPECT_EQ(error_of([] { Tensor t(DType::f32, {3, -1}); })->code(), ErrorCode::invalid_shape);
}

// q, k, v of absurd length through zero strides: a few bytes of input, but the reference needs n×m
// logits. The call must refuse before allocating, name the kernel and the shapes, and write nothing.
TEST(MemoryBudget, ReferenceScratchBeyondTheMachineRaises) {
  const std::int64_t n = std::int64_t{1} << 20;
  double one = 1.0;
  const ConstTensorView q(&one, DType::f64, {1, 1, n, 1}, {0, 0, 0, 0});
  const ConstTensorView k(&one, DType::f64, {1, 1, n, 1}, {0, 0, 0, 0});
  std::vector<double> out_data(static_cast<std::size_t>(n), std::nan(""));
  const TensorView out = TensorView::contiguous(out_data.data(), DType::f64, {1, 1, n, 1});
  const auto error = error_of([&] { forward(q, k, k, out); });  // 3 · 2^40 doubles
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::out_of_memory);
  EXPECT_TRUE(contains(error->what(), "forward (reference kernel) with q [1, 1, 1048576, 1], k [1, 1, 1048576, 1], "
                                         "v [1, 1, 1048576, 1]: its scratch memory needs")) << error->what();
  EXPECT_TRUE(std::isnan(out_data[0]) && std::isnan(out_data.back())) << "nothing is written on error";
}

TEST(MemoryBudget, FastDecodeScratchBeyondTheMachineRaises) {
  // One query over 2^40 keys: the split-key decode path would hold 2^30 partial rows.
  float one = 1.0f, out_data[1] = {std::nanf("")};
  const ConstTensorView q(&one, DType::f32, {1, 1, 1, 1}, {0, 0, 0, 0});
  const ConstTensorView k(&one, DType::f32, {1, 1, kHuge, 1}, {0, 0, 0, 0});
  const TensorView out(out_data, DType::f32, {1, 1, 1, 1}, {1, 1, 1, 1});
  const auto error = error_of([&] { forward(q, k, k, out); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::out_of_memory);
  EXPECT_TRUE(contains(error->what(), "forward (fast kernel) with q [1, 1, 1, 1], k [1, 1, 1099511627776, 1], v [1, 1, 1099511627776, 1]: its scratch memory needs")) << error->what();
  EXPECT_TRUE(std::isnan(out_data[0]));
}

TEST(MemoryBudget, FastBackwardScratchBeyondTheBudgetRaises) {
  // 2^20 query rows of one feature: 4 MiB per tensor, but the kernel pads each row's float32 copies
  // (Q, dO and one dQ part per key chunk) to whole tiles, over 1 GiB in all.
  MemoryLimit limit(128 * kMiB);
  const std::int64_t n = std::int64_t{1} << 20;
  Tensor q(DType::f32, {1, 1, n, 1}), kv(DType::f32, {1, 1, 1, 1}), lse(DType::f32, {1, 1, n});
  for (Tensor* t : {&q, &kv, &lse}) std::fill(t->data<float>(), t->data<float>() + t->numel(), 0.0f);
  Tensor dq(DType::f32, {1, 1, n, 1}), dk(DType::f32, {1, 1, 1, 1}), dv(DType::f32, {1, 1, 1, 1});
  AttentionOptions fast;
  fast.kernel = Kernel::fast;
  const auto error = error_of([&] {
    backward(q.view(), kv.view(), kv.view(), q.view(), q.view(), lse.view(), dq.view(), dk.view(), dv.view(), fast);
  });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::out_of_memory);
  EXPECT_TRUE(contains(error->what(), "backward (fast kernel) with q [1, 1, 1048576, 1]")) << error->what();
  EXPECT_TRUE(contains(error->what(), "its scratch memory needs")) << error->what();
}

TEST(MemoryBudget, EmptyGradientsNeedNoScratch) {
  // Every gradient empty: nothing is computed, so nothing is sized by the views' other dimensions,
  // which zero strides make as large as they like (before, the first case asked for the float32
  // copies of 2^40 rows, and the second, from the fuzzer, for 3 GiB of workspace rows of d_k).
  float one = 1.0f;
  AttentionOptions fast;
  fast.kernel = Kernel::fast;
  {
    const ConstTensorView qk(&one, DType::f32, {1, 1, kHuge, 0}, {0, 0, 0, 0});
    const ConstTensorView lse(&one, DType::f32, {1, 1, kHuge}, {0, 0, 0});
    const TensorView empty(&one, DType::f32, {1, 1, kHuge, 0}, {0, 0, 0, 0});
    EXPECT_FALSE(error_of([&] { backward(qk, qk, qk, qk, qk, lse, empty, empty, empty, fast); }).has_value());
  }
  {
    // No query heads and no keys, with a huge d_k.
    const ConstTensorView q(&one, DType::f32, {2, 0, 0, kHuge}, {0, 0, 0, 0});
    const ConstTensorView k(&one, DType::f32, {2, 2, 0, kHuge}, {0, 0, 0, 0});
    const ConstTensorView v(&one, DType::f32, {2, 2, 0, 2}, {0, 0, 0, 0});
    const ConstTensorView out(&one, DType::f32, {2, 0, 0, 2}, {0, 0, 0, 0});
    const ConstTensorView lse(&one, DType::f32, {2, 0, 0}, {0, 0, 0});
    const TensorView dq(&one, DType::f32, {2, 0, 0, kHuge}, {0, 0, 0, 0});
    const TensorView dk(&one, DType::f32, {2, 2, 0, kHuge}, {0, 0, 0, 0});
    const TensorView dv(&one, DType::f32, {2, 2, 0, 2}, {0, 0, 0, 0});
    EXPECT_FALSE(error_of([&] { backward(q, k, v, out, out, lse, dq, dk, dv, fast); }).has_value());
  }
  EXPECT_EQ(one, 1.0f) << "nothing written";
}

TEST(MemoryBudget, KVCacheLargerThanTheBudgetRaisesBeforeAllocatingEitherPool) {
  MemoryLimit limit(128 * kMiB);
  KVCacheConfig config;
  config.num_kv_heads = 8;
  config.head_dim = 128;
  config.max_sequences = 4;
  config.max_sequence_length = 8192;  // 2 pools × 4 × 8 × 8192 × 128 × 4 bytes = 256 MiB
  const auto error = error_of([&] { KVCache cache(config); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::out_of_memory);
  EXPECT_TRUE(contains(error->what(), "KVCache of 4 blocks × 8 KV heads × 8192 tokens × (128 + 128) f32 features")) << error->what();
  config.max_sequence_length = 2048;  // 64 MiB
  EXPECT_NO_THROW(KVCache cache(config));
}

TEST(MemoryBudget, CallsWithinTheBudgetRun) {
  MemoryLimit limit(64 * kMiB + 1);  // anything under 64 MiB is not even checked
  Tensor q(DType::f32, {1, 2, 40, 16}), out(DType::f32, {1, 2, 40, 16});
  EXPECT_NO_THROW(forward(q.view(), q.view(), q.view(), out.view()));
}

// Past the pre-check (a limit far above what is there), the allocation itself fails: in a child
// process whose address space is capped, a Tensor and a kernel's scratch must raise, not abort.
TEST(MemoryBudget, FailedAllocationsRaiseInsteadOfAborting) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer runtimes reserve terabytes of shadow memory, so an address-space cap "
                  "cannot be set; the release build runs this test";
#else
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    set_num_threads(1);  // the pool's threads were not forked
    set_memory_limit(std::uint64_t{1} << 62);
    // Room for 256 MiB more than is mapped now: every larger request fails in the allocator.
    long mapped_pages = 0;
    if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(statm, "%ld", &mapped_pages) != 1) mapped_pages = 0;
      std::fclose(statm);
    }
    rlimit current{};
    getrlimit(RLIMIT_AS, &current);
    const rlimit tight{static_cast<rlim_t>(mapped_pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{256} << 20),
                       current.rlim_max};
    if (mapped_pages == 0 || setrlimit(RLIMIT_AS, &tight) != 0) _exit(10);
    int failures = 0;
    const auto tensor_error = error_of([] { Tensor t(DType::f32, {std::int64_t{1} << 31}); });  // 8 GiB
    if (!tensor_error || tensor_error->code() != ErrorCode::out_of_memory) failures |= 1;
    const std::int64_t n = 40000;  // reference: 3 · n² doubles = 38 GB of logits
    double one = 1.0;
    std::vector<double> out_data(static_cast<std::size_t>(n));
    const ConstTensorView q(&one, DType::f64, {1, 1, n, 1}, {0, 0, 0, 0});
    const TensorView out = TensorView::contiguous(out_data.data(), DType::f64, {1, 1, n, 1});
    const auto forward_error = error_of([&] { forward(q, q, q, out); });
    if (!forward_error || forward_error->code() != ErrorCode::out_of_memory ||
        !contains(forward_error->what(), "an allocation of scratch memory failed")) {
      failures |= 2;
    }
    _exit(failures);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << ": a failed allocation aborted instead of raising";
  EXPECT_NE(WEXITSTATUS(status), 10) << "setrlimit failed";
  EXPECT_EQ(WEXITSTATUS(status) & 1, 0) << "Tensor: a failed allocation did not raise out_of_memory";
  EXPECT_EQ(WEXITSTATUS(status) & 2, 0) << "forward: a failed scratch allocation did not raise out_of_memory";
#endif
}

}  // namespace
}  // namespace attnkit
