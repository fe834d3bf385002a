/// \file
/// attnkit::dist — exact attention over a sequence split across MPI ranks (ring attention).
///
/// Every rank holds a shard of the same global sequence of length N along the sequence dimension:
/// \code{.unparsed}
///   q_local [B, Hq, n_r, d_k]   k_local [B, Hkv, n_r, d_k]   v_local [B, Hkv, n_r, d_v]
///   out_local [B, Hq, n_r, d_v] lse_local [B, Hq, n_r] (f32)
/// \endcode
/// and the result on each rank equals the rows of a single-process attnkit::forward/backward over the
/// full sequence (self-attention: N queries over the same N keys) at the rank's global positions.
/// The K/V shards travel around the ring of ranks (P − 1 steps) while each rank computes on the block
/// it holds; partial results are merged by their log-sum-exp.
///
/// Layouts. The sequence is cut into C chunks, C = P (contiguous) or 2P (zigzag), of sizes
/// floor(N/C) + 1 for the first N mod C chunks and floor(N/C) for the rest: sizes differ by at most
/// one and the shorter chunks come last (chunks are empty when N < C). Rank r holds
/// \code{.unparsed}
///   contiguous: chunk r;
///   zigzag:     chunks r and 2P − 1 − r, in that order (so causal work is balanced over the ranks).
/// \endcode
/// chunks(), local_length() and global_positions() give the exact mapping; shard()/unshard() apply it.
///
/// Options (RingOptions::attention), with their single-process meaning over the global sequence:
/// \code{.unparsed}
///   scale, softcap            as in attnkit/options.hpp
///   causal                    top_left on global positions (bottom_right is the same thing here,
///                             since the global query and key lengths are equal)
///   key_lengths               global: one per batch entry, 0..N; keys at global position >= it are padding
///   kernel                    automatic or fast
/// Refused with Error(unsupported), each for a reason:
///   mask        a global [N, N] mask is the memory ring attention exists to avoid; no sharded form yet
///   window      would need per-block offsets and distance-based block skipping; not implemented
///   alibi       its bias depends on global distances, which each block call cannot see
///   dropout     its stream is keyed by query/key index, which would be local per block, not global
///   reference   the float64 reference backward renormalises per block, which is wrong for a partial
///               block (see ring_backward); for consistency both directions use the fast kernel
/// \endcode
/// Dtypes: f32, f16 and bf16 storage; each rank computes in float32 and rounds each output once.
/// f64 is refused (Error(invalid_dtype)): the float32 kernels would silently lose its precision.
///
/// Collective calls: every rank of `comm` must call with arguments that agree (shapes other than n_r,
/// dtype, layout, options, the key_lengths values). Before any ring traffic the ranks exchange a
/// signature of their arguments; on a disagreement, or when any rank rejects its own arguments,
/// EVERY rank raises attnkit::Error naming what differs, instead of hanging. Nothing is written then.
/// MPI must be initialised; only the calling thread uses MPI (MPI_THREAD_SINGLE suffices).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "attnkit/options.hpp"
#include "attnkit/tensor.hpp"

/// Exact attention over a sequence split across MPI ranks (ring attention); see attnkit/dist.hpp.
namespace attnkit::dist {

/// How the global sequence is split over the ranks.
enum class Layout : std::uint8_t { contiguous, zigzag };
/// \var Layout::contiguous
/// C = P chunks; rank r holds chunk r.
/// \var Layout::zigzag
/// C = 2P chunks; rank r holds chunks r and 2P − 1 − r, so that causal work is balanced.

/// Stable name of a layout: "contiguous" or "zigzag".
const char* layout_name(Layout layout) noexcept;

/// Where one ring step's time went on this rank (filled when RingOptions::stats is set).
struct RingStep {
  double compute_seconds = 0;  ///< block kernels and merging, in seconds
  double wait_seconds = 0;     ///< seconds blocked in MPI_Waitall for this step's transfers (communication not hidden)
  std::int64_t bytes_sent = 0; ///< bytes posted to the next rank during this step
};
/// Per-step timings of one ring call on this rank.
struct RingStats {
  std::vector<RingStep> steps;  ///< P steps (the backward's last step includes sending dk/dv home)
};

/// Options of ring_forward() and ring_backward().
struct RingOptions {
  AttentionOptions attention{};  ///< see attnkit/dist.hpp for which options apply
  Layout layout = Layout::zigzag;  ///< how the sequence is split over the ranks
  RingStats* stats = nullptr;    ///< optional: per-step timings of this rank, overwritten by each call
};

/// One contiguous range of global positions held by a rank, and where it sits in the local shard.
struct Chunk {
  std::int64_t global_start = 0;  ///< first global sequence position of the chunk
  std::int64_t length = 0;        ///< number of positions (0 for an empty chunk)
  std::int64_t local_start = 0;   ///< row of the rank's local shard where the chunk starts
};

/// The chunks rank `rank` of `ranks` holds for a global length `global_length`, in local order.
std::vector<Chunk> chunks(Layout layout, std::int64_t global_length, int rank, int ranks);
/// The number of rows rank `rank` of `ranks` holds for a global length `global_length` (n_r).
std::int64_t local_length(Layout layout, std::int64_t global_length, int rank, int ranks);
/// The global sequence position of each local row: global_positions(...)[i] is that of local row i.
std::vector<std::int64_t> global_positions(Layout layout, std::int64_t global_length, int rank, int ranks);

/// The rows of `full` ([B, H, N] or [B, H, N, d], sequence in dimension 2) that rank `rank` holds,
/// as a contiguous tensor of full's dtype.
Tensor shard(ConstTensorView full, Layout layout, int rank, int ranks);
/// Writes `local` (rank `rank`'s rows) into their global positions of `full`; other rows are untouched.
void unshard(ConstTensorView local, TensorView full, Layout layout, int rank, int ranks);

/// Collective forward: out_local and lse_local of the local queries against all N keys. lse_local
/// is required: the backward needs it.
void ring_forward(MPI_Comm comm, ConstTensorView q_local, ConstTensorView k_local, ConstTensorView v_local,
                  TensorView out_local, TensorView lse_local, const RingOptions& options = {});

/// Collective backward: gradients of the local shards, given the forward's out_local and lse_local
/// (the final, merged ones) and d_out_local. Per block pair it calls attnkit's fast backward with
/// those final out and lse: the kernel recomputes P = exp(s − lse) and D = rowsum(dO ∘ O), which
/// are exactly the global softmax's values restricted to the block, so the block gradients sum to
/// the global ones. dq accumulates locally; each dk/dv partial travels with its K/V block around
/// the ring and comes home after P steps.
void ring_backward(MPI_Comm comm, ConstTensorView q_local, ConstTensorView k_local, ConstTensorView v_local,
                   ConstTensorView out_local, ConstTensorView d_out_local, ConstTensorView lse_local,
                   TensorView dq_local, TensorView dk_local, TensorView dv_local, const RingOptions& options = {});

}  // namespace attnkit::dist
