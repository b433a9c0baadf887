#pragma once
/// @file communicator.hpp
/// What every distributed operation needs from MPI: the caller's communicator described (rank, size,
/// the rank on its node), the GPU each rank uses, where each rank's items start in the concatenation
/// of all ranks' items (global ids), and collective checks that make every rank throw the same
/// exception instead of leaving some ranks blocked in a collective the others never reach.
///
/// Failure model. A distributed call is a sequence of collectives. Every check that can fail on one
/// rank only (bad local input, a local exception) is folded into a collective (`all_succeed`), so
/// all ranks learn of it at the same point and throw: none waits forever. What cannot be caught this
/// way (a rank that crashes or is killed, an exception that escapes the caller's code on one rank
/// between two streamkit calls) is MPI's to handle: with the default error handler the MPI runtime
/// aborts the whole job when a process ends without MPI_Finalize.

#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>  // MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace streamkit::distributed {

/// Throws std::runtime_error naming the MPI call and MPI's error text unless `code` is MPI_SUCCESS.
inline void mpi_check(int code, char const* call)
{
  if (code == MPI_SUCCESS) { return; }
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

/// The MPI datatype of T (float, double, std::int32_t, std::int64_t, std::uint64_t, unsigned char).
template <class T>
MPI_Datatype mpi_type() noexcept;
/// @cond SPECIALIZATIONS
template <>
inline MPI_Datatype mpi_type<float>() noexcept { return MPI_FLOAT; }
template <>
inline MPI_Datatype mpi_type<double>() noexcept { return MPI_DOUBLE; }
template <>
inline MPI_Datatype mpi_type<std::int32_t>() noexcept { return MPI_INT32_T; }
template <>
inline MPI_Datatype mpi_type<std::int64_t>() noexcept { return MPI_INT64_T; }
template <>
inline MPI_Datatype mpi_type<std::uint64_t>() noexcept { return MPI_UINT64_T; }
template <>
inline MPI_Datatype mpi_type<unsigned char>() noexcept { return MPI_UNSIGNED_CHAR; }
/// @endcond

/// How data that lives in device memory travels between ranks.
enum class transport : std::uint8_t {
  automatic,        ///< device pointers when cuda_aware_mpi() says the library takes them, else host staging
  device_pointers,  ///< hand device pointers to MPI (the library must be CUDA-aware)
  host_staging,     ///< copy through pinned host buffers around each MPI call
};

/// Whether the MPI library accepts device pointers, asked at run time: Open MPI's
/// MPIX_Query_cuda_support() when it was built with the CUDA extension, MPICH's
/// MPIX_GPU_query_support() from 4.0; false for other libraries. The environment variable
/// STREAMKIT_MPI_CUDA_AWARE=1 or =0 overrides the answer (for libraries that cannot say, or to
/// compare both paths).
inline bool cuda_aware_mpi()
{
  if (char const* forced = std::getenv("STREAMKIT_MPI_CUDA_AWARE"); forced != nullptr && *forced != '\0') {
    return std::string(forced) != "0";
  }
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported != 0;
#else
  return false;
#endif
}

/// Whether `how` hands device pointers to MPI (automatic: cuda_aware_mpi()).
inline bool passes_device_pointers(transport how) { return how == transport::automatic ? cuda_aware_mpi() : how == transport::device_pointers; }

/// A rank's place in a communicator and on its node.
struct rank_info {
  int rank = 0;        ///< in the communicator
  int size = 1;        ///< ranks in the communicator
  int local_rank = 0;  ///< among the ranks of the same node (MPI_COMM_TYPE_SHARED)
  int local_size = 1;  ///< ranks on this node
};

/// Describes `comm` (collective: every rank of `comm` must call it).
inline rank_info describe(MPI_Comm comm)
{
  rank_info info;
  mpi_check(MPI_Comm_rank(comm, &info.rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &info.size), "MPI_Comm_size");
  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  mpi_check(MPI_Comm_rank(node, &info.local_rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(node, &info.local_size), "MPI_Comm_size");
  MPI_Comm_free(&node);
  return info;
}

/// The GPU a rank uses by default: its rank on the node modulo the GPUs it sees (so that ranks of a
/// node spread over its GPUs, several ranks sharing one when there are more ranks than GPUs).
/// @throws std::invalid_argument when `visible_devices` < 1.
inline int default_device(rank_info const& info, int visible_devices)
{
  if (visible_devices < 1) {
    throw std::invalid_argument("default_device: rank " + std::to_string(info.rank) + " sees no CUDA device");
  }
  return info.local_rank % visible_devices;
}

/// Whether every rank of `comm` succeeded (collective): a logical AND over the ranks.
inline bool all_succeed(MPI_Comm comm, bool succeeded)
{
  int mine = succeeded ? 1 : 0;
  int all = 0;
  mpi_check(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm), "MPI_Allreduce");
  return all != 0;
}

/// Runs `local` (work of this rank alone), then makes every rank of `comm` agree on the outcome: if
/// it threw on any rank, every rank throws (the rank that failed rethrows its own exception; the
/// others throw std::runtime_error naming `what` and the lowest failed rank). Collective.
template <class Work>
void run_everywhere(MPI_Comm comm, char const* what, Work&& local)
{
  std::exception_ptr failure;
  try {
    std::forward<Work>(local)();
  } catch (...) {
    failure = std::current_exception();
  }
  int rank = 0;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  int const mine = failure ? rank : std::numeric_limits<int>::max();
  int first = 0;
  mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (failure) { std::rethrow_exception(failure); }
  if (first != std::numeric_limits<int>::max()) {
    throw std::runtime_error(std::string(what) + ": failed on rank " + std::to_string(first) + " (see that rank's exception)");
  }
}

/// The most parameters one expect_agreement() call checks (its arrays are fixed, so it allocates nothing).
inline constexpr std::size_t agreement_parameters = 8;
/// Checks that every rank passed the same value for each named parameter (collective; at most
/// agreement_parameters of them). If any differs, every rank throws the same std::invalid_argument
/// naming the first such parameter and the smallest and largest value passed. Allocates nothing
/// unless it throws (queries call it at every step).
inline void expect_agreement(MPI_Comm comm, char const* what, std::initializer_list<std::pair<char const*, std::uint64_t>> parameters)
{
  if (parameters.size() > agreement_parameters) {
    throw std::logic_error(std::string(what) + ": more than " + std::to_string(agreement_parameters) + " parameters to agree on");
  }
  std::uint64_t low[agreement_parameters] = {}, high[agreement_parameters] = {};
  std::size_t i = 0;
  for (auto const& parameter : parameters) { low[i] = high[i] = parameter.second, ++i; }
  int const count = static_cast<int>(parameters.size());
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, low, count, MPI_UINT64_T, MPI_MIN, comm), "MPI_Allreduce");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, high, count, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  i = 0;
  for (auto const& parameter : parameters) {
    if (low[i] != high[i]) {
      throw std::invalid_argument(std::string(what) + ": the ranks disagree on " + parameter.first + " (values from " +
                                  std::to_string(low[i]) + " to " + std::to_string(high[i]) + ")");
    }
    ++i;
  }
}

/// Where each rank's items start in the concatenation of every rank's items in rank order, and the
/// total, into `offsets`: offsets[r] is the global id of rank r's first item, offsets[size] the total
/// (collective). Allocates only where `offsets` has less room than size + 1 (the caller keeps it).
inline void global_offsets(MPI_Comm comm, std::size_t local_count, std::vector<std::uint64_t>& offsets)
{
  int size = 1;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::uint64_t const mine = local_count;
  offsets.resize(static_cast<std::size_t>(size) + 1);
  offsets[0] = 0;
  mpi_check(MPI_Allgather(&mine, 1, MPI_UINT64_T, offsets.data() + 1, 1, MPI_UINT64_T, comm), "MPI_Allgather");
  for (std::size_t r = 1; r < offsets.size(); ++r) { offsets[r] += offsets[r - 1]; }
}

}  // namespace streamkit::distributed
