// Rank 1 throws out of main while rank 0 waits in a collective that rank 1 never reaches. The MPI
// runtime must end the whole job (non-zero status); CTest expects the failure within its timeout, so a
// hang fails the test.
#include <streamkit/distributed/communicator.hpp>

#include <stdexcept>

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  auto const info = streamkit::distributed::describe(MPI_COMM_WORLD);
  if (info.rank == 1) { throw std::runtime_error("rank 1 fails between two collectives"); }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
