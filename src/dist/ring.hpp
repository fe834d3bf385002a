// The ring exchange: send a buffer to the next rank while receiving one from the previous rank,
// without blocking, so that the caller computes on the current block meanwhile.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>

namespace attnkit::dist::detail {

class RingExchange {
 public:
  // Messages of one exchange use `tag`, so that two exchanges on one communicator (K/V blocks and
  // their gradients) never match each other's messages.
  RingExchange(MPI_Comm comm, int tag);
  RingExchange(const RingExchange&) = delete;
  RingExchange& operator=(const RingExchange&) = delete;
  // Completes any pending transfer: MPI must not outlive the buffers it writes or reads.
  ~RingExchange();

  // Posts the send of `send` (send_count floats) to rank + 1 and the receive of recv_count floats
  // from rank − 1 into `recv`. Both buffers must stay untouched until wait().
  void start(const float* send, std::int64_t send_count, float* recv, std::int64_t recv_count);
  // Blocks until both transfers of the last start() are complete; returns the seconds spent waiting.
  double wait();
  bool pending() const { return pending_; }

 private:
  MPI_Comm comm_;
  int tag_, next_, prev_;
  std::array<MPI_Request, 2> requests_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool pending_ = false;
};

}  // namespace attnkit::dist::detail
