#pragma once
/// @file graph.hpp
/// CUDA graph capture as a scope that always ends, and the instantiated graph it yields.

#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <utility>

namespace streamkit {

/// An instantiated, launchable CUDA graph (move-only).
class graph_exec {
 public:
  graph_exec() = default;
  /// Takes ownership of `handle`, which is destroyed with the object.
  explicit graph_exec(cudaGraphExec_t handle) noexcept : handle_(handle) {}
  ~graph_exec() noexcept
  {
    if (handle_ != nullptr) { detail::ignore_release_error(cudaGraphExecDestroy(handle_)); }
  }
  graph_exec(graph_exec const&) = delete;
  graph_exec& operator=(graph_exec const&) = delete;
  /// Takes over `other`'s graph; `other` becomes empty.
  graph_exec(graph_exec&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  /// Destroys the graph it owns (if any), then takes over `other`'s; `other` becomes empty.
  graph_exec& operator=(graph_exec&& other) noexcept
  {
    if (this != &other) {
      if (handle_ != nullptr) { detail::ignore_release_error(cudaGraphExecDestroy(handle_)); }
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }

  /// Enqueues one replay of the captured work on `stream`.
  void launch(stream_ref stream) const
  {
    STREAMKIT_EXPECTS(handle_ != nullptr, std::logic_error, "launch() of an empty or moved-from graph_exec");
    STREAMKIT_CUDA_TRY(cudaGraphLaunch(handle_, stream.value()));
  }
  /// The CUDA handle (null when empty or moved from).
  [[nodiscard]] cudaGraphExec_t value() const noexcept { return handle_; }

 private:
  cudaGraphExec_t handle_{};
};

/// Captures the work enqueued on a stream between construction and finish() into a graph. The
/// capture always ends: if the captured code throws, the destructor ends it and discards the graph,
/// leaving the stream usable.
class graph_capture {
 public:
  /// @throws std::invalid_argument for a default stream (the legacy stream cannot be captured).
  explicit graph_capture(stream_ref stream, cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal)
      : stream_(stream)
  {
    STREAMKIT_EXPECTS(!stream.is_default(), std::invalid_argument,
                      "stream: graph capture needs a created stream, not a default stream");
    STREAMKIT_CUDA_TRY(cudaStreamBeginCapture(stream_.value(), mode));
    capturing_ = true;
  }
  ~graph_capture() noexcept
  {
    if (!capturing_) { return; }
    cudaGraph_t graph{};
    if (cudaStreamEndCapture(stream_.value(), &graph) == cudaSuccess && graph != nullptr) {
      detail::ignore_release_error(cudaGraphDestroy(graph));
    } else {
      static_cast<void>(cudaGetLastError());
    }
  }
  graph_capture(graph_capture const&) = delete;
  graph_capture& operator=(graph_capture const&) = delete;
  graph_capture(graph_capture&&) = delete;
  graph_capture& operator=(graph_capture&&) = delete;

  /// Ends the capture and instantiates the graph. Call once.
  [[nodiscard]] graph_exec finish()
  {
    STREAMKIT_EXPECTS(capturing_, std::logic_error, "graph_capture::finish() called twice");
    capturing_ = false;
    cudaGraph_t graph{};
    STREAMKIT_CUDA_TRY(cudaStreamEndCapture(stream_.value(), &graph));
    cudaGraphExec_t exec{};
    cudaError_t const status = cudaGraphInstantiate(&exec, graph, 0);
    detail::ignore_release_error(cudaGraphDestroy(graph));
    STREAMKIT_CUDA_TRY(status);
    return graph_exec(exec);
  }

 private:
  stream_ref stream_;
  bool capturing_ = false;
};

}  // namespace streamkit
