#pragma once
/// @file dispatcher.hpp
/// A dispatcher that spreads a batch of items over several GPUs: the batch is split into chunks for
/// one host worker per (device, stream), worker i's first chunk is chunk i and the rest are handed out
/// dynamically (a shared counter), so a slower or busier GPU takes fewer chunks. Each chunk's work is enqueued on its worker's stream by a callable
/// the caller supplies; every stream owns reusable device and pinned staging memory.
///
/// Failure: any exception from the callable or any CUDA error of a chunk stops the hand-out, lets the
/// chunks in flight drain, joins every worker and rethrows the first failure as `dispatch_error`
/// (device id and item range in the message; the original exception in original()). The dispatcher
/// stays usable, except after a sticky CUDA error (e.g. an illegal address), which ends the CUDA
/// context of that device for the whole process.
///
/// Copies: chunk_context::copy_in()/copy_out() put the copies of a device's chunks in one queue per
/// direction, so with several streams per device the bus carries one chunk at a time in each
/// direction while other chunks compute.
///
/// Threads: the dispatcher keeps one host thread per worker but the first for its whole life (the
/// first worker runs on the thread that calls run()); a run wakes them, none is created per run. One
/// run at a time per dispatcher; run() or run_async() while a batch is running throws
/// std::logic_error (so sharing a dispatcher between host threads is safe but serialises nothing:
/// use one dispatcher per thread to run batches at once).

#include <streamkit/core/device.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/multi_gpu/detail/copy_order.hpp>
#include <streamkit/multi_gpu/detail/worker_pool.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace streamkit {

/// Items [begin, end) of a batch.
struct item_range {
  std::size_t begin = 0;  ///< first item
  std::size_t end = 0;    ///< one past the last item
  /// The number of items, end − begin.
  [[nodiscard]] std::size_t size() const noexcept { return end - begin; }
};

/// Reusable memory owned by one stream of the dispatcher; it only grows, so after the first chunks
/// of a run nothing is allocated.
class stream_workspace {
 public:
  /// Memory for `stream`, device memory from `resource` (which must outlive the workspace).
  stream_workspace(stream_ref stream, device_resource_ref resource) : stream_(stream), resource_(resource) {}
  /// At least `count` elements of T in device memory, ordered on the workspace's stream.
  template <class T>
  T* device(std::size_t count, std::size_t slot = 0)
  {
    return reinterpret_cast<T*>(grow(device_, slot, count * sizeof(T), [this](std::size_t bytes) {
      return std::make_unique<device_buffer<std::byte>>(bytes, stream_, resource_);
    }));
  }
  /// At least `count` elements of T in pinned host memory.
  template <class T>
  T* pinned(std::size_t count, std::size_t slot = 0)
  {
    return reinterpret_cast<T*>(
      grow(pinned_, slot, count * sizeof(T), [](std::size_t bytes) { return std::make_unique<pinned_buffer<std::byte>>(bytes); }));
  }
  /// How many allocations this workspace has made (to show that none happen after warm-up).
  [[nodiscard]] std::size_t allocations() const noexcept { return allocations_; }

 private:
  template <class Buffer, class Make>
  std::byte* grow(std::vector<std::unique_ptr<Buffer>>& buffers, std::size_t slot, std::size_t bytes, Make&& make)
  {
    if (buffers.size() <= slot) { buffers.resize(slot + 1); }
    if (!buffers[slot] || buffers[slot]->size() < bytes) {
      buffers[slot] = make(bytes);
      ++allocations_;
    }
    return buffers[slot]->data();
  }

  stream_ref stream_;
  device_resource_ref resource_;
  std::vector<std::unique_ptr<device_buffer<std::byte>>> device_;
  std::vector<std::unique_ptr<pinned_buffer<std::byte>>> pinned_;
  std::size_t allocations_ = 0;
};


/// What the caller's callable gets for one chunk. The callable enqueues the chunk's work (copies in,
/// kernels, copies out) on `stream`; the dispatcher waits for the stream before the chunk counts as
/// done, so host results written by copies on the stream are complete when run() returns, and the
/// workspace is free again when the worker's next chunk starts.
class chunk_context {
 public:
  int device;          ///< the worker's device, current while the callable runs
  std::size_t lane;    ///< index of the device in dispatcher::devices(): state shared by that device's streams
  stream_ref stream;   ///< the worker's stream, on which the callable enqueues the chunk's work
  item_range items;    ///< the chunk's items
  std::size_t worker;  ///< index of the (device, stream) worker, stable within a run
  stream_workspace& workspace;  ///< the stream's reusable device and pinned memory

  /// Enqueues host-to-device copies on `stream` after those of the device's previous chunk:
  /// `enqueue()` is called with the order held.
  template <class Enqueue>
  void copy_in(Enqueue&& enqueue)
  {
    in_order(order_.in, std::forward<Enqueue>(enqueue));
  }
  /// As copy_in(), for device-to-host copies.
  template <class Enqueue>
  void copy_out(Enqueue&& enqueue)
  {
    in_order(order_.out, std::forward<Enqueue>(enqueue));
  }

 private:
  friend class dispatcher;  // the only one that makes chunks
  chunk_context(int device_id, std::size_t lane_index, stream_ref work, item_range range, std::size_t worker_index,
                stream_workspace& memory, detail::copy_order& order)
      : device(device_id), lane(lane_index), stream(work), items(range), worker(worker_index), workspace(memory), order_(order)
  {
  }
  template <class Enqueue>
  void in_order(detail::copy_queue& queue, Enqueue&& enqueue)
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    if (queue.last.recorded()) { stream.wait(queue.last); }
    enqueue();
    queue.last.record(stream);
  }

  detail::copy_order& order_;
};

/// The first failure of a run, with the device and the items it happened on.
class dispatch_error : public std::runtime_error {
 public:
  /// The failure `original` of the chunk `items` on `device`; the message is
  /// "device D, items [begin, end): " followed by `what`.
  dispatch_error(int device, item_range items, std::exception_ptr original, std::string const& what)
      : std::runtime_error("device " + std::to_string(device) + ", items [" + std::to_string(items.begin) + ", " +
                           std::to_string(items.end) + "): " + what),
        device_(device),
        items_(items),
        original_(std::move(original))
  {
  }
  /// The device id of the failed chunk.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The items of the failed chunk.
  [[nodiscard]] item_range items() const noexcept { return items_; }
  /// The exception the chunk threw (std::rethrow_exception rethrows it).
  [[nodiscard]] std::exception_ptr original() const noexcept { return original_; }

 private:
  int device_;
  item_range items_;
  std::exception_ptr original_;
};

/// Options of a dispatcher: which devices, and how many streams on each.
struct dispatcher_options {
  /// Devices to use (repeats allowed, e.g. {0, 0} to emulate two GPUs). Empty: every visible device,
  /// which honours CUDA_VISIBLE_DEVICES.
  std::vector<int> devices;
  /// Streams per device; 0 picks the device's copy-engine count (at least 2).
  int streams_per_device = 0;
};

/// The device memory resource to use on a device id (as rmm::mr::get_per_device_resource_ref).
using device_resource_for = std::function<device_resource_ref(int device)>;

/// Called after each finished chunk with (chunks done, chunks in all); from worker threads, one call
/// at a time.
using progress_callback = std::function<void(std::size_t, std::size_t)>;

namespace detail {
/// Chunk `index` of a batch of `items` cut into pieces of `chunk_items`.
[[nodiscard]] inline item_range chunk_at(std::size_t items, std::size_t chunk_items, std::size_t index) noexcept
{
  std::size_t const begin = index * chunk_items;
  return {begin, begin + chunk_items < items ? begin + chunk_items : items};
}
[[nodiscard]] inline std::size_t chunk_count(std::size_t items, std::size_t chunk_items) noexcept
{
  return (items + chunk_items - 1) / chunk_items;
}
/// The message of an exception, whatever its type.
[[nodiscard]] inline std::string describe(std::exception_ptr const& error)
{
  try {
    std::rethrow_exception(error);
  } catch (std::exception const& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}
/// The devices a dispatcher uses: the explicit list (validated) or 0 .. count-1.
[[nodiscard]] inline std::vector<int> resolve_devices(std::vector<int> const& requested, int visible)
{
  STREAMKIT_EXPECTS(visible > 0, std::runtime_error, "dispatcher: no CUDA device is visible");
  if (requested.empty()) {
    std::vector<int> all(static_cast<std::size_t>(visible));
    for (int i = 0; i < visible; ++i) { all[static_cast<std::size_t>(i)] = i; }
    return all;
  }
  for (int id : requested) {
    STREAMKIT_EXPECTS(id >= 0 && id < visible, std::out_of_range,
                      "options.devices: device id " + std::to_string(id) + " is out of range [0, " + std::to_string(visible) + ")");
  }
  return requested;
}
}  // namespace detail

/// Spreads a batch of items over GPUs and streams (see the file comment): one host worker per
/// (device, stream) takes chunks from a shared counter and runs the caller's callable on its stream.
/// One run at a time.
class dispatcher {
 public:
  /// Creates the workers, their streams and threads. Device memory (workspaces, and the state of
  /// the built-in workloads) comes from `resource_for(device)`, by default default_device_resource();
  /// each resource must outlive the dispatcher.
  /// @throws std::invalid_argument, std::out_of_range for bad options; std::runtime_error when no
  /// device is visible.
  explicit dispatcher(dispatcher_options const& options = {}, device_resource_for const& resource_for = {})
  {
    STREAMKIT_EXPECTS(options.streams_per_device >= 0, std::invalid_argument,
                      "options.streams_per_device: must not be negative, got " + std::to_string(options.streams_per_device));
    devices_ = detail::resolve_devices(options.devices, device_count());
    for (std::size_t lane = 0; lane < devices_.size(); ++lane) {
      int const id = devices_[lane];
      copy_orders_.push_back(std::make_unique<detail::copy_order>(id));
      resources_.push_back(resource_for ? resource_for(id) : default_device_resource());
      int const streams = options.streams_per_device > 0 ? options.streams_per_device
                                                         : std::max(2, device(id).copy_engine_count());
      for (int k = 0; k < streams; ++k) { workers_.push_back(std::make_unique<worker>(id, lane, resources_.back())); }
    }
    pool_ = std::make_unique<detail::worker_pool>(workers_.size() - 1);
  }
  dispatcher(dispatcher const&) = delete;
  dispatcher& operator=(dispatcher const&) = delete;
  ~dispatcher()
  {
    if (pending_.valid()) { pending_.wait(); }
  }

  /// The device id of each lane (the order of dispatcher_options::devices).
  [[nodiscard]] std::vector<int> const& devices() const noexcept { return devices_; }
  /// The device memory resource of lane `lane`.
  [[nodiscard]] device_resource_ref resource(std::size_t lane) const { return resources_.at(lane); }
  /// The number of (device, stream) workers.
  [[nodiscard]] std::size_t worker_count() const noexcept { return workers_.size(); }
  /// Allocations made so far by every worker's workspace.
  [[nodiscard]] std::size_t workspace_allocations() const noexcept
  {
    std::size_t total = 0;
    for (auto const& w : workers_) { total += w->workspace.allocations(); }
    return total;
  }

  /// Runs `enqueue(chunk_context&)` for every chunk of [0, items) and waits.
  /// @throws std::invalid_argument for chunk_items == 0; dispatch_error for a failed chunk;
  /// std::logic_error if the dispatcher is already running a batch (from another thread or run_async).
  template <class Enqueue>
  void run(std::size_t items, std::size_t chunk_items, Enqueue&& enqueue, progress_callback const& progress = {})
  {
    STREAMKIT_EXPECTS(chunk_items > 0, std::invalid_argument, "chunk_items: must be positive");
    exclusive_run const claim(running_);
    run_claimed(items, chunk_items, enqueue, progress);
  }

  /// As run(), on a background thread; the returned future's get() waits and rethrows. The
  /// callable and everything it refers to must outlive the run.
  template <class Enqueue>
  std::shared_future<void> run_async(std::size_t items, std::size_t chunk_items, Enqueue enqueue, progress_callback progress = {})
  {
    STREAMKIT_EXPECTS(chunk_items > 0, std::invalid_argument, "chunk_items: must be positive");
    auto claim = std::make_shared<exclusive_run>(running_);
    pending_ = std::async(std::launch::async, [this, items, chunk_items, enqueue = std::move(enqueue), progress, claim]() mutable {
                 auto const held = std::move(claim);  // released when the run ends, not with the future
                 run_claimed(items, chunk_items, enqueue, progress);
               }).share();
    return pending_;
  }

 private:
  /// Holds the dispatcher's one run at a time.
  class exclusive_run {
   public:
    explicit exclusive_run(std::atomic<bool>& running) : running_(running)
    {
      STREAMKIT_EXPECTS(!running_.exchange(true), std::logic_error,
                        "dispatcher: a batch is already running (one run at a time per dispatcher)");
    }
    ~exclusive_run() { running_ = false; }
    exclusive_run(exclusive_run const&) = delete;
    exclusive_run& operator=(exclusive_run const&) = delete;

   private:
    std::atomic<bool>& running_;
  };

  template <class Enqueue>
  void run_claimed(std::size_t items, std::size_t chunk_items, Enqueue& enqueue, progress_callback const& progress)
  {
    std::size_t const chunks = detail::chunk_count(items, chunk_items);
    std::size_t const running = std::min(workers_.size(), chunks);
    // Worker i starts with chunk i, then takes the next free one: every worker's memory meets a chunk
    // in every run (a first run sizes it, so steady-state runs allocate nothing), however the threads start.
    std::atomic<std::size_t> next{running};
    std::atomic<bool> stop{false};
    std::size_t done = 0;
    std::mutex mutex;
    std::exception_ptr first_error;
    auto const body = [&](std::size_t index) {
      worker& w = *workers_[index];
      try {
        device_guard guard(w.device);
        for (std::size_t chunk = index; chunk < chunks && !stop; chunk = next.fetch_add(1)) {
          item_range const range = detail::chunk_at(items, chunk_items, chunk);
          try {
            chunk_context context(w.device, w.lane, w.stream.ref(), range, index, w.workspace, *copy_orders_[w.lane]);
            enqueue(context);
            w.stream.sync();
          } catch (...) {
            static_cast<void>(cudaStreamSynchronize(w.stream.value()));  // drain what the chunk enqueued
            static_cast<void>(cudaGetLastError());
            std::lock_guard<std::mutex> lock(mutex);
            if (!first_error) {
              first_error = std::make_exception_ptr(
                dispatch_error(w.device, range, std::current_exception(), detail::describe(std::current_exception())));
            }
            stop = true;
            return;
          }
          if (progress) {
            std::lock_guard<std::mutex> lock(mutex);
            progress(++done, chunks);
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first_error) { first_error = std::current_exception(); }
        stop = true;
      }
    };
    pool_->run(running, body);
    if (first_error) { std::rethrow_exception(first_error); }
  }

  struct worker {
    worker(int id, std::size_t lane_index, device_resource_ref resource)
        : device(id), lane(lane_index), stream(id), workspace(stream.ref(), resource)
    {
    }
    int device;
    std::size_t lane;
    streamkit::stream stream;
    stream_workspace workspace;
  };

  std::vector<int> devices_;
  std::vector<device_resource_ref> resources_;
  std::vector<std::unique_ptr<detail::copy_order>> copy_orders_;
  std::vector<std::unique_ptr<worker>> workers_;
  std::atomic<bool> running_{false};
  std::shared_future<void> pending_;
  std::unique_ptr<detail::worker_pool> pool_;  // last: its threads stop before the workers go
};

}  // namespace streamkit
