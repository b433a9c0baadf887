// The GPU side of streamkit/distributed under mpirun: the distributed search on each rank's GPU and
// the distributed min-max scaler, against one single-process search / fit over the concatenation of
// every rank's data. Ranks share GPUs when there are more ranks than GPUs. Skipped without a GPU.
#include <streamkit/distributed/gpu_searcher.cuh>
#include <streamkit/distributed/minmax_scaler.cuh>

#include "../device_memory.hpp"
#include "../gpu_test.hpp"
#include "distributed_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace distributed_test;

namespace {

int rank_device()
{
  return dist::default_device(me(), streamkit::device_count());
}

void check_gpu_search(dist::reference_layout layout, bool clustered, std::size_t k)
{
  auto const info = me();
  // Uneven shares, large enough for the GPU engines; with 3 ranks, rank 1 holds no reference.
  auto const reference_count = [&](int r) -> std::size_t { return info.size == 3 && r == 1 ? 0 : 3000 + 1700 * static_cast<std::size_t>(r); };
  point_set const refs = points_of(info.rank, info.size, reference_count(info.rank), clustered, 11);
  point_set obs = points_of(info.rank, info.size, 2000 + 333 * static_cast<std::size_t>(info.rank), clustered, 12);
  obs.latitude[0] = std::numeric_limits<double>::quiet_NaN();  // an invalid observation
  std::size_t const n = obs.latitude.size();

  auto search = dist::make_distributed_gpu_nearest(world, layout);
  search.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
  std::vector<std::int64_t> index(n * k, -7);
  std::vector<double> angle(n * k, -7.0);
  search.query(obs.latitude.data(), obs.longitude.data(), n, k, index.data(), angle.data());

  // One process, the same GPU engine, over the concatenation of every rank's references.
  point_set const all = all_points(info.size, reference_count, clustered, 11);
  dist::gpu_searcher single({rank_device()});
  single.prepare(all.latitude.data(), all.longitude.data(), all.latitude.size());
  std::vector<std::int64_t> want(n * k);
  std::vector<double> want_angle(n * k);
  single.search(obs.latitude.data(), obs.longitude.data(), n, k, want.data(), want_angle.data());
  EXPECT_EQ(index, want) << "layout " << static_cast<int>(layout) << ", k " << k;
  std::size_t differing = 0;
  for (std::size_t e = 0; e < n * k; ++e) {
    differing += std::memcmp(&angle[e], &want_angle[e], sizeof(double)) != 0 ? 1 : 0;
  }
  EXPECT_EQ(differing, 0U) << "angles differ in " << differing << " of " << n * k << " entries";

  // And the float64 CPU brute force over the concatenation, for a sample of rows.
  cpu_search cpu;
  cpu.prepare(all.latitude.data(), all.longitude.data(), all.latitude.size());
  std::size_t const sample = 200;
  std::vector<std::int64_t> cpu_index(sample * k);
  std::vector<double> cpu_angle(sample * k);
  cpu.search(obs.latitude.data(), obs.longitude.data(), sample, k, cpu_index.data(), cpu_angle.data());
  for (std::size_t e = 0; e < sample * k; ++e) {
    ASSERT_EQ(index[e], cpu_index[e]) << "row " << e / k << " neighbour " << e % k;
    if (index[e] >= 0) { ASSERT_NEAR(angle[e], cpu_angle[e], 1e-12 + 1e-12 * cpu_angle[e]); }
  }
  EXPECT_EQ(index[0], -1);
  EXPECT_TRUE(std::isnan(angle[0]));
}

}  // namespace

TEST(DistributedGpu, ReplicatedSearchEqualsOneGpuSearchOverTheConcatenation)
{
  STREAMKIT_REQUIRE_GPU();
  for (std::size_t k : {1, 7}) { check_gpu_search(dist::reference_layout::replicated, false, k); }
}

TEST(DistributedGpu, ShardedSearchEqualsOneGpuSearchOverTheConcatenation)
{
  STREAMKIT_REQUIRE_GPU();
  for (bool clustered : {false, true}) {
    for (std::size_t k : {1, 7, 32}) { check_gpu_search(dist::reference_layout::sharded, clustered, k); }
  }
}

namespace {

/// `search`'s query of `obs` (host arrays, through the type `Search`: distributed_gpu_nearest, or a
/// reference to its base class) against one search of `all` (every rank's references in rank order)
/// on this rank's GPU: ids and angles bit for bit.
template <class Search>
void expect_one_gpu_search(Search& search, point_set const& all, point_set const& obs, std::size_t k)
{
  std::size_t const n = obs.latitude.size();
  std::vector<std::int64_t> index(n * k, -7);
  std::vector<double> angle(n * k, -7.0);
  search.query(obs.latitude.data(), obs.longitude.data(), n, k, index.data(), angle.data());
  dist::gpu_searcher single({rank_device()});
  single.prepare(all.latitude.data(), all.longitude.data(), all.latitude.size());
  std::vector<std::int64_t> want(n * k);
  std::vector<double> want_angle(n * k);
  single.search(obs.latitude.data(), obs.longitude.data(), n, k, want.data(), want_angle.data());
  EXPECT_EQ(index, want);
  std::size_t differing = 0;
  for (std::size_t e = 0; e < n * k; ++e) { differing += std::memcmp(&angle[e], &want_angle[e], sizeof(double)) != 0 ? 1 : 0; }
  EXPECT_EQ(differing, 0U);
}

}  // namespace

// An update through a reference to the base class, distributed_nearest<gpu_searcher>, after one
// through distributed_gpu_nearest: the next queries (through either) search the new references, on
// the GPU's rows (before the hooks, the base class's update left the GPU's copy of the partition at
// the first update's, and the sharded query at several ranks answered with its shard ids).
TEST(DistributedGpu, AnUpdateThroughTheBaseClassIsTheOneTheQueriesSearch)
{
  STREAMKIT_REQUIRE_GPU();
  auto const info = me();
  std::size_t const k = 4;
  for (auto layout : {dist::reference_layout::sharded, dist::reference_layout::replicated}) {
    SCOPED_TRACE(static_cast<int>(layout));
    auto search = dist::make_distributed_gpu_nearest(world, layout);
    dist::distributed_nearest<dist::gpu_searcher>& base = search;
    point_set const obs = points_of(info.rank, info.size, 1700 + 50 * static_cast<std::size_t>(info.rank), false, 43);
    for (unsigned salt : {41u, 42u}) {
      SCOPED_TRACE(salt);
      auto const reference_count = [&](int r) -> std::size_t {
        return info.size == 3 && r == 1 ? 0 : 2000 + 300 * static_cast<std::size_t>(r) + 1500 * (salt % 2);
      };
      point_set const refs = points_of(info.rank, info.size, reference_count(info.rank), salt % 2 == 0, salt);
      point_set const all = all_points(info.size, reference_count, salt % 2 == 0, salt);
      if (salt == 41u) {
        search.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
      } else {
        base.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
      }
      expect_one_gpu_search(search, all, obs, k);
      expect_one_gpu_search(base, all, obs, k);
    }
  }
}

namespace {

template <class T>
streamkit::device_buffer<T> upload(std::vector<T> const& host, streamkit::stream_ref s)
{
  streamkit::device_buffer<T> device(host.size(), s);
  if (!host.empty()) { device.copy_from_host_async({host.data(), host.size()}, s); }
  return device;
}

template <class T>
std::vector<T> download(T const* device, std::size_t count, streamkit::stream_ref s)
{
  std::vector<T> host(count);
  STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, s.value()));
  s.sync();
  return host;
}

/// The same steps of the sharded layout on the GPU's row engine and on the host's, rows for rows:
/// the partition and the selection, and the per-row functors (owners of observations and of
/// references, reach flags) computed by the device's arithmetic against the host's.
void check_row_engines()
{
  namespace detail = dist::detail;
  streamkit::device_guard const guard(rank_device());
  detail::device_row_engine gpu(rank_device());
  detail::host_team const team(4);
  detail::host_row_engine cpu(team);
  streamkit::stream_ref const s = gpu.work_stream();
  std::mt19937_64 rng(31 + static_cast<unsigned>(me().rank));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{77777}, std::size_t{600000}}) {
    SCOPED_TRACE(count);
    // Points: uniform, some invalid, some on cell and splitter boundaries (equal keys).
    std::vector<double> lat(count), lon(count);
    for (std::size_t i = 0; i < count; ++i) {
      lat[i] = std::asin(2 * unit(rng) - 1), lon[i] = 3 * M_PI * (2 * unit(rng) - 1);
      if (i % 97 == 5) { lat[i] = std::numeric_limits<double>::quiet_NaN(); }
      if (i % 89 == 7) { lat[i] = 0.25, lon[i] = -1.0; }
    }
    std::vector<dist::detail::key_sample> samples;
    detail::sample_keys(
      count, true, [&](std::size_t q) { return detail::space_key(lat[detail::sample_row(q, count)], lon[detail::sample_row(q, count)]); },
      [&](std::size_t q) { return std::uint64_t{detail::sample_row(q, count)}; }, samples);
    std::size_t const ranks = 5;
    auto const splitters = splitters_of(samples, ranks);
    auto const device_lat = upload(lat, s), device_lon = upload(lon, s);
    auto const device_splitters = upload(splitters, s);

    // Owners: the GPU's keys and binary searches against the host's.
    std::vector<std::uint32_t> owner(count);
    cpu.for_each(count, detail::find_owners{{lat.data(), lon.data(), 1}, splitters.data(), ranks, owner.data()});
    streamkit::device_buffer<std::uint32_t> device_owner(count, s);
    gpu.for_each(count, detail::find_owners{{device_lat.data(), device_lon.data(), 1}, device_splitters.data(), ranks, device_owner.data()});
    EXPECT_EQ(download(device_owner.data(), count, s), owner);
    // As references: (key, global id) against the splitters, equal keys split by id.
    std::uint64_t const first_id = 1000 * static_cast<std::uint64_t>(me().rank);
    std::vector<std::uint32_t> reference_owner(count);
    cpu.for_each(count, detail::reference_owners{{lat.data(), lon.data(), 1}, first_id, splitters.data(), ranks, reference_owner.data()});
    streamkit::device_buffer<std::uint32_t> device_reference_owner(count, s);
    gpu.for_each(count, detail::reference_owners{{device_lat.data(), device_lon.data(), 1}, first_id, device_splitters.data(), ranks,
                                                 device_reference_owner.data()});
    EXPECT_EQ(download(device_reference_owner.data(), count, s), reference_owner);

    // The stable partition by owner (ranks + 1 bins), and the selection of flagged rows.
    std::vector<std::uint32_t> order(count);
    std::vector<std::size_t> sizes(ranks + 1), device_sizes(ranks + 1, 99);
    cpu.partition(owner.data(), count, ranks + 1, order.data(), sizes.data());
    streamkit::device_buffer<std::uint32_t> device_order(count, s);
    gpu.partition(device_owner.data(), count, ranks + 1, device_order.data(), device_sizes.data());
    EXPECT_EQ(download(device_order.data(), count, s), order);
    EXPECT_EQ(device_sizes, sizes);

    // Reach flags of owners' k-th angles from 1e-9 rad to 3 rad (k = 1), the keys held alone by rank 2.
    std::vector<double> bound(count);
    std::vector<std::int64_t> found(count);
    for (std::size_t i = 0; i < count; ++i) {
      bound[i] = std::pow(10.0, -9 + 9.5 * unit(rng));
      found[i] = i % 13 == 0 ? -1 : 1;
      if (std::isnan(lat[i])) { lat[i] = 0.1; }  // visitors are valid
    }
    auto const device_valid_lat = upload(lat, s), device_bound = upload(bound, s);
    auto const device_found = upload(found, s);
    detail::key_span const alone = detail::keys_held_alone(splitters, 2);
    std::vector<std::uint8_t> flag(count);
    cpu.for_each(count, detail::flag_reach{lat.data(), lon.data(), found.data(), bound.data(), 1, alone, true, flag.data()});
    streamkit::device_buffer<std::uint8_t> device_flag(count, s);
    gpu.for_each(count, detail::flag_reach{device_valid_lat.data(), device_lon.data(), device_found.data(), device_bound.data(), 1, alone, true,
                                           device_flag.data()});
    EXPECT_EQ(download(device_flag.data(), count, s), flag);
    std::vector<std::uint32_t> selected(count);
    std::size_t const flagged = cpu.select(flag.data(), count, selected.data());
    streamkit::device_buffer<std::uint32_t> device_selected(count, s);
    EXPECT_EQ(gpu.select(device_flag.data(), count, device_selected.data()), flagged);
    selected.resize(flagged);
    EXPECT_EQ(download(device_selected.data(), flagged, s), selected);
    if (count > 1000) {
      EXPECT_GT(flagged, 0u);
      EXPECT_LT(flagged, count);
    }
  }
}

}  // namespace

TEST(DistributedGpu, RowEngineOnTheGpuDoesWhatTheHostEngineDoes)
{
  STREAMKIT_REQUIRE_GPU();
  check_row_engines();
}

namespace {

/// Where a case puts the observations and the results.
struct view_case {
  char const* name;
  bool observations_on_device, interleaved_observations, results_on_device;
  std::size_t extra_stride;  // result row stride k + this
  bool rank_zero_only;       // the other ranks' views on the host (ranks mixing views)
};

/// Device views in and out (references too, interleaved: a stride-2 view) give what the host arrays
/// give, bit for bit: observations separate or interleaved, results dense or strided (the padding
/// poisoned and left alone), either side alone on the device (the other staged), and ranks that mix
/// device and host views.
void check_device_views(dist::reference_layout layout, std::size_t k)
{
  auto const info = me();
  streamkit::device_guard const guard(rank_device());
  auto const reference_count = [&](int r) -> std::size_t { return info.size == 3 && r == 1 ? 0 : 2500 + 900 * static_cast<std::size_t>(r); };
  point_set const refs = points_of(info.rank, info.size, reference_count(info.rank), false, 13);
  point_set obs = points_of(info.rank, info.size, 1500 + 111 * static_cast<std::size_t>(info.rank), false, 14);
  obs.latitude[0] = std::numeric_limits<double>::quiet_NaN();
  std::size_t const n = obs.latitude.size(), m = refs.latitude.size();

  auto search = dist::make_distributed_gpu_nearest(world, layout);
  search.update(refs.latitude.data(), refs.longitude.data(), m);
  std::vector<std::int64_t> want(n * k);
  std::vector<double> want_angle(n * k);
  search.query(obs.latitude.data(), obs.longitude.data(), n, k, want.data(), want_angle.data());

  streamkit::stream const s(rank_device());
  auto const interleave = [](point_set const& p) {
    std::vector<double> pairs;
    for (std::size_t i = 0; i < p.latitude.size(); ++i) { pairs.push_back(p.latitude[i]), pairs.push_back(p.longitude[i]); }
    return pairs;
  };
  auto const device_refs = upload(interleave(refs), s.ref());
  auto const device_pairs = upload(interleave(obs), s.ref());
  auto const device_lat = upload(obs.latitude, s.ref()), device_lon = upload(obs.longitude, s.ref());
  std::int64_t poison_index;
  std::memset(&poison_index, 0x5a, sizeof poison_index);

  for (view_case c : {view_case{"both on the device, strided results", true, false, true, 3, false},
                      view_case{"interleaved observations, dense results", true, true, true, 0, false},
                      view_case{"observations on the device, results on the host", true, false, false, 0, false},
                      view_case{"observations on the host, strided results on the device", false, false, true, 2, false},
                      view_case{"rank 0's views on the device, the others' host arrays", true, false, true, 0, true}}) {
    SCOPED_TRACE(c.name);
    if (c.rank_zero_only && info.rank != 0) { c.observations_on_device = c.results_on_device = false; }
    std::size_t const stride = k + c.extra_stride;
    streamkit::device_buffer<std::int64_t> index(n * stride, s.ref());
    streamkit::device_buffer<double> angle(n * stride, s.ref());
    std::vector<std::int64_t> host_index(n * stride, poison_index);
    std::vector<double> host_angle(n * stride);
    std::memset(host_angle.data(), 0x5a, host_angle.size() * sizeof(double));
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(index.data(), 0x5a, index.size() * sizeof(std::int64_t), s.ref().value()));  // poison
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(angle.data(), 0x5a, angle.size() * sizeof(double), s.ref().value()));
    s.sync();
    bool const arrays = c.rank_zero_only && info.rank != 0;  // host arrays beside rank 0's device views
    if (arrays) {
      search.update(refs.latitude.data(), refs.longitude.data(), m);
    } else {
      search.update(streamkit::points_ref<double>::interleaved(m > 0 ? device_refs.data() : nullptr, m));
    }
    EXPECT_EQ(search.size(), all_points(info.size, reference_count, false, 13).latitude.size());
    auto const observations = !c.observations_on_device     ? streamkit::points_ref<double>::separate(obs.latitude.data(), obs.longitude.data(), n)
                              : c.interleaved_observations ? streamkit::points_ref<double>::interleaved(device_pairs.data(), n)
                                                           : streamkit::points_ref<double>::separate(device_lat.data(), device_lon.data(), n);
    if (arrays) {
      search.query(obs.latitude.data(), obs.longitude.data(), n, k, host_index.data(), host_angle.data());
    } else {
      search.query(observations, streamkit::neighbors_ref<std::int64_t, double>{c.results_on_device ? index.data() : host_index.data(),
                                                                                 c.results_on_device ? angle.data() : host_angle.data(), n, k,
                                                                                 stride});
    }
    auto const got = c.results_on_device ? download(index.data(), index.size(), s.ref()) : host_index;
    auto const got_angle = c.results_on_device ? download(angle.data(), angle.size(), s.ref()) : host_angle;
    std::size_t differing = 0, overwritten = 0;
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < stride; ++j) {
        if (j >= k) {
          overwritten += got[i * stride + j] != poison_index;
          continue;
        }
        differing +=
          got[i * stride + j] != want[i * k + j] || std::memcmp(&got_angle[i * stride + j], &want_angle[i * k + j], sizeof(double)) != 0;
      }
    }
    EXPECT_EQ(differing, 0u) << "layout " << static_cast<int>(layout) << ", k " << k;
    EXPECT_EQ(overwritten, 0u);
    EXPECT_EQ(got[0], -1);
    EXPECT_GE(search.last_exchange().staging_seconds, 0.0);
  }
}

}  // namespace

TEST(DistributedGpu, DeviceViewsGiveWhatHostArraysGive)
{
  STREAMKIT_REQUIRE_GPU();
  for (auto layout : {dist::reference_layout::replicated, dist::reference_layout::sharded}) {
    for (std::size_t k : {1, 6}) { check_device_views(layout, k); }
  }
}

namespace {

template <class T>
bool same_bits(std::vector<T> const& a, std::vector<T> const& b)
{
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
void check_distributed_scaler(dist::transport how)
{
  auto const info = me();
  streamkit::device_guard const guard(rank_device());
  streamkit::stream const s(rank_device());
  std::size_t const columns = 6;
  std::vector<T> const mine = rows_of<T>(info.rank, info.size, columns);
  std::size_t const rows = mine.size() / columns;
  auto const x = upload(mine, s.ref());
  auto const view = streamkit::matrix_ref<T const>::dense(x.data(), rows, columns);

  streamkit::minmax_options<T> options;
  options.lo = T(-1), options.hi = T(2);
  dist::distributed_minmax_scaler<T> scaler(world, options, how);
  scaler.fit(view, s.ref());

  // One fit over the concatenation, on this rank's GPU.
  std::vector<T> const all = all_rows<T>(info.size, columns);
  auto const x_all = upload(all, s.ref());
  streamkit::minmax_scaler<T> single(options);
  single.fit(streamkit::matrix_ref<T const>::dense(x_all.data(), all.size() / columns, columns), s.ref());
  EXPECT_TRUE(same_bits(scaler.global().data_min_host(), single.data_min_host()));
  EXPECT_TRUE(same_bits(scaler.global().data_max_host(), single.data_max_host()));
  EXPECT_TRUE(same_bits(scaler.global().scale_host(), single.scale_host()));
  EXPECT_EQ(scaler.samples_seen(), all.size() / columns);

  // This rank's rows transformed with the global statistics: what the single scaler gives them.
  streamkit::device_buffer<T> out(mine.size() + 1, s.ref()), want(mine.size() + 1, s.ref());
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(out.data(), 0xff, out.size() * sizeof(T), s.ref().value()));  // poison
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(want.data(), 0xff, want.size() * sizeof(T), s.ref().value()));
  if (rows > 0) {
    scaler.transform(view, streamkit::matrix_ref<T>::dense(out.data(), rows, columns), s.ref());
    single.transform(view, streamkit::matrix_ref<T>::dense(want.data(), rows, columns), s.ref());
  }
  EXPECT_TRUE(same_bits(download(out.data(), out.size(), s.ref()), download(want.data(), want.size(), s.ref())));

  // partial_fit in two pieces per rank (the first piece may be empty) equals the one fit.
  dist::distributed_minmax_scaler<T> pieces(world, options, how);
  std::size_t const first = rows / 3;
  pieces.partial_fit(streamkit::matrix_ref<T const>::dense(x.data(), first, columns), s.ref());
  pieces.partial_fit(streamkit::matrix_ref<T const>::dense(x.data() + first * columns, rows - first, columns), s.ref());
  EXPECT_TRUE(same_bits(pieces.global().data_min_host(), single.data_min_host()));
  EXPECT_TRUE(same_bits(pieces.global().scale_host(), single.scale_host()));
  EXPECT_EQ(pieces.samples_seen(), all.size() / columns);
}

std::vector<dist::transport> transports_here()
{
  // Device pointers only where the MPI library takes them (asked at run time; see the log line).
  std::vector<dist::transport> here{dist::transport::host_staging};
  if (dist::cuda_aware_mpi()) { here.push_back(dist::transport::device_pointers); }
  return here;
}

}  // namespace

TEST(DistributedGpu, ScalerFitIsBitIdenticalToOneFitOverTheConcatenationFloat)
{
  STREAMKIT_REQUIRE_GPU();
  for (auto how : transports_here()) { check_distributed_scaler<float>(how); }
}

TEST(DistributedGpu, ScalerFitIsBitIdenticalToOneFitOverTheConcatenationDouble)
{
  STREAMKIT_REQUIRE_GPU();
  for (auto how : transports_here()) { check_distributed_scaler<double>(how); }
}

TEST(DistributedGpu, ScalerRanksThatDisagreeAllThrowTheSameError)
{
  STREAMKIT_REQUIRE_GPU();
  if (me().size == 1) { GTEST_SKIP() << "one rank: no other rank to disagree with"; }
  auto const info = me();
  streamkit::device_guard const guard(rank_device());
  streamkit::stream const s(rank_device());
  std::size_t const columns = info.rank == 0 ? 3 : 4;
  std::vector<double> const host(5 * columns, 1.5);
  auto const x = upload(host, s.ref());
  dist::distributed_minmax_scaler<double> scaler(world);
  std::string message;
  try {
    scaler.fit(streamkit::matrix_ref<double const>::dense(x.data(), 5, columns), s.ref());
  } catch (std::invalid_argument const& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "distributed_minmax_scaler::fit: the ranks disagree on the column count (values from 3 to 4)");
  EXPECT_FALSE(scaler.global().fitted());

  streamkit::minmax_options<double> options;
  options.hi = info.rank == 0 ? 1.0 : 2.0;
  dist::distributed_minmax_scaler<double> ranges(world, options);
  EXPECT_THROW(ranges.fit(streamkit::matrix_ref<double const>::dense(x.data(), 5, 3), s.ref()), std::invalid_argument);
}

TEST(DistributedGpu, ScalerBadViewOnOneRankReachesEveryRank)
{
  STREAMKIT_REQUIRE_GPU();
  auto const info = me();
  streamkit::device_guard const guard(rank_device());
  streamkit::stream const s(rank_device());
  std::vector<float> const host(12, 1.0f);
  auto const x = upload(host, s.ref());
  auto view = streamkit::matrix_ref<float const>::dense(x.data(), 4, 3);
  if (info.rank == info.size - 1) { view.ld = 2; }  // a pitch below the row: rejected by that rank's check
  dist::distributed_minmax_scaler<float> scaler(world);
  EXPECT_ANY_THROW(scaler.fit(view, s.ref()));
  EXPECT_TRUE(dist::all_succeed(world, true));  // still in step
}

namespace {

/// Device memory in use on the rank's GPU, settled (streamkit_test::settled_free_memory()), read
/// while no rank of the job trims its memory pool: ranks that share the GPU see each other's memory.
std::size_t settled_free_memory_of_every_rank()
{
  static_cast<void>(streamkit_test::settled_free_memory(rank_device()));
  MPI_Barrier(world);
  std::size_t const free = streamkit_test::settled_free_memory(rank_device());  // nothing left to trim
  MPI_Barrier(world);
  return free;
}

}  // namespace

// A loop of updates and queries whose shapes were all seen before allocates no device or page-locked
// memory: device memory in use (settled) and page-locked bytes held stay flat, and the searcher's
// dispatcher allocates no workspace, for host arrays and for device views, in both layouts. Two
// inputs alternate, A and a smaller B, as in DistributedNearest.StepsNoLargerThanBeforeAllocateNothing
// (which counts the host allocations of the host-side logic): A, B, A warm up, B, A, B, A are measured.
// The host allocations of the GPU path (the searcher's, the dispatcher's) are printed, not checked.
TEST(DistributedGpu, StepsNoLargerThanBeforeAllocateNoDeviceOrPageLockedMemory)
{
  STREAMKIT_REQUIRE_GPU();
  auto const info = me();
  streamkit::device_guard const guard(rank_device());
  streamkit::stream const s(rank_device());
  std::size_t const k = 4;
  auto const r = static_cast<std::size_t>(info.rank);
  struct step_data {
    point_set references, observations;
  };
  step_data const a{points_of(info.rank, info.size, 70000 + 500 * r, false, 51), points_of(info.rank, info.size, 30000 + 300 * r, false, 52)};
  step_data const b{points_of(info.rank, info.size, 20000, true, 53), points_of(info.rank, info.size, 12000, false, 54)};
  struct on_device {
    streamkit::device_buffer<double> reference_latitude, reference_longitude, latitude, longitude;
  };
  on_device const a_there{upload(a.references.latitude, s.ref()), upload(a.references.longitude, s.ref()),
                          upload(a.observations.latitude, s.ref()), upload(a.observations.longitude, s.ref())};
  on_device const b_there{upload(b.references.latitude, s.ref()), upload(b.references.longitude, s.ref()),
                          upload(b.observations.latitude, s.ref()), upload(b.observations.longitude, s.ref())};
  std::size_t const n = a.observations.latitude.size();
  std::vector<std::int64_t> index(n * k);
  std::vector<double> angle(n * k);
  streamkit::device_buffer<std::int64_t> index_there(n * k, s.ref());
  streamkit::device_buffer<double> angle_there(n * k, s.ref());
  s.sync();
  using points = streamkit::points_ref<double>;
  using neighbors = streamkit::neighbors_ref<std::int64_t, double>;
  for (auto const layout : {dist::reference_layout::replicated, dist::reference_layout::sharded}) {
    for (bool const device_views : {false, true}) {
      std::string const what = std::string(layout == dist::reference_layout::sharded ? "sharded" : "replicated") +
                               (device_views ? ", device views" : ", host arrays");
      SCOPED_TRACE(what);
      auto search = dist::make_distributed_gpu_nearest(world, layout);
      auto const step = [&](step_data const& d, on_device const& there) {
        std::size_t const m = d.references.latitude.size(), count = d.observations.latitude.size();
        if (device_views) {
          search.update(points::separate(there.reference_latitude.data(), there.reference_longitude.data(), m));
          search.query(points::separate(there.latitude.data(), there.longitude.data(), count),
                       neighbors::dense(index_there.data(), angle_there.data(), count, k));
        } else {
          search.update(d.references.latitude.data(), d.references.longitude.data(), m);
          search.query(d.observations.latitude.data(), d.observations.longitude.data(), count, k, index.data(), angle.data());
        }
      };
      step(a, a_there), step(b, b_there), step(a, a_there);
      std::size_t const free_before = settled_free_memory_of_every_rank(), pinned_before = streamkit::pinned_bytes_in_use();
      std::size_t const workspaces_before = search.searcher().workers().workspace_allocations(), host_before = host_allocations();
      step(b, b_there), step(a, a_there), step(b, b_there), step(a, a_there);
      std::size_t const host_allocated = host_allocations() - host_before;
      EXPECT_EQ(search.searcher().workers().workspace_allocations(), workspaces_before);
      EXPECT_EQ(streamkit::pinned_bytes_in_use(), pinned_before);
      EXPECT_EQ(settled_free_memory_of_every_rank(), free_before) << "device memory in use changed";
      std::printf("[ rank %d ] %s: %zu host allocations in four steps (the GPU path)\n", info.rank, what.c_str(), host_allocated);
    }
  }
}
