// A ring call after validation and agreement: sizes every rank agrees on, the layout of every
// rank, and the options resolved for the block calls. Kernels below trust it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/dist.hpp"
#include "core/problem.hpp"

namespace attnkit::dist::detail {

struct RingProblem {
  std::string op;  // "ring_forward" or "ring_backward", for messages
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, ranks = 1;
  std::int64_t B = 0, Hq = 0, Hkv = 0, dk = 0, dv = 0;
  std::int64_t N = 0;                 // global sequence length
  std::vector<std::int64_t> lengths;  // local length of every rank
  Layout layout = Layout::zigzag;
  // The options resolved once for every block: the fast kernel and its target, scale, softcap,
  // causal (global) and key_lengths (global, one per batch entry, or empty). A block takes its views,
  // its own causal alignment and local key lengths from it (block_plan.hpp).
  attnkit::detail::Problem resolved;

  std::int64_t length(int r) const { return lengths[static_cast<std::size_t>(r)]; }
  std::int64_t max_length() const;
  std::vector<Chunk> chunks_of(int r) const { return chunks(layout, N, r, ranks); }
};

// The tensors a ring call names, for validation; the backward's extra ones may be empty.
struct RingArgs {
  ConstTensorView q, k, v, out, lse, d_out;
  TensorView dq, dk, dv;
  bool backward = false;
};

// Validates the local arguments, runs the agreement check, and checks the local lengths against
// the layout and key_lengths against N, the same way on every rank. Throws Error on every rank or
// on none.
RingProblem make_problem(const char* op, MPI_Comm comm, const RingArgs& args, const RingOptions& options);

}  // namespace attnkit::dist::detail
