// Thread-safety of concurrent calls: several user threads call the library at once (forward, decode,
// backward, the reference, attention over a shared KV cache, a shared multi-head module) and every
// result is bitwise the one the same call gives alone. Built into its own executable so that the
// ThreadSanitizer stage of the test command runs it (scripts/check.sh).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support/testing.hpp"

namespace attnkit {
namespace {

using testing::random_tensor;
using testing::Rng;

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// One kind of call on inputs fixed at construction; run() returns its outputs. Inputs are only
// read, so every thread may run every workload at once.
struct Workload {
  std::string name;
  std::function<std::vector<Tensor>()> run;
};

std::vector<Workload> make_workloads() {
  Rng rng(91);
  std::vector<Workload> workloads;

  {  // fast forward, f32, GQA, causal, window, ALiBi, LSE
    auto q = std::make_shared<Tensor>(random_tensor(rng, {2, 4, 77, 40}, DType::f32));
    auto kv = std::make_shared<Tensor>(random_tensor(rng, {2, 2, 300, 40}, DType::f32));
    auto slopes = std::make_shared<std::vector<float>>(std::vector<float>{0.5f, 0.25f, 0.125f, 0.0625f});
    workloads.push_back({"fast forward f32", [=] {
                           Tensor out(DType::f32, {2, 4, 77, 40}), lse(DType::f32, {2, 4, 77});
                           AttentionOptions o;
                           o.causal = Causal::bottom_right;
                           o.window = {64, 0};
                           o.alibi_slopes = *slopes;
                           forward(q->view(), kv->view(), kv->view(), out.view(), o, {lse.view(), std::nullopt});
                           return std::vector<Tensor>{std::move(out), std::move(lse)};
                         }});
  }
  {  // decoding: one query over 2500 keys, the split-key path, bf16
    auto q = std::make_shared<Tensor>(random_tensor(rng, {1, 8, 1, 64}, DType::bf16));
    auto k = std::make_shared<Tensor>(random_tensor(rng, {1, 2, 2500, 64}, DType::bf16));
    auto v = std::make_shared<Tensor>(random_tensor(rng, {1, 2, 2500, 64}, DType::bf16));
    workloads.push_back({"fast decode bf16", [=] {
                           Tensor out(DType::bf16, {1, 8, 1, 64});
                           forward(q->view(), k->view(), v->view(), out.view());
                           return std::vector<Tensor>{std::move(out)};
                         }});
  }
  {  // fast backward with dropout and softcap
    auto q = std::make_shared<Tensor>(random_tensor(rng, {1, 2, 70, 32}, DType::f32));
    auto k = std::make_shared<Tensor>(random_tensor(rng, {1, 2, 130, 32}, DType::f32));
    auto d_out = std::make_shared<Tensor>(random_tensor(rng, {1, 2, 70, 32}, DType::f32));
    workloads.push_back({"fast backward f32", [=] {
                           AttentionOptions o;
                           o.dropout_p = 0.2;
                           o.seed = 7;
                           o.softcap = 20.0;
                           o.causal = Causal::top_left;
                           Tensor out(DType::f32, {1, 2, 70, 32}), lse(DType::f32, {1, 2, 70});
                           forward(q->view(), k->view(), k->view(), out.view(), o, {lse.view(), std::nullopt});
                           Tensor dq(DType::f32, {1, 2, 70, 32}), dk(DType::f32, {1, 2, 130, 32}), dv(DType::f32, {1, 2, 130, 32});
                           backward(q->view(), k->view(), k->view(), out.view(), d_out->view(), lse.view(), dq.view(), dk.view(),
                                    dv.view(), o);
                           return std::vector<Tensor>{std::move(out), std::move(dq), std::move(dk), std::move(dv)};
                         }});
  }
  {  // the float64 reference with an additive mask and probabilities
    auto q = std::make_shared<Tensor>(random_tensor(rng, {1, 3, 20, 16}));
    auto k = std::make_shared<Tensor>(random_tensor(rng, {1, 3, 33, 16}));
    auto mask = std::make_shared<Tensor>(random_tensor(rng, {20, 33}));
    workloads.push_back({"reference f64", [=] {
                           AttentionOptions o;
                           o.mask = mask->view();
                           Tensor out(DType::f64, {1, 3, 20, 16}), probs(DType::f64, {1, 3, 20, 33});
                           forward(q->view(), k->view(), k->view(), out.view(), o, {std::nullopt, probs.view()});
                           return std::vector<Tensor>{std::move(out), std::move(probs)};
                         }});
  }
  {  // attention over one shared, paged KV cache that no thread modifies
    KVCacheConfig config;
    config.num_kv_heads = 2;
    config.head_dim = 32;
    config.max_sequences = 2;
    config.max_sequence_length = 1500;
    config.layout = KVCacheLayout::paged;
    config.dtype = DType::f16;
    auto cache = std::make_shared<KVCache>(config);
    auto ids = std::make_shared<std::vector<KVCache::SequenceId>>();
    for (std::int64_t length : {1300, 90}) {
      const KVCache::SequenceId id = cache->add_sequence();
      const Tensor keys = random_tensor(rng, {1, 2, length, 32}, DType::f32);
      const Tensor values = random_tensor(rng, {1, 2, length, 32}, DType::f32);
      const KVCache::SequenceId one[] = {id};
      cache->append(one, keys.view(), values.view());
      ids->push_back(id);
    }
    auto q = std::make_shared<Tensor>(random_tensor(rng, {2, 4, 3, 32}, DType::f32));
    workloads.push_back({"attend over a shared KV cache", [=] {
                           Tensor out(DType::f32, {2, 4, 3, 32});
                           attend(*cache, *ids, q->view(), out.view());
                           return std::vector<Tensor>{std::move(out)};
                         }});
  }
  {  // one multi-head module shared by every thread: forward (with context) and backward
    MultiHeadAttentionConfig config;
    config.embed_dim = 48;
    config.num_heads = 4;
    config.num_kv_heads = 2;
    auto module = std::make_shared<MultiHeadAttention>(config, 5);
    auto x = std::make_shared<Tensor>(random_tensor(rng, {2, 19, 48}, DType::f32));
    auto d_out = std::make_shared<Tensor>(random_tensor(rng, {2, 19, 48}, DType::f32));
    workloads.push_back({"multi-head module forward and backward", [=] {
                           MultiHeadAttentionOptions o;
                           o.causal = Causal::top_left;
                           MultiHeadAttentionContext context;
                           MultiHeadAttentionOutput y = module->forward(x->view(), x->view(), x->view(), o, &context);
                           MultiHeadAttentionGradients g = module->backward(context, d_out->view());
                           std::vector<Tensor> results{std::move(y.out), std::move(g.d_query)};
                           for (auto& [name, grad] : g.d_weights) results.push_back(std::move(grad));
                           return results;
                         }});
  }
  return workloads;
}

// Every user thread runs every workload, each starting at a different one so that different kinds
// of call overlap, and compares each result with the one computed alone beforehand.
void run_concurrently(int user_threads, int rounds) {
  const std::vector<Workload> workloads = make_workloads();
  std::vector<std::vector<Tensor>> alone;
  for (const Workload& w : workloads) alone.push_back(w.run());

  std::vector<std::vector<std::string>> mismatches(static_cast<std::size_t>(user_threads));
  std::vector<std::thread> users;
  for (int t = 0; t < user_threads; ++t) {
    users.emplace_back([&, t] {
      for (int round = 0; round < rounds; ++round) {
        for (std::size_t i = 0; i < workloads.size(); ++i) {
          const std::size_t w = (i + static_cast<std::size_t>(t)) % workloads.size();
          try {
            const std::vector<Tensor> results = workloads[w].run();
            for (std::size_t r = 0; r < results.size(); ++r) {
              if (!bitwise_equal(results[r], alone[w][r])) {
                mismatches[static_cast<std::size_t>(t)].push_back(workloads[w].name + ": output " + std::to_string(r) +
                                                                  " differs from the call alone");
              }
            }
          } catch (const std::exception& e) {
            mismatches[static_cast<std::size_t>(t)].push_back(workloads[w].name + " raised: " + e.what());
          }
        }
      }
    });
  }
  for (std::thread& user : users) user.join();
  for (int t = 0; t < user_threads; ++t) {
    for (const std::string& m : mismatches[static_cast<std::size_t>(t)]) ADD_FAILURE() << "user thread " << t << ": " << m;
  }
}

struct ThreadCount {
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(0); }
};

TEST(ConcurrentCalls, FromFourUserThreadsMatchTheCallsAlone) {
  ATTNKIT_TRACE_SEED();
  ThreadCount pool(2);  // one user thread's loop gets the pool; the others run their tasks themselves
  run_concurrently(4, 6);
}

TEST(ConcurrentCalls, FromUserThreadsWithOneLibraryThreadMatchTheCallsAlone) {
  ATTNKIT_TRACE_SEED();
  ThreadCount pool(1);
  run_concurrently(3, 1);
}

}  // namespace
}  // namespace attnkit
