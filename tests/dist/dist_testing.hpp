// Helpers shared by the dist tests: this process's place in MPI_COMM_WORLD.
#pragma once

#include <mpi.h>

namespace attnkit::testing {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

}  // namespace attnkit::testing
