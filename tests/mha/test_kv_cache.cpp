// The KV cache (attnkit/kv_cache.hpp) and attention over it, attend(), in both layouts:
//
//   1. Bookkeeping  ids, lengths, room, the paged block pool and its reuse; keys() and values()
//                   checked bitwise, after every step of a random run, against a shadow copy of all
//                   that was appended (rounded to the storage dtype as Tensor::converted rounds).
//   2. Capacity     every limit raises Error(capacity_exceeded) and leaves the cache bitwise as it was
//                   (ids, lengths, room, block tables, free blocks, the whole storage); bad arguments
//                   and configurations raise the right ErrorCode, naming the argument.
//   3. attend()     against an oracle computed here, per sequence: the cache's own keys and values,
//                   widened to float64, through attnkit::forward (Kernel::reference,
//                   Causal::bottom_right). The rule of docs/semantics.md: RMS error <= 2 × that of the
//                   naive float32 kernel (support/naive_f32.hpp) on the same inputs
//                   + 1e-7·max(1, |reference|); lse to 1e-5 relative; Kernel::reference through
//                   attend() equal to the oracle. The caches are filled in slots and blocks that
//                   earlier sequences filled with NaN before they were freed, so a stale row read
//                   anywhere turns an output into NaN.
//   4. Decoding     append a token, attend with n = 1, repeat: the full causal forward, row by row.
//   5. Determinism  bitwise-identical results for 1 and 3 threads.
// Random inputs use a fresh seed per run, printed on failure (ATTNKIT_TEST_SEED=<seed> reruns it);
// outputs are NaN-poisoned before every call, so an unwritten element fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/naive_f32.hpp"
#include "support/testing.hpp"

namespace attnkit {
namespace {

using Id = KVCache::SequenceId;
using std::int64_t;
using testing::poisoned;
using testing::random_tensor;
using testing::Rng;

constexpr double kFloor = 1e-7;  // the rule's absolute floor, relative to max(1, |reference output|)
constexpr KVCacheLayout kLayouts[] = {KVCacheLayout::contiguous, KVCacheLayout::paged};
const float kSlopes[] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f};  // ALiBi for Hq = 6
const float kSinks[] = {1.5f, -2.0f, 0.25f, 6.0f, 0.0f, 3.0f};                // attention sinks for Hq = 6

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }
const char* layout_name(KVCacheLayout layout) { return layout == KVCacheLayout::paged ? "paged" : "contiguous"; }

void for_each_layout(const std::function<void(KVCacheLayout)>& body) {
  for (KVCacheLayout layout : kLayouts) {
    SCOPED_TRACE(layout_name(layout));
    body(layout);
  }
}

KVCacheConfig make_config(KVCacheLayout layout, int64_t kv_heads, int64_t d_k, int64_t d_v, int64_t max_sequences,
                          int64_t max_length, int64_t block_size = 8, int64_t num_blocks = 0, DType dtype = DType::f32) {
  return {kv_heads, d_k, d_v, max_sequences, max_length, layout, block_size, num_blocks, dtype};
}

// `call` must raise attnkit::Error with one of `codes` and a message containing `words`.
void expect_error(const std::function<void()>& call, const std::vector<ErrorCode>& codes, const std::string& words) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_NE(std::find(codes.begin(), codes.end(), e.code()), codes.end())
        << "code " << error_code_name(e.code()) << ", expected " << error_code_name(codes.front()) << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << "message lacks \"" << words << "\": " << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "raised a non-attnkit exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "raised nothing; expected " << error_code_name(codes.front());
}
#define EXPECT_ATTNKIT_ERROR(statement, code, words)              \
  do {                                                            \
    SCOPED_TRACE(#statement);                                     \
    expect_error([&] { statement; }, {ErrorCode::code}, words); \
  } while (0)

Tensor widened(const Tensor& t) { return Tensor::converted(t.view(), DType::f64); }

double max_abs(const Tensor& t) {
  double worst = 0;
  for (double x : testing::values(t))
    if (std::isfinite(x)) worst = std::max(worst, std::fabs(x));
  return worst;
}

// Entry b of a contiguous rank-4 tensor, as a rank-3 view.
ConstTensorView sub(const Tensor& t, int64_t b) {
  const auto& s = t.shape();
  const auto* base = static_cast<const std::byte*>(t.raw()) + at(b * s[1] * s[2] * s[3]) * dtype_size(t.dtype());
  return ConstTensorView::contiguous(base, t.dtype(), {s[1], s[2], s[3]});
}
// A contiguous copy of `view` with leading size-1 dimensions up to rank 4.
Tensor as4(ConstTensorView view) { return Tensor::converted(view.unsqueezed_to(4), view.dtype()); }
// Writes `one` ([1, ...]) into entry b of `all` (same dtype; both contiguous).
void put(Tensor& all, int64_t b, const Tensor& one) {
  if (one.nbytes() > 0) std::memcpy(static_cast<std::byte*>(all.raw()) + at(b) * one.nbytes(), one.raw(), one.nbytes());
}
// Row [b, h, j, :] of a rank-4 f32 tensor into row [b2, h, j2, :] of another, for every head h.
void copy_rows(const Tensor& from, int64_t b, int64_t j, Tensor& to, int64_t b2, int64_t j2) {
  const auto &s = from.shape(), &s2 = to.shape();
  for (int64_t h = 0; h < s[1]; ++h)
    std::copy_n(from.data<float>() + ((b * s[1] + h) * s[2] + j) * s[3], s[3],
                to.data<float>() + ((b2 * s2[1] + h) * s2[2] + j2) * s2[3]);
}

// Everything observable about a cache, to check that a failed call changed nothing.
struct Snapshot {
  std::vector<int64_t> numbers;  // free blocks, then per sequence: id, length, room, block table
  Tensor keys, values;           // all of the storage, not only the rows in use: nothing is half-written
};
Snapshot snapshot(const KVCache& cache) {
  Snapshot s{{cache.free_blocks()}, Tensor::converted(cache.storage().keys, cache.config().dtype),
             Tensor::converted(cache.storage().values, cache.config().dtype)};
  for (Id id : cache.sequences()) {
    s.numbers.insert(s.numbers.end(), {id, cache.length(id), cache.room(id)});
    for (int64_t block : cache.block_table(id)) s.numbers.push_back(block);
  }
  return s;
}
void expect_unchanged(const KVCache& cache, const Snapshot& before) {
  const Snapshot now = snapshot(cache);
  EXPECT_EQ(now.numbers, before.numbers) << "free blocks, then id, length, room and block table of each sequence";
  EXPECT_TRUE(testing::bitwise_equal(now.keys, before.keys)) << "the key storage changed";
  EXPECT_TRUE(testing::bitwise_equal(now.values, before.values)) << "the value storage changed";
}

// What the cache must hold: per sequence, every appended chunk [Hkv, t, d] in order, rounded to the
// storage dtype by Tensor::converted.
class Shadow {
 public:
  explicit Shadow(const KVCacheConfig& c) : c_(c) {}
  void append(Id id, ConstTensorView keys, ConstTensorView values) {
    chunks_[id].first.push_back(Tensor::converted(keys, c_.dtype));
    chunks_[id].second.push_back(Tensor::converted(values, c_.dtype));
  }
  void erase(Id id) { chunks_.erase(id); }
  void expect_matches(const KVCache& cache) {
    for (Id id : cache.sequences()) {
      SCOPED_TRACE("sequence " + std::to_string(id));
      const Tensor keys = joined(chunks_[id].first, c_.head_dim), values = joined(chunks_[id].second, c_.value_dim);
      EXPECT_EQ(cache.length(id), keys.shape()[1]);
      EXPECT_TRUE(testing::bitwise_equal(cache.keys(id), keys)) << "keys() is not what was appended";
      EXPECT_TRUE(testing::bitwise_equal(cache.values(id), values)) << "values() is not what was appended";
    }
  }

 private:
  Tensor joined(const std::vector<Tensor>& chunks, int64_t width) const {
    int64_t length = 0;
    for (const Tensor& c : chunks) length += c.shape()[1];
    Tensor all(c_.dtype, {c_.num_kv_heads, length, width});
    auto* dst = static_cast<std::byte*>(all.raw());
    for (int64_t g = 0; g < c_.num_kv_heads; ++g)
      for (const Tensor& c : chunks) {
        const std::size_t bytes = c.nbytes() / at(c_.num_kv_heads);  // one head's rows
        if (bytes > 0) std::memcpy(dst, static_cast<const std::byte*>(c.raw()) + at(g) * bytes, bytes);
        dst += bytes;
      }
    return all;
  }
  KVCacheConfig c_;
  std::map<Id, std::pair<std::vector<Tensor>, std::vector<Tensor>>> chunks_;  // keys, values
};

// Fresh sequences of the given lengths (ids in that order), appended in random interleaved chunks of
// 1 to 40 tokens and batched one-token appends, into slots and blocks that earlier sequences had
// filled with NaN keys and values before they were freed.
std::vector<Id> fill(KVCache& cache, const std::vector<int64_t>& lengths, Rng& rng) {
  const KVCacheConfig& c = cache.config();
  std::vector<Id> ids;
  while (static_cast<int64_t>(cache.sequences().size()) < c.max_sequences) {
    const Id id = cache.add_sequence();
    const int64_t t = cache.room(id);
    cache.append(id, poisoned(DType::f32, {c.num_kv_heads, t, c.head_dim}).view(),
                 poisoned(DType::f32, {c.num_kv_heads, t, c.value_dim}).view());
  }
  for (Id id : cache.sequences()) cache.free_sequence(id);
  for (std::size_t s = 0; s < lengths.size(); ++s) ids.push_back(cache.add_sequence());
  for (;;) {
    std::vector<Id> growing;
    for (std::size_t s = 0; s < ids.size(); ++s)
      if (cache.length(ids[s]) < lengths[s]) growing.push_back(ids[s]);
    const int64_t B = static_cast<int64_t>(growing.size());
    if (B == 0) return ids;
    if (B > 1 && rng.uniform() < 0.3) {
      cache.append(growing, random_tensor(rng, {B, c.num_kv_heads, 1, c.head_dim}, DType::f32).view(),
                   random_tensor(rng, {B, c.num_kv_heads, 1, c.value_dim}, DType::f32).view());
      continue;
    }
    const Id id = growing[at(rng.integer(0, B - 1))];
    const int64_t length = lengths[at(std::find(ids.begin(), ids.end(), id) - ids.begin())];
    const int64_t t = std::min(length - cache.length(id), rng.integer(1, 40));
    cache.append(id, random_tensor(rng, {c.num_kv_heads, t, c.head_dim}, DType::f32).view(),
                 random_tensor(rng, {c.num_kv_heads, t, c.value_dim}, DType::f32).view());
  }
}

// How close this run came to the accuracy rule's limit, printed at the end for the record.
struct AccuracyRecord : ::testing::Environment {
  static inline double worst = 0;  // largest error / (2 × naive + floor)
  static inline int64_t comparisons = 0;
  static void add(double error, double limit) { ++comparisons, worst = std::max(worst, error / limit); }
  void TearDown() override {
    std::printf("[ note ] accuracy rule: %lld comparisons, worst RMS error / (2 x naive f32 + floor) = %.3f\n",
                static_cast<long long>(comparisons), worst);
  }
};
[[maybe_unused]] const auto* const kAccuracyRecord = ::testing::AddGlobalTestEnvironment(new AccuracyRecord);

struct Expected {
  Tensor out;    // f64 [B, Hq, n, d_v]: the float64 reference
  Tensor lse;    // f32 [B, Hq, n]
  Tensor naive;  // f64: the naive float32 kernel's out, rounded to q's dtype
};
// The oracle, one sequence at a time: q[b] against cache.keys/values(ids[b]) through the float64
// reference forward, aligned bottom-right, and through the naive float32 kernel on the same inputs.
Expected oracle(const KVCache& cache, const std::vector<Id>& ids, const Tensor& q, const CachedAttentionOptions& options) {
  const int64_t B = q.shape()[0], Hq = q.shape()[1], n = q.shape()[2], d_v = cache.config().value_dim;
  Expected e{Tensor(DType::f64, {B, Hq, n, d_v}), Tensor(DType::f32, {B, Hq, n}), Tensor(DType::f64, {B, Hq, n, d_v})};
  AttentionOptions o;
  o.scale = options.scale, o.causal = Causal::bottom_right, o.window = options.window;
  o.alibi_slopes = options.alibi_slopes, o.softcap = options.softcap, o.sinks = options.sinks;
  o.kernel = Kernel::reference;
  for (int64_t b = 0; b < B; ++b) {
    const Tensor q_b = as4(sub(q, b)), k = as4(cache.keys(ids[at(b)]).view()), v = as4(cache.values(ids[at(b)]).view());
    const testing::ForwardResult exact = testing::run_forward(widened(q_b), widened(k), widened(v), o);
    put(e.out, b, exact.out);
    put(e.lse, b, exact.lse);
    put(e.naive, b, widened(Tensor::converted(testing::naive_f32_forward(q_b, k, v, o).view(), q.dtype())));
  }
  return e;
}

// attend() against the oracle: the accuracy rule on out, lse to 1e-5 relative, and exact zeros and
// −inf on the rows that see no key. Then Kernel::reference through attend(), which reads the blocks
// in place and runs the float64 reference over the whole batch: equal to the oracle (each sequence
// gathered and run alone) rounded once to q's dtype, and its lse equal bit for bit.
void expect_accurate(const KVCache& cache, const std::vector<Id>& ids, const Tensor& q, CachedAttentionOptions options = {}) {
  const int64_t B = q.shape()[0], Hq = q.shape()[1], n = q.shape()[2], d_v = cache.config().value_dim;
  Tensor out = poisoned(q.dtype(), {B, Hq, n, d_v}), lse = poisoned(DType::f32, {B, Hq, n});
  options.lse = lse.view();
  attend(cache, ids, q.view(), out.view(), options);
  const Expected want = oracle(cache, ids, q, options);
  const double error = testing::rms_diff(widened(out), want.out), naive = testing::rms_diff(want.naive, want.out);
  const double limit = 2 * naive + kFloor * std::max(1.0, max_abs(want.out));
  EXPECT_LE(error, limit) << "RMS errors: attend " << error << ", naive f32 " << naive;
  AccuracyRecord::add(error, limit);
  for (int64_t r = 0; r < B * Hq * n; ++r) {
    const float w = want.lse.data<float>()[r], got = lse.data<float>()[r];
    if (w == -INFINITY) {
      ASSERT_EQ(got, -INFINITY) << "lse of row " << r << ", which sees no key";
      for (int64_t c = 0; c < d_v; ++c) ASSERT_EQ(testing::value(out, r * d_v + c), 0.0) << "row " << r << " sees no key";
    } else {
      ASSERT_NEAR(got, w, 1e-5 * std::max(1.0f, std::fabs(w))) << "lse of row " << r;
    }
  }
  options.kernel = Kernel::reference;
  testing::poison(out), testing::poison(lse);
  attend(cache, ids, q.view(), out.view(), options);
  const double tolerance = q.dtype() == DType::f64 ? 1e-12 * std::max(1.0, max_abs(want.out)) : 0.0;
  EXPECT_LE(testing::max_abs_diff(out, Tensor::converted(want.out.view(), q.dtype())), tolerance) << "Kernel::reference";
  EXPECT_TRUE(testing::bitwise_equal(lse, want.lse)) << "Kernel::reference";
}

// t tokens of keys or values for a cache with 1 KV head and d_k = d_v = 2.
Tensor tokens(int64_t t, float value = 1) {
  Tensor x(DType::f32, {1, t, 2});
  std::fill_n(x.data<float>(), 2 * t, value);
  return x;
}

// ---- 1. bookkeeping ----

TEST(KVCacheBookkeeping, IdsLengthsAndFreedSequences) {
  for_each_layout([](KVCacheLayout layout) {
    KVCache cache(make_config(layout, 1, 2, /*d_v: head_dim*/ 0, 3, 20, 4));
    EXPECT_EQ(cache.config().value_dim, 2);
    const Id a = cache.add_sequence(), b = cache.add_sequence(), c = cache.add_sequence();
    EXPECT_TRUE(a != b && b != c && a != c);
    EXPECT_EQ(cache.sequences(), (std::vector<Id>{a, b, c}));
    for (Id id : {a, b, c}) EXPECT_TRUE(cache.contains(id) && cache.length(id) == 0 && cache.keys(id).shape()[1] == 0);
    cache.append(b, tokens(5).view(), tokens(5).view());
    cache.append(b, tokens(0).view(), tokens(0).view());  // t = 0 is valid and appends nothing
    cache.append(c, tokens(2).view(), tokens(2).view());
    EXPECT_EQ((std::vector<int64_t>{cache.length(a), cache.length(b), cache.length(c)}), (std::vector<int64_t>{0, 5, 2}));
    cache.free_sequence(b);
    EXPECT_FALSE(cache.contains(b));
    EXPECT_EQ(cache.sequences(), (std::vector<Id>{a, c}));
    EXPECT_ATTNKIT_ERROR(cache.length(b), invalid_argument, "freed");
    EXPECT_ATTNKIT_ERROR(cache.room(b), invalid_argument, "freed");
    EXPECT_ATTNKIT_ERROR(cache.keys(b), invalid_argument, "freed");
    EXPECT_ATTNKIT_ERROR(cache.values(b), invalid_argument, "freed");
    EXPECT_ATTNKIT_ERROR(cache.block_table(b), invalid_argument, "freed");
    EXPECT_ATTNKIT_ERROR(cache.append(b, tokens(1).view(), tokens(1).view()), invalid_argument, "freed");
    EXPECT_ATTNKIT_ERROR(cache.free_sequence(b), invalid_argument, "freed");
    const Id d = cache.add_sequence();  // never the freed id again: a stale id must stay unknown
    EXPECT_TRUE(d != a && d != b && d != c);
    EXPECT_EQ(cache.sequences(), (std::vector<Id>{a, c, d}));
    EXPECT_FALSE(cache.contains(b));
    EXPECT_ATTNKIT_ERROR(cache.length(12345), invalid_argument, "12345");
    EXPECT_ATTNKIT_ERROR(cache.free_sequence(-1), invalid_argument, "-1");
  });
}

// The blocks a sequence holds (its block table without the unused −1 entries).
std::set<int64_t> held(const KVCache& cache, Id id) {
  std::set<int64_t> blocks;
  for (int64_t block : cache.block_table(id))
    if (block >= 0) blocks.insert(block);
  return blocks;
}

TEST(KVCacheBookkeeping, BlocksAndSlotsAreCountedAndReused) {
  KVCache cache(make_config(KVCacheLayout::paged, 1, 2, 2, 3, 20, 4, 6));  // 6 blocks of 4; 20 tokens a sequence
  const Id a = cache.add_sequence();
  EXPECT_EQ(cache.block_table(a).size(), 5u);
  // {tokens appended, then: free blocks, room of a}; an empty sequence holds no block
  for (const auto [t, free_blocks, room] : {std::array<int64_t, 3>{0, 6, 20}, {1, 5, 19}, {3, 5, 16}, {4, 4, 12}, {5, 2, 7}}) {
    cache.append(a, tokens(t).view(), tokens(t).view());
    EXPECT_EQ(cache.free_blocks(), free_blocks) << "at length " << cache.length(a);
    EXPECT_EQ(cache.room(a), room) << "at length " << cache.length(a);
  }
  const Id b = cache.add_sequence();
  cache.append(b, tokens(6).view(), tokens(6).view());
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_EQ(cache.room(a), 3);  // the rest of its last block: the pool is empty
  EXPECT_EQ(cache.room(b), 2);
  const std::set<int64_t> of_a = held(cache, a), of_b = held(cache, b);
  EXPECT_EQ(of_a.size(), 4u);
  EXPECT_EQ(of_b.size(), 2u);
  for (int64_t block : of_a) EXPECT_TRUE(block < 6 && !of_b.contains(block)) << block;
  cache.free_sequence(a);
  EXPECT_EQ(cache.free_blocks(), 4);
  const Id c = cache.add_sequence();
  EXPECT_EQ(cache.room(c), 16);
  cache.append(c, tokens(13).view(), tokens(13).view());
  EXPECT_EQ(held(cache, c), of_a) << "the only free blocks were a's";
  cache.free_sequence(b);
  cache.free_sequence(c);
  EXPECT_EQ(cache.free_blocks(), 6);

  KVCache slots(make_config(KVCacheLayout::contiguous, 1, 2, 2, 2, 20));  // a slot per sequence, no pool
  const Id x = slots.add_sequence(), y = slots.add_sequence();
  slots.append(x, tokens(13).view(), tokens(13).view());
  EXPECT_EQ(slots.free_blocks(), 0);
  EXPECT_EQ(slots.room(x), 7);
  EXPECT_EQ(slots.room(y), 20);
  ASSERT_EQ(slots.block_table(x).size(), 1u);
  const int64_t slot_of_x = slots.block_table(x)[0];
  EXPECT_NE(slot_of_x, slots.block_table(y)[0]);
  slots.free_sequence(x);
  EXPECT_EQ(slots.block_table(slots.add_sequence())[0], slot_of_x);
}

// A random run of adds, frees, and single and batched appends of 0 to 9 tokens (f32 or f64, strided
// or contiguous, some values past f16's range or subnormal), every alive sequence checked against the
// shadow after each step, for each storage dtype. Freed sequences' blocks and slots are reused with
// their old rows still in them.
TEST(KVCacheBookkeeping, KeysAndValuesAreExactlyWhatWasAppendedRoundedToTheStorageDtype) {
  ATTNKIT_TRACE_SEED();
  for (DType storage : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(storage));
    for_each_layout([&](KVCacheLayout layout) {
      Rng rng(1);
      const KVCacheConfig config = make_config(layout, 3, 7, 5, 4, 40, 4, 0, storage);
      KVCache cache(config);
      Shadow shadow(config);
      for (int step = 0; step < 200 && !::testing::Test::HasFailure(); ++step) {
        const std::vector<Id> alive = cache.sequences();
        const int64_t B = static_cast<int64_t>(alive.size());
        const double r = rng.uniform();
        const Id id = B > 0 ? alive[at(rng.integer(0, B - 1))] : -1;
        if (B == 0 || (B < 4 && r < 0.15)) {
          cache.add_sequence();
        } else if (r < 0.25) {
          cache.free_sequence(id);
          shadow.erase(id);
        } else if (r < 0.45) {  // batched, to every alive sequence
          int64_t t = rng.integer(0, 6);
          for (Id each : alive) t = std::min(t, cache.room(each));
          const Tensor k = random_tensor(rng, {B, 3, t, 7}, DType::f32), v = random_tensor(rng, {B, 3, t, 5}, DType::f32);
          cache.append(alive, k.view(), v.view());
          for (int64_t b = 0; b < B; ++b) shadow.append(alive[at(b)], sub(k, b), sub(v, b));
        } else {
          const int64_t t = std::min(cache.room(id), rng.integer(0, 9));
          // f64 into 16-bit storage rounds twice (see Float64InputIsRoundedOnceToHalfPrecisionStorage)
          const DType dtype = storage == DType::f32 && rng.uniform() < 0.5 ? DType::f64 : DType::f32;
          const auto dist = rng.uniform() < 0.5 ? testing::Distribution::gaussian : testing::Distribution::large;
          const bool strided = rng.uniform() < 0.5;  // memory [t, Hkv, d], passed as a permuted view
          Tensor k = random_tensor(rng, strided ? std::vector<int64_t>{t, 3, 7} : std::vector<int64_t>{3, t, 7}, dtype, dist);
          Tensor v = random_tensor(rng, strided ? std::vector<int64_t>{t, 3, 5} : std::vector<int64_t>{3, t, 5}, dtype, dist);
          if (t > 0) store_from_double(k.raw(), dtype, 1e5), store_from_double(v.raw(), dtype, 3e-6);  // f16: inf, subnormal
          const ConstTensorView kv = strided ? k.view().permuted({1, 0, 2}) : k.view();
          const ConstTensorView vv = strided ? v.view().permuted({1, 0, 2}) : v.view();
          cache.append(id, kv, vv);
          shadow.append(id, kv, vv);
        }
        SCOPED_TRACE("step " + std::to_string(step));
        shadow.expect_matches(cache);
      }
    });
  }
}

// An f64 value just above a 16-bit midpoint must round up. Through float32 first it lands exactly on
// the midpoint and rounds to even, down (Tensor::converted rounds to odd first to avoid that).
TEST(KVCacheBookkeeping, Float64InputIsRoundedOnceToHalfPrecisionStorage) {
  struct Case {
    DType dtype;
    double in, want;
  };
  for (const Case& c : {Case{DType::bf16, 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), 1 + std::ldexp(1.0, -7)},
                        Case{DType::f16, 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 1 + std::ldexp(1.0, -10)}}) {
    SCOPED_TRACE(dtype_name(c.dtype));
    for_each_layout([&](KVCacheLayout layout) {
      KVCache cache(make_config(layout, 1, 1, 1, 1, 4, 4, 0, c.dtype));
      const Id id = cache.add_sequence();
      Tensor k(DType::f64, {1, 1, 1});
      k.data<double>()[0] = c.in;
      cache.append(id, k.view(), k.view());
      ASSERT_EQ(testing::value(Tensor::converted(k.view(), c.dtype), 0), c.want);  // the library's own rounding
      EXPECT_EQ(testing::value(cache.keys(id), 0), c.want) << "keys() holds " << testing::value(cache.keys(id), 0);
      EXPECT_EQ(testing::value(cache.values(id), 0), c.want) << "values() holds " << testing::value(cache.values(id), 0);
    });
  }
}

// ---- 2. capacity and bad input: the right error, and the cache as it was ----

TEST(KVCacheCapacity, EveryLimitRaisesCapacityExceededAndChangesNothing) {
  for_each_layout([](KVCacheLayout layout) {
    KVCache cache(make_config(layout, 1, 2, 2, 3, 10, 4));
    const Id a = cache.add_sequence(), b = cache.add_sequence(), c = cache.add_sequence();
    cache.append(a, tokens(7).view(), tokens(7).view());
    cache.append(b, tokens(2).view(), tokens(2).view());
    const Snapshot before = snapshot(cache);
    EXPECT_ATTNKIT_ERROR(cache.add_sequence(), capacity_exceeded, "max_sequences");
    expect_unchanged(cache, before);
    EXPECT_ATTNKIT_ERROR(cache.append(a, tokens(4, 9).view(), tokens(4, 9).view()), capacity_exceeded, "max_sequence_length");
    expect_unchanged(cache, before);
    const Id bca[] = {b, c, a};  // b and c have room for 4 more, a (listed last) has not: none grows
    const Tensor batch = as4(tokens(12, 9).view());
    const ConstTensorView four(batch.raw(), DType::f32, {3, 1, 4, 2}, {8, 8, 2, 1});
    EXPECT_ATTNKIT_ERROR(cache.append(bca, four, four), capacity_exceeded, "max_sequence_length");
    expect_unchanged(cache, before);
    cache.append(a, tokens(3).view(), tokens(3).view());  // up to the limit exactly
    EXPECT_EQ(cache.room(a), 0);
    cache.append(a, tokens(0).view(), tokens(0).view());
    EXPECT_ATTNKIT_ERROR(cache.append(a, tokens(1).view(), tokens(1).view()), capacity_exceeded, "max_sequence_length");
    cache.free_sequence(c);
    EXPECT_EQ(cache.length(cache.add_sequence()), 0);
  });
}

TEST(KVCacheCapacity, AnExhaustedBlockPoolChangesNothing) {
  KVCache cache(make_config(KVCacheLayout::paged, 1, 2, 2, 3, 100, 4, 5));  // 5 blocks of 4: the pool is the limit
  const Id a = cache.add_sequence(), b = cache.add_sequence(), c = cache.add_sequence();
  cache.append(a, tokens(9).view(), tokens(9).view());  // 3 blocks
  cache.append(b, tokens(1).view(), tokens(1).view());  // 1 block
  EXPECT_EQ(cache.free_blocks(), 1);
  const Id ab[] = {a, b};  // 4 more tokens each: either alone fits in the free block, both need 2 blocks
  const Tensor two(DType::f32, {2, 1, 4, 2});
  Snapshot before = snapshot(cache);
  EXPECT_ATTNKIT_ERROR(cache.append(ab, two.view(), two.view()), capacity_exceeded, "num_blocks");
  expect_unchanged(cache, before);
  cache.append(c, tokens(3).view(), tokens(3).view());  // takes the last block
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_EQ(cache.room(a), 3);
  cache.append(a, tokens(3).view(), tokens(3).view());  // the rest of its last block: no new block
  before = snapshot(cache);
  EXPECT_ATTNKIT_ERROR(cache.append(a, tokens(1, 9).view(), tokens(1, 9).view()), capacity_exceeded, "num_blocks");
  expect_unchanged(cache, before);
  cache.free_sequence(b);
  cache.append(a, tokens(4).view(), tokens(4).view());
  EXPECT_EQ(cache.length(a), 16);
}

TEST(KVCacheValidation, BadAppendsNameTheArgumentAndChangeNothing) {
  for_each_layout([](KVCacheLayout layout) {
    KVCache cache(make_config(layout, 2, 4, 3, 3, 10, 4));
    const Id a = cache.add_sequence(), b = cache.add_sequence(), freed = cache.add_sequence();
    cache.free_sequence(freed);
    cache.append(a, Tensor(DType::f32, {2, 2, 4}).view(), Tensor(DType::f32, {2, 2, 3}).view());
    const Tensor k(DType::f32, {2, 1, 4}), v(DType::f32, {2, 1, 3});
    const Tensor k2(DType::f32, {2, 2, 1, 4}), v2(DType::f32, {2, 2, 1, 3});
    const Tensor k3(DType::f32, {3, 2, 1, 4}), v3(DType::f32, {3, 2, 1, 3});
    auto f32 = [](std::vector<int64_t> shape) { return Tensor(DType::f32, std::move(shape)); };
    const Snapshot before = snapshot(cache);
    EXPECT_ATTNKIT_ERROR(cache.append(a, f32({2, 4}).view(), v.view()), invalid_shape, "keys");
    EXPECT_ATTNKIT_ERROR(cache.append(a, f32({3, 1, 4}).view(), v.view()), invalid_shape, "keys");
    EXPECT_ATTNKIT_ERROR(cache.append(a, f32({2, 1, 5}).view(), v.view()), invalid_shape, "keys");
    EXPECT_ATTNKIT_ERROR(cache.append(a, k.view(), f32({1, 1, 3}).view()), invalid_shape, "values");
    EXPECT_ATTNKIT_ERROR(cache.append(a, k.view(), f32({2, 1, 4}).view()), invalid_shape, "values");
    EXPECT_ATTNKIT_ERROR(cache.append(a, k.view(), f32({2, 2, 3}).view()), invalid_shape, "values");
    EXPECT_ATTNKIT_ERROR(cache.append(a, Tensor(DType::i32, {2, 1, 4}).view(), v.view()), invalid_dtype, "keys");
    EXPECT_ATTNKIT_ERROR(cache.append(a, k.view(), Tensor(DType::boolean, {2, 1, 3}).view()), invalid_dtype, "values");
    const ConstTensorView null_keys(nullptr, DType::f32, {2, 1, 4}, {4, 4, 1});
    EXPECT_ATTNKIT_ERROR(cache.append(a, null_keys, v.view()), null_pointer, "keys");
    const Id ab[] = {a, b}, a_freed[] = {a, freed}, aba[] = {a, b, a}, only_a[] = {a};
    EXPECT_ATTNKIT_ERROR(cache.append(only_a, k2.view(), v2.view()), invalid_shape, "keys");  // 2 entries, 1 sequence
    EXPECT_ATTNKIT_ERROR(cache.append(ab, k2.view(), f32({2, 2, 1, 4}).view()), invalid_shape, "values");
    EXPECT_ATTNKIT_ERROR(cache.append(a_freed, k2.view(), v2.view()), invalid_argument, "freed");
    EXPECT_ATTNKIT_ERROR(cache.append(aba, k3.view(), v3.view()), invalid_argument, "twice");
    expect_unchanged(cache, before);
  });
}

TEST(KVCacheValidation, BadConfigsRaiseTheRightCodeWithoutHugeAllocations) {
  constexpr int64_t kHuge = int64_t{1} << 62, kMax = std::numeric_limits<int64_t>::max();
  const std::vector<ErrorCode> arg{ErrorCode::invalid_argument}, dtype{ErrorCode::invalid_dtype},
      overflow{ErrorCode::size_overflow};
  using Set = void (*)(KVCacheConfig&);
  const std::tuple<const char*, Set, std::vector<ErrorCode>, const char*> cases[] = {
      {"zero heads", [](KVCacheConfig& c) { c.num_kv_heads = 0; }, arg, "num_kv_heads"},
      {"negative head_dim", [](KVCacheConfig& c) { c.head_dim = -3; }, arg, "head_dim"},
      {"negative value_dim", [](KVCacheConfig& c) { c.value_dim = -1; }, arg, "value_dim"},
      {"zero sequences", [](KVCacheConfig& c) { c.max_sequences = 0; }, arg, "max_sequences"},
      {"negative length", [](KVCacheConfig& c) { c.max_sequence_length = -5; }, arg, "max_sequence_length"},
      {"zero block_size", [](KVCacheConfig& c) { c.block_size = 0; }, arg, "block_size"},
      {"block_size not a power of two", [](KVCacheConfig& c) { c.block_size = 12; }, arg, "block_size"},
      {"negative num_blocks", [](KVCacheConfig& c) { c.num_blocks = -1; }, arg, "num_blocks"},
      {"not a layout", [](KVCacheConfig& c) { c.layout = static_cast<KVCacheLayout>(7); }, arg, "layout"},
      {"int dtype", [](KVCacheConfig& c) { c.dtype = DType::i32; }, dtype, "dtype"},
      {"f64 dtype", [](KVCacheConfig& c) { c.dtype = DType::f64; }, dtype, "dtype"},
      {"int key_dtype", [](KVCacheConfig& c) { c.key_dtype = DType::i64; }, dtype, "key_dtype"},
      {"bool value_dtype", [](KVCacheConfig& c) { c.value_dtype = DType::boolean; }, dtype, "value_dtype"},
      {"int8 keys of 8 features", [](KVCacheConfig& c) { c.dtype = DType::int8; }, {ErrorCode::invalid_shape}, "head_dim: 8 is not a multiple of 32"},
      {"int4 values of 40 features",
       [](KVCacheConfig& c) { c.head_dim = 64, c.value_dim = 40, c.value_dtype = DType::int4; }, {ErrorCode::invalid_shape},
       "value_dim: 40 is not a multiple of 32"},
      {"per-channel f32 keys", [](KVCacheConfig& c) { c.key_quantization = KeyQuantization::per_channel; }, arg,
       "key_quantization: per_channel quantises int8 or int4 keys, but dtype is f32"},
      {"per-channel fp8 keys",
       [](KVCacheConfig& c) { c.head_dim = 32, c.key_dtype = DType::fp8_e4m3, c.key_quantization = KeyQuantization::per_channel; },
       arg, "key_dtype is fp8_e4m3"},
      {"per-channel keys in blocks of 16",
       [](KVCacheConfig& c) { c.head_dim = 32, c.key_dtype = DType::int4, c.key_quantization = KeyQuantization::per_channel; },
       arg, "block_size: 16 with per_channel keys; it must be a multiple of 32"},
      {"not a key quantization", [](KVCacheConfig& c) { c.key_quantization = static_cast<KeyQuantization>(5); }, arg,
       "key_quantization"},
      {"huge length, default pool", [](KVCacheConfig& c) { c.max_sequence_length = kHuge; }, overflow, "KVCacheConfig"},
      {"huge sequence count", [](KVCacheConfig& c) { c.max_sequences = kHuge; }, overflow, "KVCacheConfig"},
      {"huge head_dim", [](KVCacheConfig& c) { c.head_dim = kHuge; }, overflow, "KVCacheConfig"},
      {"huge block_size", [](KVCacheConfig& c) { c.block_size = kHuge; }, overflow, "KVCacheConfig"},
      {"huge length, contiguous",
       [](KVCacheConfig& c) { c.layout = KVCacheLayout::contiguous, c.max_sequence_length = kHuge; }, overflow,
       "KVCacheConfig"},
      {"largest length, contiguous",
       [](KVCacheConfig& c) { c.layout = KVCacheLayout::contiguous, c.max_sequence_length = kMax; }, overflow,
       "KVCacheConfig"},
  };
  for (const auto& [what, set, codes, words] : cases) {
    SCOPED_TRACE(what);
    KVCacheConfig config = make_config(KVCacheLayout::paged, 2, 8, 8, 2, 10, 16);
    set(config);
    expect_error([&] { KVCache cache(config); }, codes, words);
  }
}

// A length limit far beyond what the pool holds is valid: the pool is the limit (a sequence's block
// table is as long as the pool, not 2^58 entries), and running past it is capacity_exceeded.
TEST(KVCacheValidation, ALengthLimitBeyondThePoolIsBoundedByThePool) {
  for (int64_t limit : {int64_t{1} << 62, std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(limit);
    KVCache cache(make_config(KVCacheLayout::paged, 1, 2, 2, 2, limit, 16, 8));  // 8 blocks of 16
    const KVCache::SequenceId id = cache.add_sequence();
    EXPECT_EQ(cache.room(id), 8 * 16);
    EXPECT_EQ(cache.block_table(id).size(), 8u);
    const Tensor too_many(DType::f32, {1, 8 * 16 + 1, 2}), all(DType::f32, {1, 8 * 16, 2});
    expect_error([&] { cache.append(id, too_many.view(), too_many.view()); }, {ErrorCode::capacity_exceeded}, "blocks");
    EXPECT_EQ(cache.length(id), 0);
    cache.append(id, all.view(), all.view());
    EXPECT_EQ(cache.room(id), 0);
    EXPECT_EQ(cache.free_blocks(), 0);
  }
}

// ---- 3. attend() against the oracle ----

// Past one 128-key block, past 256, and past the 1024 keys at which decoding splits the keys.
const std::vector<int64_t> kLengths = {0, 1, 17, 130, 300, 1100};

struct AttendCase {
  KVCacheLayout layout;
  int64_t Hq, Hkv, d_k, d_v, n, block_size;
};
std::vector<AttendCase> attend_cases() {
  std::vector<AttendCase> cases;
  for (KVCacheLayout layout : kLayouts)
    for (int64_t Hkv : {2, 1})  // GQA and MQA
      for (int64_t d : {40, 64})
        for (int64_t n : {1, 5}) {  // paged: blocks of 1 token to more than the kernel's 128 keys
          const int64_t block_size = layout == KVCacheLayout::paged ? std::array{16, 256, 1, 8}[cases.size() % 4] : 0;
          cases.push_back({layout, 6, Hkv, d, d == 40 ? 24 : 64, n, block_size});
        }
  return cases;
}
std::string attend_case_name(const ::testing::TestParamInfo<AttendCase>& info) {
  const AttendCase& c = info.param;
  return std::string(layout_name(c.layout)) + "_Hq" + std::to_string(c.Hq) + "_Hkv" + std::to_string(c.Hkv) + "_dk" +
         std::to_string(c.d_k) + "_dv" + std::to_string(c.d_v) + "_n" + std::to_string(c.n) +
         (c.block_size > 0 ? "_block" + std::to_string(c.block_size) : "");
}
void PrintTo(const AttendCase& c, std::ostream* os) { *os << attend_case_name({c, 0}); }

class AttendAccuracy : public ::testing::TestWithParam<AttendCase> {};

TEST_P(AttendAccuracy, EverySequenceMatchesTheOracleInOneBatchedCall) {
  ATTNKIT_TRACE_SEED();
  const AttendCase& c = GetParam();
  Rng rng(3);
  KVCache cache(make_config(c.layout, c.Hkv, c.d_k, c.d_v, 7, 1100, c.block_size));
  const std::vector<Id> ids = fill(cache, kLengths, rng);
  const std::vector<Id> order = {ids[3], ids[0], ids[5], ids[1], ids[4], ids[2]};  // not creation order
  expect_accurate(cache, order, random_tensor(rng, {6, c.Hq, c.n, c.d_k}, DType::f32));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttendAccuracy, ::testing::ValuesIn(attend_cases()), attend_case_name);

std::vector<std::pair<std::string, CachedAttentionOptions>> option_cases() {
  std::vector<std::pair<std::string, CachedAttentionOptions>> cases(8);
  cases[0].first = "window {50, 0}", cases[0].second.window = {50, 0};
  cases[1].first = "window {0, 0}", cases[1].second.window = {0, 0};
  cases[2].first = "alibi", cases[2].second.alibi_slopes = kSlopes;
  cases[3].first = "softcap", cases[3].second.softcap = 2.5;
  cases[4].first = "scale", cases[4].second.scale = 0.3;
  cases[5].first = "all", cases[5].second.window = {200, 0}, cases[5].second.alibi_slopes = kSlopes;
  cases[5].second.softcap = 4, cases[5].second.scale = 0.2, cases[5].second.sinks = kSinks;
  // sides near the top of int64 mean unbounded (the oracle, the float64 reference, is checked
  // against a 128-bit keep-mask in tests/properties/test_extremes.cpp)
  cases[6].first = "window {INT64_MAX, 2^62}";
  cases[6].second.window = {std::numeric_limits<int64_t>::max(), int64_t{1} << 62};
  cases[7].first = "sinks", cases[7].second.sinks = kSinks;
  return cases;
}

TEST(AttendOptions, WindowAlibiSoftcapSinksAndScaleMatchTheOracle) {
  ATTNKIT_TRACE_SEED();
  for_each_layout([](KVCacheLayout layout) {
    Rng rng(4);
    KVCache cache(make_config(layout, 2, 40, 24, 7, 1100, 16));
    const std::vector<Id> ids = fill(cache, kLengths, rng);
    for (const auto& [name, options] : option_cases())
      for (DType dtype : {DType::f32, DType::f64})  // f64: Kernel::automatic is the reference
        for (int64_t n : {1, 5}) {
          SCOPED_TRACE(name + ", q " + std::string(dtype_name(dtype)) + ", n = " + std::to_string(n));
          expect_accurate(cache, ids, random_tensor(rng, {6, 6, n, 40}, dtype), options);
        }
  });
}

TEST(AttendOptions, HalfPrecisionCacheAndQueries) {
  ATTNKIT_TRACE_SEED();
  for (DType cache_dtype : {DType::bf16, DType::f16, DType::f32})
    for (DType q_dtype : {DType::f32, DType::f16}) {
      SCOPED_TRACE("cache " + std::string(dtype_name(cache_dtype)) + ", q and out " + std::string(dtype_name(q_dtype)));
      Rng rng(6);
      KVCache cache(make_config(KVCacheLayout::paged, 2, 40, 24, 7, 1100, 16, 0, cache_dtype));
      const std::vector<Id> ids = fill(cache, kLengths, rng);
      for (int64_t n : {1, 5}) expect_accurate(cache, ids, random_tensor(rng, {6, 6, n, 40}, q_dtype));
    }
}

// Quantized storage (attnkit/quantized.hpp: int8, int4, fp8), alone and mixed: the kernels against
// the float64 reference on the stored (dequantised) values, by the usual rule.
TEST(AttendOptions, QuantizedCaches) {
  ATTNKIT_TRACE_SEED();
  for (auto [keys, values] : {std::pair{DType::int8, DType::int8}, std::pair{DType::int4, DType::int4},
                              std::pair{DType::int8, DType::int4}, std::pair{DType::int4, DType::bf16},
                              std::pair{DType::fp8_e4m3, DType::fp8_e4m3}, std::pair{DType::fp8_e5m2, DType::fp8_e5m2},
                              std::pair{DType::fp8_e4m3, DType::int4}})
    for (DType q_dtype : {DType::f32, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(keys)) + " keys, " + std::string(dtype_name(values)) + " values, q and out " +
                   std::string(dtype_name(q_dtype)));
      Rng rng(8);
      KVCacheConfig config = make_config(KVCacheLayout::paged, 2, 64, 32, 7, 1100, 16, 0, keys);
      config.value_dtype = values;
      KVCache cache(config);
      const std::vector<Id> ids = fill(cache, kLengths, rng);
      for (int64_t n : {1, 5}) expect_accurate(cache, ids, random_tensor(rng, {6, 6, n, 64}, q_dtype));
    }
}

// Keys quantised per channel (KeyQuantization::per_channel), with every value storage and both
// layouts: sequences of lengths within, at and past group boundaries, appended in chunks of random
// size across them, against the oracle on the stored values; windows, ALiBi and softcap too.
TEST(AttendOptions, KeysQuantisedPerChannel) {
  ATTNKIT_TRACE_SEED();
  const std::vector<int64_t> lengths = {0, 31, 32, 33, 130, 1100};
  for (auto [keys, values] : {std::pair{DType::int8, DType::int8}, std::pair{DType::int4, DType::int4},
                              std::pair{DType::int4, DType::int8}, std::pair{DType::int8, DType::bf16}})
    for (auto [layout, block_size] : {std::pair{KVCacheLayout::contiguous, 0}, std::pair{KVCacheLayout::paged, 32},
                                      std::pair{KVCacheLayout::paged, 256}}) {
      SCOPED_TRACE(std::string(dtype_name(keys)) + " keys per channel, " + std::string(dtype_name(values)) + " values, " +
                   layout_name(layout) + " " + std::to_string(block_size));
      Rng rng(21);
      KVCacheConfig config = make_config(layout, 2, 64, 32, 7, 1100, block_size, 0, keys);
      config.value_dtype = values;
      config.key_quantization = KeyQuantization::per_channel;
      KVCache cache(config);
      EXPECT_EQ(cache.storage().key_channel_group, kChannelGroup);
      const std::vector<Id> ids = fill(cache, lengths, rng);
      for (int64_t n : {1, 5}) expect_accurate(cache, ids, random_tensor(rng, {6, 6, n, 64}, n == 1 ? DType::f32 : DType::f16));
      CachedAttentionOptions options;
      options.window = {40, 0}, options.alibi_slopes = kSlopes, options.softcap = 3;
      expect_accurate(cache, ids, random_tensor(rng, {6, 6, 1, 64}, DType::f32), options);
    }
}

// keys() of a cache quantising keys per channel: each complete group of 32 tokens is the group the
// format makes of the keys appended (quantize_channel_group on them, rounded to float32), the rest
// per-token records (quantize_row), after every append of a random run over group boundaries;
// values stay per token.
TEST(KVCacheQuantization, KeysPerChannelAreTheGroupsOfWhatWasAppended) {
  ATTNKIT_TRACE_SEED();
  constexpr int64_t kHkv = 2, kD = 64;
  for (DType keys : {DType::int8, DType::int4})
    for_each_layout([&](KVCacheLayout layout) {
      SCOPED_TRACE(std::string(dtype_name(keys)));
      Rng rng(5);
      KVCacheConfig config = make_config(layout, kHkv, kD, 32, 2, 200, 64, 0, keys);
      config.key_quantization = KeyQuantization::per_channel;
      KVCache cache(config);
      const Id id = cache.add_sequence();
      Tensor appended(DType::f32, {kHkv, 200, kD});  // everything appended so far
      int64_t length = 0;
      while (length < 200) {
        const int64_t t = std::min<int64_t>(200 - length, rng.integer(1, 45));
        const Tensor k = random_tensor(rng, {kHkv, t, kD}, DType::f64), v = random_tensor(rng, {kHkv, t, 32}, DType::f32);
        cache.append(id, k.view(), v.view());
        for (int64_t g = 0; g < kHkv; ++g)
          for (int64_t i = 0; i < t; ++i)
            for (int64_t c = 0; c < kD; ++c)
              appended.data<float>()[(g * 200 + length + i) * kD + c] = static_cast<float>(k.data<double>()[(g * t + i) * kD + c]);
        length += t;
        const Tensor stored = cache.keys(id);
        ASSERT_EQ(stored.dtype(), DType::f64);
        const int64_t grouped = length / kChannelGroup * kChannelGroup;
        std::vector<std::vector<std::byte>> records(kChannelGroup, std::vector<std::byte>(static_cast<std::size_t>(quantized_row_bytes(keys, kD))));
        std::vector<std::byte*> rows;
        for (auto& r : records) rows.push_back(r.data());
        for (int64_t g = 0; g < kHkv; ++g)
          for (int64_t j = 0; j < length; ++j) {
            std::vector<double> want(kD);
            const float* x = appended.data<float>() + (g * 200 + j) * kD;
            if (j < grouped) {
              quantize_channel_group(x - (j % kChannelGroup) * kD, kD, keys, rows.data());
              dequantize_channel_group_row(rows.data(), j % kChannelGroup, kD, keys, 0, kD, want.data());
            } else {
              quantize_row(x, kD, keys, records[0].data());
              dequantize_row(records[0].data(), kD, keys, 0, kD, want.data());
            }
            for (int64_t c = 0; c < kD; ++c)
              ASSERT_EQ(stored.data<double>()[(g * length + j) * kD + c], want[at(c)])
                  << "length " << length << ", head " << g << ", key " << j << ", channel " << c;
          }
      }
    });
}

// Every fp8 code, widened in registers on every target, is its OCP value: 8 sequences of one token
// whose value records hold the 256 codes (scale 1) are attended by one query each, whose output is
// then its one value row (weight 1, up to the rounding of p · v / p), compared with the reference's
// reading of the records: a code read as a neighbour would be 1/16 off or more.
TEST(AttendOptions, EveryFp8CodeReadsAsItsValueOnEveryTarget) {
  ATTNKIT_TRACE_SEED();
  for (DType dtype : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    Rng rng(13);
    KVCache cache(make_config(KVCacheLayout::contiguous, 1, 32, 32, 8, 1, 8, 0, dtype));
    std::vector<Id> ids;
    for (int s = 0; s < 8; ++s) {
      ids.push_back(cache.add_sequence());
      cache.append(ids.back(), random_tensor(rng, {1, 1, 32}, DType::f32).view(), random_tensor(rng, {1, 1, 32}, DType::f32).view());
      auto* record = const_cast<std::byte*>(cache.storage().values.at<std::byte>({s, 0, 0, 0}));
      for (int c = 0; c < 32; ++c) record[c] = static_cast<std::byte>(32 * s + c);
      const std::uint16_t one = 0x3C00;  // the block's scale: 1.0 in float16
      std::memcpy(record + 32, &one, sizeof one);
    }
    const Tensor q = random_tensor(rng, {8, 1, 1, 32}, DType::f32);
    for (Target t : supported_targets()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " on " + target_name(t));
      set_target(t);
      Tensor out = poisoned(DType::f32, {8, 1, 1, 32});
      attend(cache, ids, q.view(), out.view());
      reset_target();
      for (int s = 0; s < 8; ++s) {
        const Tensor want = cache.values(ids[static_cast<std::size_t>(s)]);  // [1, 1, 32], exact
        for (int c = 0; c < 32; ++c) {
          const double w = want.data<double>()[c];
          const float got = out.data<float>()[s * 32 + c];
          if (std::isnan(w)) EXPECT_TRUE(std::isnan(got)) << "code " << 32 * s + c << ": " << got;
          else if (std::isinf(w)) EXPECT_EQ(got, w) << "code " << 32 * s + c;
          else EXPECT_NEAR(got, w, 1e-6 * std::fabs(w)) << "code " << 32 * s + c;  // p · v / p, rounded
        }
      }
    }
  }
}

// Codes the quantiser never writes but a saved or hand-made cache may hold: an fp8 NaN code (E4M3's
// 0x7F and 0xFF, E5M2's 0x7D) read in place on every target is NaN, as the reference reads it. A NaN
// key makes every score of the queries that see it NaN, so their whole rows; a NaN value feature
// only that column of the rows that see it.
TEST(AttendOptions, Fp8NaNCodesReadAsNaNOnEveryTarget) {
  ATTNKIT_TRACE_SEED();
  struct Code {
    DType dtype;
    std::uint8_t key_code, value_code;
  };
  for (const Code& c : {Code{DType::fp8_e4m3, 0x7F, 0xFF}, Code{DType::fp8_e5m2, 0x7D, 0xFF}}) {
    Rng rng(12);
    KVCache cache(make_config(KVCacheLayout::contiguous, 1, 64, 32, 2, 16, 8, 0, c.dtype));
    const Id clean = cache.add_sequence(), spoiled = cache.add_sequence();
    const Tensor k = random_tensor(rng, {1, 5, 64}, DType::f32), v = random_tensor(rng, {1, 5, 32}, DType::f32);
    cache.append(clean, k.view(), v.view());
    cache.append(spoiled, k.view(), v.view());
    // Key 2 of the spoiled sequence: feature 40's code; value 3: feature 5's (records: codes first).
    const KVCache::Storage storage = cache.storage();
    const int64_t slot = 1;  // the second sequence's slot in the contiguous pools
    auto* key_row = const_cast<std::byte*>(storage.keys.at<std::byte>({slot, 0, 2, 0}));
    auto* value_row = const_cast<std::byte*>(storage.values.at<std::byte>({slot, 0, 3, 0}));
    key_row[40] = std::byte{c.key_code};
    value_row[5] = std::byte{c.value_code};
    ASSERT_TRUE(std::isnan(cache.keys(spoiled).data<double>()[2 * 64 + 40])) << "the reference reads the code as NaN";
    ASSERT_TRUE(std::isnan(cache.values(spoiled).data<double>()[3 * 32 + 5]));
    const Tensor q = random_tensor(rng, {2, 2, 5, 64}, DType::f32);  // 5 queries: they see keys 0 .. i
    for (Target t : supported_targets()) {
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " on " + target_name(t));
      set_target(t);
      Tensor out = poisoned(DType::f32, {2, 2, 5, 32});
      const Id ids[] = {clean, spoiled};
      attend(cache, ids, q.view(), out.view());
      reset_target();
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 5; ++i)
          for (int64_t col = 0; col < 32; ++col) {
            const float clean_x = out.data<float>()[((0 * 2 + h) * 5 + i) * 32 + col];
            const float x = out.data<float>()[((1 * 2 + h) * 5 + i) * 32 + col];
            ASSERT_TRUE(std::isfinite(clean_x)) << "h " << h << ", i " << i << ", c " << col;
            const bool sees_key = i >= 2, sees_value = i >= 3;
            EXPECT_EQ(std::isnan(x), sees_key || (sees_value && col == 5)) << "h " << h << ", query " << i << ", column " << col << ": " << x;
          }
    }
  }
}

// The quantisation's own error, pinned: a decode step (32 query heads over 8 KV heads, d = 128, 2048
// cached tokens, a fixed seed) over quantized caches against the same step over an f32 cache, as
// the RMS of the output's difference relative to the RMS of the f32 cache's output. Keys and values
// are normal; with outliers, 4 of the 128 key channels are 20 times larger, as real keys have; int8
// and int4 caches with keys per token and per channel, and keys per channel over f32 or int4
// values. The table in docs/kv-cache.md and its text list these figures; a quantiser that got worse (or a test that stopped measuring)
// leaves the margin.
TEST(KVCacheQuantization, OutputErrorAgainstAnF32CacheIsAsDocumented) {
  constexpr int64_t kHkv = 8, kHq = 32, kD = 128, kTokens = 2048;
  struct Row {
    const char* keys;
    DType storage;
    double documented;  // relative RMS error of the output
    KeyQuantization key_quantization = KeyQuantization::per_token;
    std::optional<DType> values = std::nullopt;  // the values' storage, if not `storage`
  };
  const Row rows[] = {{"normal", DType::int8, 7.59e-3},
                      {"normal", DType::int8, 7.75e-3, KeyQuantization::per_channel},
                      {"normal", DType::int4, 1.109e-1, KeyQuantization::per_channel},
                      {"outlier channels", DType::int8, 1.113e-2, KeyQuantization::per_channel},
                      {"outlier channels", DType::int4, 2.137e-1, KeyQuantization::per_channel},
                      {"outlier channels", DType::int4, 1.996e-1, KeyQuantization::per_channel, DType::f32},
                      {"outlier channels", DType::int8, 7.68e-2, KeyQuantization::per_channel, DType::int4},
                      {"normal", DType::int4, 1.130e-1},
                      {"normal", DType::fp8_e4m3, 3.89e-2},
                      {"normal", DType::fp8_e5m2, 7.51e-2},
                      {"outlier channels", DType::int8, 5.08e-2},
                      {"outlier channels", DType::int4, 5.02e-1},
                      {"outlier channels", DType::fp8_e4m3, 1.084e-1},
                      {"outlier channels", DType::fp8_e5m2, 2.90e-1}};
  for (const Row& row : rows) {
    const bool per_channel = row.key_quantization == KeyQuantization::per_channel;
    const std::string values = row.values ? ", " + std::string(dtype_name(*row.values)) + " values" : "";
    SCOPED_TRACE(std::string(row.keys) + " keys" + (per_channel ? " per channel, " : ", ") + std::string(dtype_name(row.storage)) + values);
    std::mt19937 engine(2026);
    std::normal_distribution<float> normal;
    Tensor k(DType::f32, {kHkv, kTokens, kD}), v(DType::f32, {kHkv, kTokens, kD}), q(DType::f32, {1, kHq, 1, kD});
    const bool outliers = std::string(row.keys) != "normal";
    for (int64_t i = 0; i < k.numel(); ++i) k.data<float>()[i] = normal(engine) * (outliers && (i % kD) % 32 == 5 ? 20.0f : 1.0f);
    for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = normal(engine);
    for (int64_t i = 0; i < q.numel(); ++i) q.data<float>()[i] = normal(engine);
    auto step = [&](DType storage) {
      KVCacheConfig config = make_config(KVCacheLayout::contiguous, kHkv, kD, kD, 1, kTokens, 16, 0, storage);
      if (storage != DType::f32) config.key_quantization = row.key_quantization, config.value_dtype = row.values;
      KVCache cache(config);
      const Id id = cache.add_sequence();
      cache.append(id, k.view(), v.view());
      Tensor out = poisoned(DType::f32, {1, kHq, 1, kD});
      attend(cache, std::vector<Id>{id}, q.view(), out.view());
      return widened(out);
    };
    const Tensor exact = step(DType::f32), got = step(row.storage);
    const double relative = testing::rms_diff(got, exact) / testing::rms_diff(exact, Tensor(DType::f64, {1, kHq, 1, kD}));
    std::printf("[ note ] quantisation error, %s keys%s, %s cache%s: relative RMS error of the output %.3e\n", row.keys,
                per_channel ? " per channel" : "", std::string(dtype_name(row.storage)).c_str(), values.c_str(), relative);
    EXPECT_GT(relative, 0.85 * row.documented);
    EXPECT_LT(relative, 1.15 * row.documented);
  }
}

// Without the oracle: zeros and −inf where a query sees nothing, and a single visible key gives its
// value exactly (weight exp(0) / 1).
TEST(Attend, RowsThatSeeNoKeyGiveZerosAndAnEmptyBatchIsValid) {
  ATTNKIT_TRACE_SEED();
  for_each_layout([](KVCacheLayout layout) {
    Rng rng(7);
    KVCache cache(make_config(layout, 2, 8, 5, 2, 10, 2));
    const Id empty = cache.add_sequence(), two = cache.add_sequence();
    cache.append(two, random_tensor(rng, {2, 2, 8}, DType::f32).view(), random_tensor(rng, {2, 2, 5}, DType::f32).view());
    const Id ids[] = {empty, two};
    Tensor out = poisoned(DType::f32, {2, 4, 5, 5}), lse = poisoned(DType::f32, {2, 4, 5});
    CachedAttentionOptions options;
    options.lse = lse.view();
    attend(cache, ids, random_tensor(rng, {2, 4, 5, 8}, DType::f32).view(), out.view(), options);
    const Tensor values = cache.values(two);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < 5; ++i) {
          const int64_t position = (b == 0 ? 0 : 2) - 5 + i;  // length − n + i
          const float row_lse = lse.data<float>()[(b * 4 + h) * 5 + i];
          const float* row = out.data<float>() + ((b * 4 + h) * 5 + i) * 5;
          EXPECT_EQ(row_lse == -INFINITY, position < 0) << "b " << b << ", h " << h << ", i " << i << ": lse " << row_lse;
          for (int64_t c = 0; c < 5; ++c) {
            const float only_key = values.data<float>()[(h / 2) * 2 * 5 + c];  // KV head h / 2, key 0
            EXPECT_TRUE(position < 0 ? row[c] == 0 : position == 0 ? row[c] == only_key : std::isfinite(row[c]))
                << "b " << b << ", h " << h << ", i " << i << ", c " << c << ": " << row[c];
          }
        }
    Tensor no_out(DType::f32, {0, 4, 1, 5}), no_lse(DType::f32, {0, 4, 1});
    options.lse = no_lse.view();
    attend(cache, {}, Tensor(DType::f32, {0, 4, 1, 8}).view(), no_out.view(), options);
  });
}

// Any strides: q and out in [B, n, Hq, d] memory, passed as permuted views, give the contiguous
// call's results bitwise.
TEST(Attend, PermutedQueryAndOutputViewsGiveTheContiguousResults) {
  ATTNKIT_TRACE_SEED();
  for_each_layout([](KVCacheLayout layout) {
    Rng rng(10);
    KVCache cache(make_config(layout, 2, 40, 24, 4, 300, 16));
    const std::vector<Id> ids = fill(cache, {0, 17, 300}, rng);
    for (Kernel kernel : {Kernel::automatic, Kernel::reference}) {
      SCOPED_TRACE(kernel_name(kernel));
      CachedAttentionOptions options;
      options.kernel = kernel;
      const Tensor q_bnhd = random_tensor(rng, {3, 5, 6, 40}, DType::f32);
      const Tensor q = Tensor::converted(q_bnhd.view().permuted({0, 2, 1, 3}), DType::f32);
      Tensor out = poisoned(DType::f32, {3, 6, 5, 24}), out_bnhd = poisoned(DType::f32, {3, 5, 6, 24});
      attend(cache, ids, q.view(), out.view(), options);
      attend(cache, ids, q_bnhd.view().permuted({0, 2, 1, 3}), out_bnhd.view().permuted({0, 2, 1, 3}), options);
      EXPECT_TRUE(testing::bitwise_equal(out, Tensor::converted(out_bnhd.view().permuted({0, 2, 1, 3}), DType::f32)));
    }
  });
}

TEST(Attend, BadCallsRaiseTheRightErrorAndWriteNothing) {
  KVCache cache(make_config(KVCacheLayout::paged, 2, 8, 5, 3, 10, 2));
  const Id a = cache.add_sequence(), b = cache.add_sequence(), freed = cache.add_sequence();
  cache.free_sequence(freed);
  for (Id id : {a, b}) cache.append(id, Tensor(DType::f32, {2, 4, 8}).view(), Tensor(DType::f32, {2, 4, 5}).view());
  const Id ab[] = {a, b}, a_only[] = {a}, aa[] = {a, a}, a_unknown[] = {a, 77}, a_freed[] = {a, freed};
  const Tensor q(DType::f32, {2, 4, 1, 8}), q64(DType::f64, {2, 4, 1, 8});
  Tensor out = poisoned(DType::f32, {2, 4, 1, 5}), lse64(DType::f64, {2, 4, 1});
  const TensorView o = out.view();
  auto with = [](const std::function<void(CachedAttentionOptions&)>& set) {
    CachedAttentionOptions options;
    set(options);
    return options;
  };
  EXPECT_ATTNKIT_ERROR(attend(cache, a_only, q.view(), o), invalid_shape, "q");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, Tensor(DType::f32, {2, 4, 1, 9}).view(), o), invalid_shape, "q");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, Tensor(DType::f32, {2, 3, 1, 8}).view(), poisoned(DType::f32, {2, 3, 1, 5}).view()),
                       invalid_shape, "q");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, Tensor(DType::i32, {2, 4, 1, 8}).view(), o), invalid_dtype, "q");
  EXPECT_ATTNKIT_ERROR(attend(cache, a_unknown, q.view(), o), invalid_argument, "77");
  EXPECT_ATTNKIT_ERROR(attend(cache, a_freed, q.view(), o), invalid_argument, "freed");
  EXPECT_ATTNKIT_ERROR(attend(cache, a_freed, q.view(), o), invalid_argument, "sequences[1]: sequence");
  EXPECT_ATTNKIT_ERROR(attend(cache, aa, q.view(), o), invalid_argument, "twice");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q.view(), poisoned(DType::f32, {2, 4, 1, 6}).view()), invalid_shape, "out");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q.view(), poisoned(DType::f64, {2, 4, 1, 5}).view()), invalid_dtype, "out");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q.view(), o, with([&](auto& x) { x.lse = lse64.view(); })), invalid_dtype, "lse");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q.view(), o, with([](auto& x) { x.alibi_slopes = std::span(kSlopes, 3); })),
                       invalid_shape, "alibi_slopes");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q.view(), o, with([](auto& x) { x.softcap = -1; })), invalid_argument, "softcap");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q.view(), o, with([](auto& x) { x.sinks = std::span(kSinks, 3); })),
                       invalid_shape, "sinks");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q.view(), o, with([](auto& x) { x.window = {-2, 0}; })), invalid_argument, "window");
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, q64.view(), poisoned(DType::f64, {2, 4, 1, 5}).view(),
                              with([](auto& x) { x.kernel = Kernel::fast; })),
                       unsupported, "fast");
  for (double x : testing::values(out)) ASSERT_TRUE(std::isnan(x)) << "a failed call wrote out";
  Tensor shared(DType::f32, {2 * 4 * 8});  // out inside q's memory
  EXPECT_ATTNKIT_ERROR(attend(cache, ab, ConstTensorView::contiguous(shared.raw(), DType::f32, {2, 4, 1, 8}),
                              TensorView::contiguous(shared.data<float>() + 8, DType::f32, {2, 4, 1, 5})),
                       overlap, "out");
}

// The reference path checks its memory for the whole batch (the longest sequence's keys in float64
// exceed the limit) and computes every sequence before writing any: nothing of out or lse is written.
TEST(Attend, ReferenceRunningOutOfMemoryOnALaterSequenceWritesNothing) {
  constexpr int64_t kLong = 200000;  // keys of 32 floats: 51 MB in float64, over the 40 MiB limit below
  KVCache cache(make_config(KVCacheLayout::contiguous, 1, 32, 32, 2, kLong));
  const Id small = cache.add_sequence(), large = cache.add_sequence();
  cache.append(small, Tensor(DType::f32, {1, 4, 32}).view(), Tensor(DType::f32, {1, 4, 32}).view());
  cache.append(large, Tensor(DType::f32, {1, kLong, 32}).view(), Tensor(DType::f32, {1, kLong, 32}).view());
  const Id both[] = {small, large};
  const Tensor q(DType::f32, {2, 1, 1, 32});
  Tensor out = poisoned(DType::f32, {2, 1, 1, 32}), lse = poisoned(DType::f32, {2, 1, 1});
  CachedAttentionOptions options;
  options.kernel = Kernel::reference;
  options.lse = lse.view();
  set_memory_limit(std::int64_t{40} << 20);
  EXPECT_ATTNKIT_ERROR(attend(cache, both, q.view(), out.view(), options), out_of_memory, "");
  set_memory_limit(0);
  for (double x : testing::values(out)) ASSERT_TRUE(std::isnan(x)) << "the first sequence's rows were written";
  for (double x : testing::values(lse)) ASSERT_TRUE(std::isnan(x)) << "the first sequence's lse was written";
  attend(cache, both, q.view(), out.view(), options);  // with memory, both are written
  for (double x : testing::values(out)) EXPECT_FALSE(std::isnan(x));
}

// ---- 4. decoding: one token at a time equals the whole sequence at once ----

// Two sequences decoded together, one token each per step (a batched append, then a batched attend
// with n = 1), so that their blocks interleave in the pool. The rows collected step by step must meet
// the accuracy rule against the float64 causal forward of each whole sequence (Causal::top_left,
// n = m), as the fast forward of the whole sequence does, and match its lse to 1e-5 row by row. (Two
// float32 results are compared through the oracle they share: their direct difference has no bound
// of its own but the sum of their errors.)
TEST(AttendDecoding, TokenByTokenEqualsTheFullCausalForward) {
  ATTNKIT_TRACE_SEED();
  const int64_t Hq = 6, Hkv = 2, d_k = 40, d_v = 24, lengths[] = {141, 97};
  for_each_layout([&](KVCacheLayout layout) {
    Rng rng(8);
    KVCache cache(make_config(layout, Hkv, d_k, d_v, 2, 141, 4, 36 + 25));  // paged: a pool just large enough
    const Id ids[] = {cache.add_sequence(), cache.add_sequence()};
    Tensor q[2], k[2], v[2], decoded[2], decoded_lse[2];
    for (int s = 0; s < 2; ++s) {
      q[s] = random_tensor(rng, {1, Hq, lengths[s], d_k}, DType::f32);
      k[s] = random_tensor(rng, {1, Hkv, lengths[s], d_k}, DType::f32);
      v[s] = random_tensor(rng, {1, Hkv, lengths[s], d_v}, DType::f32);
      decoded[s] = poisoned(DType::f32, {1, Hq, lengths[s], d_v});
      decoded_lse[s] = poisoned(DType::f32, {1, Hq, lengths[s]});
    }
    for (int64_t step = 0; step < lengths[0]; ++step) {
      const int64_t B = step < lengths[1] ? 2 : 1;
      Tensor k_new(DType::f32, {B, Hkv, 1, d_k}), v_new(DType::f32, {B, Hkv, 1, d_v}), q_new(DType::f32, {B, Hq, 1, d_k});
      for (int64_t b = 0; b < B; ++b)
        copy_rows(k[b], 0, step, k_new, b, 0), copy_rows(v[b], 0, step, v_new, b, 0), copy_rows(q[b], 0, step, q_new, b, 0);
      if (B == 2) {
        cache.append(ids, k_new.view(), v_new.view());
      } else {
        cache.append(ids[0], sub(k_new, 0), sub(v_new, 0));
      }
      Tensor out = poisoned(DType::f32, {B, Hq, 1, d_v}), lse = poisoned(DType::f32, {B, Hq, 1});
      CachedAttentionOptions options;
      options.lse = lse.view();
      attend(cache, std::span(ids, at(B)), q_new.view(), out.view(), options);
      for (int64_t b = 0; b < B; ++b) {
        copy_rows(out, b, 0, decoded[b], 0, step);
        for (int64_t h = 0; h < Hq; ++h) decoded_lse[b].data<float>()[h * lengths[b] + step] = lse.data<float>()[b * Hq + h];
      }
    }
    if (layout == KVCacheLayout::paged) {  // the premise: a block of one sequence lies among the other's
      const auto first = cache.block_table(ids[0]), second = cache.block_table(ids[1]);
      const auto [low, high] = std::minmax_element(first.begin(), first.end() - std::count(first.begin(), first.end(), -1));
      ASSERT_TRUE(std::any_of(second.begin(), second.end(), [&](int64_t x) { return x > *low && x < *high; }));
    }
    for (int s = 0; s < 2; ++s) {
      SCOPED_TRACE("sequence " + std::to_string(s));
      AttentionOptions causal;
      causal.causal = Causal::top_left;
      causal.kernel = Kernel::reference;
      const testing::ForwardResult exact = testing::run_forward(widened(q[s]), widened(k[s]), widened(v[s]), causal);
      causal.kernel = Kernel::fast;
      const testing::ForwardResult whole = testing::run_forward(q[s], k[s], v[s], causal, DType::f32);
      const double naive = testing::rms_diff(widened(testing::naive_f32_forward(q[s], k[s], v[s], causal)), exact.out);
      const double limit = 2 * naive + kFloor * std::max(1.0, max_abs(exact.out));
      const double error = testing::rms_diff(widened(decoded[s]), exact.out);
      EXPECT_LE(error, limit) << "token by token; naive f32 " << naive;
      EXPECT_LE(testing::rms_diff(widened(whole.out), exact.out), limit) << "whole sequence; naive f32 " << naive;
      AccuracyRecord::add(error, limit);
      for (int64_t r = 0; r < Hq * lengths[s]; ++r) {
        const float want = exact.lse.data<float>()[r];
        ASSERT_NEAR(decoded_lse[s].data<float>()[r], want, 1e-5 * std::max(1.0f, std::fabs(want))) << "row " << r;
      }
    }
  });
}

// ---- 5. determinism ----

TEST(AttendDeterminism, BitwiseIdenticalForOneAndThreeThreads) {
  ATTNKIT_TRACE_SEED();
  for_each_layout([](KVCacheLayout layout) {
    Rng rng(9);
    KVCache cache(make_config(layout, 2, 64, 64, 5, 2100, 8));
    const std::vector<Id> ids = fill(cache, {0, 5, 300, 1500, 2100}, rng);  // up to three key splits when decoding
    for (int64_t n : {1, 5, 40}) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const Tensor q = random_tensor(rng, {5, 6, n, 64}, DType::f32);
      auto run = [&](int threads) {
        set_num_threads(threads);
        std::pair<Tensor, Tensor> r{poisoned(DType::f32, {5, 6, n, 64}), poisoned(DType::f32, {5, 6, n})};
        CachedAttentionOptions options;
        options.lse = r.second.view();
        attend(cache, ids, q.view(), r.first.view(), options);
        return r;
      };
      const auto one = run(1), three = run(3);
      set_num_threads(0);
      EXPECT_TRUE(testing::bitwise_equal(one.first, three.first)) << "out";
      EXPECT_TRUE(testing::bitwise_equal(one.second, three.second)) << "lse";
    }
  });
}

}  // namespace
}  // namespace attnkit
