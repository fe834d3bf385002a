// The ring exchange (see ring.hpp).
#include "dist/ring.hpp"

namespace attnkit::dist::detail {

RingExchange::RingExchange(MPI_Comm comm, int tag) : comm_(comm), tag_(tag) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  next_ = (rank + 1) % ranks;
  prev_ = (rank + ranks - 1) % ranks;
}

RingExchange::~RingExchange() {
  if (pending_) MPI_Waitall(2, requests_.data(), MPI_STATUSES_IGNORE);
}

void RingExchange::start(const float* send, std::int64_t send_count, float* recv, std::int64_t recv_count) {
  // The receive goes first so that a self-exchange (one rank) and eager sends find it posted.
  // Counts fit in int: make_problem refuses larger blocks on every rank.
  MPI_Irecv(recv, static_cast<int>(recv_count), MPI_FLOAT, prev_, tag_, comm_, &requests_[0]);
  MPI_Isend(send, static_cast<int>(send_count), MPI_FLOAT, next_, tag_, comm_, &requests_[1]);
  pending_ = true;
}

double RingExchange::wait() {
  const double begin = MPI_Wtime();
  if (pending_) MPI_Waitall(2, requests_.data(), MPI_STATUSES_IGNORE);
  pending_ = false;
  return MPI_Wtime() - begin;
}

}  // namespace attnkit::dist::detail
