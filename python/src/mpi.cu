// The CUDA side of streamkit.distributed (the extension _streamkit_mpi), compiled by nvcc:
// streamkit::distributed's GPU search and min-max scaler behind mpi.hpp.

#include "mpi.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/distributed/gpu_searcher.cuh>
#include <streamkit/distributed/minmax_scaler.cuh>
#include <streamkit/memory/device_buffer.hpp>

#include <optional>

namespace streamkit_python {

namespace dist = streamkit::distributed;
using streamkit::matrix_ref;

struct gpu_nearest::state {
  dist::distributed_gpu_nearest search;

  /// Waits for `stream` (the caller's framework's, where it wrote device arrays; null: host arrays,
  /// nothing to wait for), inside a collective that every call makes: ranks passing host arrays
  /// and ranks passing device arrays make the same collective calls.
  void wait_for(cudaStream_t stream, char const* what)
  {
    dist::run_everywhere(search.communicator(), what, [&] {
      if (stream != nullptr) { STREAMKIT_CUDA_TRY(cudaStreamSynchronize(stream)); }
    });
  }
};

gpu_nearest::gpu_nearest(MPI_Comm comm, dist::reference_layout layout, int device)
    : state_(std::make_unique<state>(
        state{dist::make_distributed_gpu_nearest(comm, layout, device >= 0 ? std::optional<int>(device) : std::nullopt)}))
{
}

gpu_nearest::~gpu_nearest() = default;

void gpu_nearest::update(double const* latitude, double const* longitude, std::size_t count)
{
  update(streamkit::points_ref<double>::separate(latitude, longitude, count), nullptr);
}

void gpu_nearest::query(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                        double* angle)
{
  query(streamkit::points_ref<double>::separate(latitude, longitude, count),
        streamkit::neighbors_ref<std::int64_t, double>::dense(index, angle, count, k), nullptr);
}

void gpu_nearest::update(streamkit::points_ref<double> references, cudaStream_t stream)
{
  state_->wait_for(stream, "NearestIndex.update");
  state_->search.update(references);
}

void gpu_nearest::query(streamkit::points_ref<double> observations, streamkit::neighbors_ref<std::int64_t, double> result,
                        cudaStream_t stream)
{
  state_->wait_for(stream, "NearestIndex.query");
  state_->search.query(observations, result);
}

int gpu_nearest::device() const noexcept { return state_->search.searcher().device(); }

std::uint64_t gpu_nearest::size() const noexcept { return state_->search.size(); }

dist::exchange_stats const& gpu_nearest::last_exchange() const noexcept { return state_->search.last_exchange(); }

template <class T>
struct mpi_scaler<T>::state {
  MPI_Comm comm;
  // Host arrays: the rank's GPU, a stream there and grow-only buffers, made at the first host call.
  // The stream comes before the scaler, whose buffers a host fit ties to it: destroyed after them.
  std::optional<streamkit::stream> host_stream;
  streamkit::device_buffer<T> input, output;
  dist::distributed_minmax_scaler<T> scaler;

  streamkit::stream& stream_for_host()
  {
    if (!host_stream) {
      int visible = 0;
      if (cudaGetDeviceCount(&visible) != cudaSuccess) {
        static_cast<void>(cudaGetLastError());
        visible = 0;
      }
      host_stream.emplace(dist::default_device(dist::describe(comm), visible));
    }
    return *host_stream;
  }

  /// A dense device copy of host rows `x` (row-major, ld = cols, as the Python side passes them).
  matrix_ref<T const> upload(matrix_ref<T const> x)
  {
    auto& s = stream_for_host();
    std::size_t const count = x.rows * x.cols;
    if (input.size() < count) { input = streamkit::device_buffer<T>(count, s); }
    if (count > 0) { STREAMKIT_CUDA_TRY(cudaMemcpyAsync(input.data(), x.data, count * sizeof(T), cudaMemcpyHostToDevice, s.value())); }
    return matrix_ref<T const>::dense(input.data(), x.rows, x.cols);
  }
};

template <class T>
mpi_scaler<T>::mpi_scaler(MPI_Comm comm, T lo, T hi, bool clip)
    : state_(std::make_unique<state>(state{comm, std::nullopt, {}, {},
                                           dist::distributed_minmax_scaler<T>(comm, streamkit::minmax_options<T>{lo, hi, clip})}))
{
}

template <class T>
mpi_scaler<T>::~mpi_scaler() = default;

template <class T>
void mpi_scaler<T>::fit(matrix_ref<T const> x, bool on_cuda, bool reset, cudaStream_t stream)
{
  // The host copy runs inside the fit's collective (run_everywhere), so a rank whose copy fails
  // fails every rank instead of leaving them waiting.
  std::optional<matrix_ref<T const>> on_device;
  streamkit::stream_ref where = stream;
  if (!on_cuda) {
    dist::run_everywhere(state_->comm, reset ? "MinMaxScaler.fit" : "MinMaxScaler.partial_fit", [&] {
      on_device = state_->upload(x);
      where = state_->stream_for_host();
    });
  }
  auto const rows = on_device ? *on_device : x;
  if (reset) {
    state_->scaler.fit(rows, where);
  } else {
    state_->scaler.partial_fit(rows, where);
  }
}

template <class T>
void mpi_scaler<T>::transform(matrix_ref<T const> x, matrix_ref<T> out, bool on_cuda, bool inverse, cudaStream_t stream)
{
  auto const apply = [&](matrix_ref<T const> in, matrix_ref<T> to, streamkit::stream_ref s) {
    if (inverse) {
      state_->scaler.inverse_transform_async(in, to, s);
    } else {
      state_->scaler.transform_async(in, to, s);
    }
  };
  if (on_cuda) {
    apply(x, out, stream);
    return;
  }
  auto const in = state_->upload(x);
  auto& s = state_->stream_for_host();
  std::size_t const count = x.rows * x.cols;
  if (state_->output.size() < count) { state_->output = streamkit::device_buffer<T>(count, s); }
  apply(in, matrix_ref<T>::dense(state_->output.data(), x.rows, x.cols), s);
  if (count > 0) { STREAMKIT_CUDA_TRY(cudaMemcpyAsync(out.data, state_->output.data(), count * sizeof(T), cudaMemcpyDeviceToHost, s.value())); }
  s.sync();
}

template <class T>
void mpi_scaler<T>::fitted(std::vector<T>& min, std::vector<T>& max, std::vector<T>& scale) const
{
  auto const& global = state_->scaler.global();
  min = global.data_min_host();
  max = global.data_max_host();
  scale = global.scale_host();
}

template <class T>
std::uint64_t mpi_scaler<T>::samples_seen() const noexcept
{
  return state_->scaler.samples_seen();
}

template <class T>
bool mpi_scaler<T>::uses_device_pointers() const noexcept
{
  return state_->scaler.uses_device_pointers();
}

template class mpi_scaler<float>;
template class mpi_scaler<double>;

}  // namespace streamkit_python
