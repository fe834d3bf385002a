// The dist tests' main: MPI around GoogleTest, one seed for every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/testing.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  // Every rank builds the same global inputs, so they must share rank 0's seed (fresh, or
  // ATTNKIT_TEST_SEED): rank 0 draws it, the others take it through the environment before their
  // first test_seed() call.
  std::uint64_t seed = rank == 0 ? attnkit::testing::test_seed() : 0;
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  setenv("ATTNKIT_TEST_SEED", std::to_string(seed).c_str(), 1);
  if (rank == 0) {
    std::printf("[ note ] %d ranks, seed %llu (rerun with ATTNKIT_TEST_SEED=%llu)\n", ranks,
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  }
  int failed = RUN_ALL_TESTS();
  // One verdict for all ranks, so that mpirun's exit status reports a failure seen by any rank.
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
