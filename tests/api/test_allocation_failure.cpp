// A call that runs out of memory changes no output. Every allocation in this program goes through
// the replaced operator new below, which can be told to fail the k-th allocation of a call; each
// call is repeated with k = 0, 1, 2, ... until it succeeds, and after every failure each output
// element must still be the NaN it was poisoned with (a partial write would show as a number).
//
// Its own executable: replacing operator new is program-wide.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "core/thread_pool.hpp"
#include "support/testing.hpp"

namespace {

std::atomic<bool> g_counting{false};    // whether allocations are being counted (during a call)
std::atomic<long long> g_allocations{0};  // allocations counted so far
std::atomic<long long> g_fail_at{-1};     // the counted allocation to fail; −1: none

void* allocate(std::size_t bytes, std::size_t alignment) {
  if (g_counting.load(std::memory_order_relaxed) &&
      g_allocations.fetch_add(1, std::memory_order_relaxed) == g_fail_at.load(std::memory_order_relaxed)) {
    throw std::bad_alloc();
  }
  void* p = nullptr;
  if (posix_memalign(&p, std::max(alignment, sizeof(void*)), bytes == 0 ? 1 : bytes) != 0) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t bytes) { return allocate(bytes, alignof(std::max_align_t)); }
void* operator new(std::size_t bytes, std::align_val_t alignment) {
  return allocate(bytes, static_cast<std::size_t>(alignment));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace attnkit {
namespace {

using testing::all_nan;
using testing::bitwise_equal;
using testing::poison;
using testing::random_tensor;
using testing::Rng;

// What one call did: how many allocations it made, and how it ended: "" on success,
// "out_of_memory" on Error(out_of_memory), or a description of anything else it threw.
struct Outcome {
  long long allocations;
  std::string error;
};

// Runs `call` on fresh threads, failing its allocation `fail_at` (none if −1). The pool's workers
// are joined and restarted first (before counting starts: a thread the system refuses narrows the
// pool for good), and the call itself runs on a new thread; so every thread starts with empty
// per-thread workspaces, and the workspaces must grow during the call.
Outcome call_on_fresh_threads(int threads, long long fail_at, const std::function<void()>& call) {
  set_num_threads(threads);
  auto& pool = detail::ThreadPool::instance();
  pool.try_run(1, 1, [](int, int) {});
  pool.try_run(threads, threads, [](int, int) {});
  Outcome outcome{0, ""};
  std::thread caller([&] {
    g_allocations = 0;
    g_fail_at = fail_at;
    g_counting = true;
    try {
      call();
    } catch (const Error& e) {
      outcome.error = e.code() == ErrorCode::out_of_memory ? "out_of_memory" : std::string("Error: ") + e.what();
    } catch (const std::exception& e) {
      outcome.error = std::string("exception: ") + e.what();
    }
    g_counting = false;
    outcome.allocations = g_allocations;
  });
  caller.join();
  set_num_threads(0);
  return outcome;
}

// Runs `call` once to learn its outputs and its allocations, then once for each allocation k,
// failing it. A call may survive a failed allocation (a library that asks with nothrow and copes),
// and must then give the same outputs bit for bit; a call that raises must raise out_of_memory and
// leave every output all NaN. At least one call must have raised, or the test proved nothing.
void expect_all_or_nothing(const std::function<void()>& call, std::vector<Tensor*> outputs, int threads) {
  for (Tensor* t : outputs) poison(*t);
  const Outcome clean = call_on_fresh_threads(threads, -1, call);
  ASSERT_EQ(clean.error, "");
  std::vector<Tensor> expected;
  for (Tensor* t : outputs) expected.push_back(Tensor::converted(t->view(), t->dtype()));

  int failures = 0;
  // The worker threads' allocations interleave with the caller's: a few more calls than the clean
  // run counted cover a call that happens to allocate more.
  for (long long k = 0; k < clean.allocations + 8; ++k) {
    for (Tensor* t : outputs) poison(*t);
    const Outcome outcome = call_on_fresh_threads(threads, k, call);
    if (outcome.error.empty()) {
      for (std::size_t i = 0; i < outputs.size(); ++i) {
        ASSERT_TRUE(bitwise_equal(*outputs[i], expected[i])) << "output " << i << ", allocation " << k << " failed";
      }
      continue;
    }
    ASSERT_EQ(outcome.error, "out_of_memory") << "allocation " << k;
    ++failures;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      ASSERT_TRUE(all_nan(*outputs[i])) << "output " << i << " was written by a call that failed at allocation " << k;
    }
  }
  EXPECT_GT(failures, 0) << clean.allocations << " allocations";
}

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(std::int64_t q_heads, std::int64_t kv_heads, std::int64_t n, std::int64_t m, std::int64_t d,
                     DType dtype) {
  Rng rng(n * 131 + m);
  return {random_tensor(rng, {2, q_heads, n, d}, dtype), random_tensor(rng, {2, kv_heads, m, d}, dtype),
          random_tensor(rng, {2, kv_heads, m, d}, dtype)};
}

struct ForwardCase {
  const char* name;
  std::int64_t n, m, d;
  DType dtype;
  Kernel kernel;
};

class AllocationFailureForward : public ::testing::TestWithParam<ForwardCase> {};

// Several work items per call (two batches, two KV heads, GQA), lse and probabilities too: three
// dependent loops in the fast kernel. The decoding shape splits its keys (a merge loop).
TEST_P(AllocationFailureForward, LeavesEveryOutputUntouched) {
  const ForwardCase& c = GetParam();
  const Inputs in = random_inputs(4, 2, c.n, c.m, c.d, c.dtype);
  Tensor out(c.dtype, {2, 4, c.n, c.d}), lse(DType::f32, {2, 4, c.n}), probs(DType::f32, {2, 4, c.n, c.m});
  AttentionOptions options;
  options.kernel = c.kernel;
  options.causal = Causal::bottom_right;
  const auto call = [&] {
    forward(in.q.view(), in.k.view(), in.v.view(), out.view(), options, ForwardExtras{lse.view(), probs.view()});
  };
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    expect_all_or_nothing(call, {&out, &lse, &probs}, threads);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, AllocationFailureForward,
                         ::testing::Values(ForwardCase{"fast_f32", 200, 150, 24, DType::f32, Kernel::fast},
                                           ForwardCase{"fast_bf16", 37, 300, 40, DType::bf16, Kernel::fast},
                                           ForwardCase{"fast_decode_split", 2, 2100, 16, DType::f32, Kernel::fast},
                                           ForwardCase{"reference", 9, 13, 8, DType::f64, Kernel::reference}),
                         [](const auto& info) { return std::string(info.param.name); });

class AllocationFailureBackward : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(AllocationFailureBackward, LeavesEveryGradientUntouched) {
  const ForwardCase& c = GetParam();
  const Inputs in = random_inputs(4, 2, c.n, c.m, c.d, c.dtype);
  Rng rng(7);
  const Tensor d_out = random_tensor(rng, {2, 4, c.n, c.d}, c.dtype);
  Tensor out(c.dtype, {2, 4, c.n, c.d}), lse(DType::f32, {2, 4, c.n});
  AttentionOptions options;
  options.kernel = c.kernel;
  forward(in.q.view(), in.k.view(), in.v.view(), out.view(), options, ForwardExtras{lse.view(), std::nullopt});
  Tensor dq(c.dtype, in.q.shape()), dk(c.dtype, in.k.shape()), dv(c.dtype, in.v.shape());
  const auto call = [&] {
    backward(in.q.view(), in.k.view(), in.v.view(), out.view(), d_out.view(), lse.view(), dq.view(), dk.view(), dv.view(),
             options);
  };
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    expect_all_or_nothing(call, {&dq, &dk, &dv}, threads);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, AllocationFailureBackward,
                         ::testing::Values(ForwardCase{"fast_f32", 100, 230, 24, DType::f32, Kernel::fast},
                                           ForwardCase{"fast_bf16", 60, 120, 16, DType::bf16, Kernel::fast},
                                           ForwardCase{"reference", 9, 13, 8, DType::f64, Kernel::reference}),
                         [](const auto& info) { return std::string(info.param.name); });

// attend() over a cache: two sequences of different lengths, with both kernels.
TEST(AllocationFailureAttend, LeavesTheOutputUntouched) {
  KVCacheConfig config;
  config.num_kv_heads = 2;
  config.head_dim = 16;
  config.max_sequences = 2;
  config.max_sequence_length = 1500;
  KVCache cache(config);
  Rng rng(11);
  std::vector<KVCache::SequenceId> ids;
  for (std::int64_t length : {1300, 40}) {
    ids.push_back(cache.add_sequence());
    cache.append(ids.back(), random_tensor(rng, {2, length, 16}, DType::f32).view(),
                 random_tensor(rng, {2, length, 16}, DType::f32).view());
  }
  const Tensor q = random_tensor(rng, {2, 4, 3, 16}, DType::f32);
  Tensor out(DType::f32, {2, 4, 3, 16}), lse(DType::f32, {2, 4, 3});
  for (Kernel kernel : {Kernel::fast, Kernel::reference}) {
    SCOPED_TRACE(kernel_name(kernel));
    CachedAttentionOptions options;
    options.kernel = kernel;
    options.lse = lse.view();
    expect_all_or_nothing([&] { attend(cache, ids, q.view(), out.view(), options); }, {&out, &lse}, 2);
  }
}

}  // namespace
}  // namespace attnkit
