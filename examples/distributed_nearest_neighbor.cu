// Distributed nearest neighbours across MPI ranks: start with `mpirun -np N distributed_nearest_neighbor`.
// Every rank holds an even share of the observations and of the references (radians), draws new ones
// each time step (uniform, or clustered around a centre per rank with --clustered), and gets the k
// nearest references of its own observations among every rank's references, with global ids (rank
// offset + local index): first with the references replicated (all-gathered each step), then sharded
// (each update repartitions the references by space; an observation goes to the rank of its region
// and on only to the ranks within reach of its k-th distance there). With --device-resident the
// points and results live in the rank's GPU memory (views passed to update and query). Each rank
// checks every answer of the last step against one search over the concatenation of all references
// on its own GPU, and a sample against a float64 CPU brute force. Rank 0 prints per-step times
// (slowest rank), exchange time and bytes, visits, the load imbalance (largest rank over mean), and
// where the time went (last_exchange(): search, host loops, staging of device views).
//
//   mpirun -np 2 distributed_nearest_neighbor [--observations N] [--references M] [--k K] [--steps S]
//                                              [--clustered] [--layout replicated|sharded|both]
//                                              [--device-resident] [--streams P]
// N and M are totals over all ranks (defaults 2^20 and 2^14), so that runs with different rank counts
// solve the same problem (strong scaling). P: the searcher's streams per GPU (default 8; 0: the dispatcher's).
#include "common/example_support.hpp"

#include <streamkit/distributed/gpu_searcher.cuh>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dist = streamkit::distributed;

namespace {

struct settings {
  std::size_t observations = std::size_t{1} << 20, references = std::size_t{1} << 14, k = 1, steps = 5;
  bool clustered = false, device_resident = false;
  int streams = dist::gpu_searcher::default_streams_per_device;
  std::vector<dist::reference_layout> layouts{dist::reference_layout::replicated, dist::reference_layout::sharded};
};

settings parse(int argc, char** argv)
{
  settings s;
  for (int i = 1; i < argc; ++i) {
    std::string const flag = argv[i];
    auto const value = [&]() -> std::string {
      if (i + 1 >= argc) { throw std::invalid_argument(flag + " needs a value"); }
      return argv[++i];
    };
    if (flag == "--observations") {
      s.observations = std::stoull(value());
    } else if (flag == "--references") {
      s.references = std::stoull(value());
    } else if (flag == "--k") {
      s.k = std::stoull(value());
    } else if (flag == "--steps") {
      s.steps = std::stoull(value());
    } else if (flag == "--clustered") {
      s.clustered = true;
    } else if (flag == "--device-resident") {
      s.device_resident = true;
    } else if (flag == "--streams") {
      s.streams = std::stoi(value());
    } else if (flag == "--layout") {
      std::string const layout = value();
      if (layout == "replicated") {
        s.layouts = {dist::reference_layout::replicated};
      } else if (layout == "sharded") {
        s.layouts = {dist::reference_layout::sharded};
      } else if (layout != "both") {
        throw std::invalid_argument("--layout: replicated, sharded or both");
      }
    } else {
      throw std::invalid_argument("unknown argument " + flag);
    }
  }
  return s;
}

/// Rank `rank`'s even share of `total` (the first ranks take one more).
std::size_t share_of(std::size_t total, int rank, int size)
{
  auto const r = static_cast<std::size_t>(rank), n = static_cast<std::size_t>(size);
  return total / n + (r < total % n ? 1 : 0);
}

struct points {
  std::vector<double> latitude, longitude;
};

/// `count` points in radians: uniform on the sphere, or around a centre that depends on the rank.
void draw(points& p, std::size_t count, bool clustered, int rank, std::mt19937_64& rng)
{
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> spread(0.0, 0.2);
  p.latitude.resize(count);
  p.longitude.resize(count);
  double const centre_lat = 0.9 * std::sin(1.7 * rank), centre_lon = std::remainder(2.3 * rank, 2 * M_PI);
  for (std::size_t i = 0; i < count; ++i) {
    if (clustered) {
      p.latitude[i] = std::clamp(centre_lat + spread(rng), -M_PI / 2, M_PI / 2);
      p.longitude[i] = std::remainder(centre_lon + spread(rng), 2 * M_PI);
    } else {
      p.latitude[i] = std::asin(2 * unit(rng) - 1);
      p.longitude[i] = M_PI * (2 * unit(rng) - 1);
    }
  }
}

/// Every rank's points, concatenated in rank order (for the checks).
points gather_all(points const& mine, int size)
{
  int const count = static_cast<int>(mine.latitude.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), at(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (std::size_t r = 1; r < counts.size(); ++r) { at[r] = at[r - 1] + counts[r - 1]; }
  points all;
  all.latitude.resize(static_cast<std::size_t>(at.back() + counts.back()));
  all.longitude.resize(all.latitude.size());
  MPI_Allgatherv(mine.latitude.data(), count, MPI_DOUBLE, all.latitude.data(), counts.data(), at.data(), MPI_DOUBLE, MPI_COMM_WORLD);
  MPI_Allgatherv(mine.longitude.data(), count, MPI_DOUBLE, all.longitude.data(), counts.data(), at.data(), MPI_DOUBLE, MPI_COMM_WORLD);
  return all;
}

double max_over_ranks(double value)
{
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

std::uint64_t sum_over_ranks(std::uint64_t value)
{
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return value;
}

char const* name_of(dist::reference_layout layout) { return layout == dist::reference_layout::replicated ? "replicated" : "sharded"; }

/// Largest over mean of a per-rank value (1: even).
double imbalance(std::uint64_t value, int size)
{
  std::uint64_t largest = value, total = value;
  MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total == 0 ? 1.0 : static_cast<double>(largest) * size / static_cast<double>(total);
}

/// A device copy of host values (on the current device).
template <class T>
void upload(streamkit::device_buffer<T>& device, std::vector<T> const& host, streamkit::stream_ref s)
{
  if (device.size() < host.size()) { device = streamkit::device_buffer<T>(host.size(), s); }
  if (!host.empty()) { device.copy_from_host_async({host.data(), host.size()}, s); }
}

/// Runs `s.steps` steps (after one warm-up) in `layout`; returns the number of wrong answers on this rank.
std::size_t run(settings const& s, dist::reference_layout layout, dist::rank_info const& info)
{
  int const device = dist::default_device(info, streamkit::device_count());
  auto search = dist::make_distributed_gpu_nearest(MPI_COMM_WORLD, layout, device, s.streams);
  std::size_t const n = share_of(s.observations, info.rank, info.size), m = share_of(s.references, info.rank, info.size);
  std::mt19937_64 rng(1000 * static_cast<unsigned>(info.rank) + 7);
  points refs, obs;
  std::vector<std::int64_t> index(n * s.k);
  std::vector<double> angle(n * s.k);
  // --device-resident: the step's points uploaded before its clock starts, results left on the GPU.
  streamkit::device_guard const guard(device);
  streamkit::stream const copies(device);
  streamkit::device_buffer<double> ref_lat, ref_lon, obs_lat, obs_lon, device_angle;
  streamkit::device_buffer<std::int64_t> device_index;
  if (s.device_resident) {
    device_index = streamkit::device_buffer<std::int64_t>(n * s.k, copies.ref());
    device_angle = streamkit::device_buffer<double>(n * s.k, copies.ref());
  }
  std::vector<double> step_ms, update_exchange_ms, query_exchange_ms;
  // Where the slowest rank's time went, per step (ms): update's search (the tree's build) and host
  // loops, query's search, host loops and staging of device views.
  std::vector<double> update_search_ms, update_host_ms, update_staging_ms, query_search_ms, query_host_ms, query_staging_ms;
  std::uint64_t update_bytes = 0, query_bytes = 0, visits = 0, sent = 0;
  double held_imbalance = 1, searched_imbalance = 1;
  for (std::size_t step = 0; step <= s.steps; ++step) {
    draw(refs, m, s.clustered, info.rank, rng);
    draw(obs, n, s.clustered, info.rank, rng);
    if (s.device_resident) {
      upload(ref_lat, refs.latitude, copies.ref()), upload(ref_lon, refs.longitude, copies.ref());
      upload(obs_lat, obs.latitude, copies.ref()), upload(obs_lon, obs.longitude, copies.ref());
      copies.sync();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double const begin = MPI_Wtime();
    if (s.device_resident) {
      search.update(streamkit::points_ref<double>::separate(ref_lat.data(), ref_lon.data(), m));
    } else {
      search.update(refs.latitude.data(), refs.longitude.data(), m);
    }
    dist::exchange_stats const updated = search.last_exchange();
    if (s.device_resident) {
      search.query(streamkit::points_ref<double>::separate(obs_lat.data(), obs_lon.data(), n),
                   streamkit::neighbors_ref<std::int64_t, double>::dense(device_index.data(), device_angle.data(), n, s.k));
    } else {
      search.query(obs.latitude.data(), obs.longitude.data(), n, s.k, index.data(), angle.data());
    }
    dist::exchange_stats const queried = search.last_exchange();
    double const ms = max_over_ranks((MPI_Wtime() - begin) * 1e3);
    if (step == 0) { continue; }  // warm-up: first allocations, the tree's first build
    step_ms.push_back(ms);
    update_exchange_ms.push_back(max_over_ranks(updated.seconds * 1e3));
    query_exchange_ms.push_back(max_over_ranks(queried.seconds * 1e3));
    update_search_ms.push_back(max_over_ranks(updated.search_seconds * 1e3));
    update_host_ms.push_back(max_over_ranks(updated.host_seconds * 1e3));
    update_staging_ms.push_back(max_over_ranks(updated.staging_seconds * 1e3));
    query_search_ms.push_back(max_over_ranks(queried.search_seconds * 1e3));
    query_host_ms.push_back(max_over_ranks(queried.host_seconds * 1e3));
    query_staging_ms.push_back(max_over_ranks(queried.staging_seconds * 1e3));
    update_bytes = sum_over_ranks(updated.bytes_sent);
    query_bytes = sum_over_ranks(queried.bytes_sent);
    visits = sum_over_ranks(queried.visits);
    sent = sum_over_ranks(queried.observations_sent);
    held_imbalance = imbalance(updated.references_held, info.size);
    searched_imbalance = imbalance(queried.observations_searched, info.size);
  }
  if (s.device_resident && n > 0) {
    STREAMKIT_CUDA_TRY(cudaMemcpy(index.data(), device_index.data(), n * s.k * sizeof(std::int64_t), cudaMemcpyDeviceToHost));
    STREAMKIT_CUDA_TRY(cudaMemcpy(angle.data(), device_angle.data(), n * s.k * sizeof(double), cudaMemcpyDeviceToHost));
  }

  // Check the last step: every answer against one search over all references on this rank's GPU,
  // and a sample against the float64 CPU brute force.
  points const all = gather_all(refs, info.size);
  dist::gpu_searcher single({device});
  single.prepare(all.latitude.data(), all.longitude.data(), all.latitude.size());
  std::vector<std::int64_t> want(n * s.k);
  std::vector<double> want_angle(n * s.k);
  single.search(obs.latitude.data(), obs.longitude.data(), n, s.k, want.data(), want_angle.data());
  std::size_t wrong = 0;
  for (std::size_t e = 0; e < n * s.k; ++e) { wrong += index[e] != want[e] || std::memcmp(&angle[e], &want_angle[e], sizeof(double)) != 0; }
  for (std::size_t i = 0; i < n; i += std::max<std::size_t>(1, n / 50)) {
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < all.latitude.size(); ++j) {
      best = std::min(best, streamkit::haversine(obs.latitude[i], obs.longitude[i], all.latitude[j], all.longitude[j]));
    }
    if (!(std::abs(angle[i * s.k] - best) <= 1e-12 * (1 + best))) { ++wrong; }
  }
  std::size_t const wrong_everywhere = sum_over_ranks(wrong);

  auto const median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  if (info.rank == 0) {
    std::printf("%-10s ranks %d  N %zu  M %zu  k %zu  %s%s: step %.3f ms (median of %zu; slowest rank), exchange: update %.3f ms "
                "%.3f MB, query %.3f ms %.3f MB; observations sent %llu, visits %llu; largest/mean rank: references %.2f, "
                "searched %.2f; %zu wrong\n",
                name_of(layout), info.size, s.observations, s.references, s.k, s.clustered ? "clustered" : "uniform",
                s.device_resident ? " device-resident" : "", median(step_ms), step_ms.size(), median(update_exchange_ms),
                update_bytes / 1e6, median(query_exchange_ms), query_bytes / 1e6, static_cast<unsigned long long>(sent),
                static_cast<unsigned long long>(visits), held_imbalance, searched_imbalance, wrong_everywhere);
    std::printf("  phases (ms, slowest rank, median): update search %.3f host %.3f staging %.3f; query search %.3f host %.3f staging %.3f\n",
                median(update_search_ms), median(update_host_ms), median(update_staging_ms), median(query_search_ms), median(query_host_ms),
                median(query_staging_ms));
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    auto const info = dist::describe(MPI_COMM_WORLD);
    settings const s = parse(argc, argv);
    int const devices = streamkit::device_count();
    int const without = dist::all_succeed(MPI_COMM_WORLD, devices > 0) ? 0 : 1;
    if (without != 0) {
      if (info.rank == 0) { std::printf("distributed_nearest_neighbor: a rank sees no CUDA device; nothing to run.\n"); }
      MPI_Finalize();
      return streamkit_examples::exit_skipped;
    }
    if (info.rank == 0) {
      std::printf("%d rank(s) on %d node-local group(s) of up to %d; GPU of rank 0: %s; CUDA-aware MPI: %s\n", info.size,
                  info.size / info.local_size, info.local_size, streamkit::device(dist::default_device(info, devices)).name().c_str(),
                  dist::cuda_aware_mpi() ? "yes" : "no");
    }
    std::size_t wrong = 0;
    for (auto layout : s.layouts) { wrong += run(s, layout, info); }
    status = dist::all_succeed(MPI_COMM_WORLD, wrong == 0) ? 0 : 1;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "distributed_nearest_neighbor: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return status;
}
