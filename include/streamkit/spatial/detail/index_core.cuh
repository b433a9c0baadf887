#pragma once
// What both search engines (brute_force_index, tree_index) hold besides their prepared references, with
// its move rules, validation and reject-invalid step written once (engine_core.cuh builds the engines on it).

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/detail/nearest_launch.cuh>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace streamkit::detail {

/// A number no other preparation of references in this process has had (the first is 1), so that
/// what a query kept about one reference set is never taken for another's (radius_impl.cuh).
inline std::uint64_t next_preparation() noexcept
{
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

/// The options, memory resource, reference count and device of an engine, its device counters of
/// invalid points and the scratch of its queries without a scratch argument. A moved-from core is
/// empty (no references, no device), so every query of it throws std::logic_error.
template <class T>
class index_core {
 public:
  /// The number of references M (0 for a moved-from index).
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  /// Device counter of the invalid references of the last preparation, written in the order of its
  /// stream (null for a moved-from index).
  [[nodiscard]] unsigned long long const* invalid_references() const noexcept { return invalid_counts_.data(); }
  /// The options given at construction.
  [[nodiscard]] nearest_options const& options() const noexcept { return options_; }

 protected:
  index_core(nearest_options const& options, device_resource_ref resource) : options_(options), resource_(resource)
  {
    expect_options(options);
  }
  index_core(index_core&& other) noexcept
      : options_(other.options_),
        resource_(other.resource_),
        count_(std::exchange(other.count_, 0)),
        device_(std::exchange(other.device_, -1)),
        preparation_(std::exchange(other.preparation_, 0)),
        coordinates_(std::exchange(other.coordinates_, nullptr)),
        invalid_counts_(std::move(other.invalid_counts_)),
        scratch_(std::move(other.scratch_))
  {
  }
  index_core& operator=(index_core&& other) noexcept
  {
    if (this != &other) {
      options_ = other.options_;
      resource_ = other.resource_;
      count_ = std::exchange(other.count_, 0);
      device_ = std::exchange(other.device_, -1);
      preparation_ = std::exchange(other.preparation_, 0);
      coordinates_ = std::exchange(other.coordinates_, nullptr);
      invalid_counts_ = std::move(other.invalid_counts_);
      scratch_ = std::move(other.scratch_);
    }
    return *this;
  }
  index_core(index_core const&) = delete;
  index_core& operator=(index_core const&) = delete;
  ~index_core() = default;

  /// Starts a preparation of `m` references on `stream`: memory of another device is dropped, the
  /// invalid-reference counter is allocated (first time) and zeroed in stream order.
  void begin_preparation(std::size_t m, stream_ref stream)
  {
    int const stream_device = stream.device();
    if (stream_device != device_) { scratch_ = nearest_scratch(); }
    if (invalid_counts_.empty() || stream_device != device_) {
      invalid_counts_ = device_buffer<unsigned long long>(2, stream, resource_);  // references, observations (blocking query)
    }
    device_ = stream_device;
    count_ = m;
    preparation_ = next_preparation();
    invalid_counts_.set_stream(stream);
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(invalid_counts_.data(), 0, sizeof(unsigned long long), stream.value()));
  }

  /// With invalid_points::reject: counts the invalid observations on `stream`, waits, and throws
  /// std::invalid_argument for invalid references or observations (before anything is written).
  void reject_invalid(points_ref<T> const& observations, stream_ref stream)
  {
    if (options_.on_invalid == invalid_points::reject && observations.count > 0) {
      device_guard guard(device_);  // the one place that waits before a search: reject means nothing is written
      reject_invalid_points(observations, options_, invalid_counts_.data(), stream);
    }
  }

  nearest_options options_;
  device_resource_ref resource_;
  std::size_t count_ = 0;
  int device_ = -1;
  std::uint64_t preparation_ = 0;  // next_preparation() of the current references (0: none)
  lat_lon const* coordinates_ = nullptr;  // the references' float64 coordinates by index, in the engine's memory (its preparation sets it)
  device_buffer<unsigned long long> invalid_counts_;  // invalid references (preparation), observations (blocking query)
  nearest_scratch scratch_;                           // of the queries without a scratch argument
};

}  // namespace streamkit::detail
