// attend(): attention of new queries over a KV cache. Validates, builds the block table of the
// batch, then runs the problem on its backend, which reads the cache's blocks in place.
#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "dispatch/backends.hpp"
#include "dispatch/run_within_memory.hpp"
#include "api/validate.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"

namespace attnkit {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// attend() itself, before memory failures are reported as errors.
void attend_sequences(const KVCache& cache, std::span<const KVCache::SequenceId> sequences, ConstTensorView q,
                      TensorView out, const CachedAttentionOptions& options) {
  const std::int64_t batch = static_cast<std::int64_t>(sequences.size());
  if (q.rank() != 4 || q.size(0) != batch) {
    fail(ErrorCode::invalid_shape, "q: expected [B, Hq, n, d_k] with B = " + std::to_string(batch) +
                                       " (one entry per sequence), got " + q.shape_string());
  }
  const KVCache::Storage storage = cache.storage();
  std::vector<std::int64_t> lengths, table;
  for (std::int64_t b = 0; b < batch; ++b) {
    const KVCache::SequenceId id = sequences[static_cast<std::size_t>(b)];
    if (std::count(sequences.begin(), sequences.end(), id) > 1) {
      fail(ErrorCode::invalid_argument, "sequences: sequence " + std::to_string(id) + " is listed twice");
    }
    if (!cache.contains(id)) {
      fail(ErrorCode::invalid_argument, "sequences[" + std::to_string(b) + "]: sequence " + std::to_string(id) +
                                            " is not in the cache (never added, or freed)");
    }
    lengths.push_back(cache.length(id));
    const std::span<const std::int64_t> row = cache.block_table(id);
    table.insert(table.end(), row.begin(), row.end());
  }
  // Paged block sizes are powers of two (the cache checks); a contiguous slot is the sequence's only
  // block, so any shift past its length maps every key into it.
  const int shift = storage.blocks_per_sequence == 1 ? 62 : std::countr_zero(static_cast<std::uint64_t>(storage.block_size));
  const detail::CachedKeys cached{table.data(), storage.blocks_per_sequence, shift, lengths.data(), storage.key_channel_group};
  const std::int64_t m = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  detail::ForwardOutputs outputs;
  const detail::Problem problem =
      detail::validate_cached_forward(q, storage.keys, storage.values, cached, m, out, options, outputs);
  detail::run_forward("attend", problem, outputs);
}

}  // namespace

void attend(const KVCache& cache, std::span<const KVCache::SequenceId> sequences, ConstTensorView q, TensorView out,
            const CachedAttentionOptions& options) {
  detail::reporting_out_of_memory("attend", [&] { attend_sequences(cache, sequences, q, out, options); });
}

}  // namespace attnkit
