// A tiny consumer of streamkit::mpi: describes its rank (run it under mpirun, or alone as one rank).
#include <streamkit/distributed/column_extrema.hpp>
#include <streamkit/distributed/communicator.hpp>

#include <cstdio>

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  auto const info = streamkit::distributed::describe(MPI_COMM_WORLD);
  double min = info.rank, max = info.rank;
  streamkit::distributed::allreduce_column_extrema(MPI_COMM_WORLD, &min, &max, 1);
  std::printf("rank %d of %d: ranks %g to %g, CUDA-aware MPI: %d\n", info.rank, info.size, min, max,
              streamkit::distributed::cuda_aware_mpi() ? 1 : 0);
  MPI_Finalize();
  return 0;
}
