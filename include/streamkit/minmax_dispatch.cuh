#pragma once
/// @file minmax_dispatch.cuh
/// Host-to-host column min-max scaling of a batch of arrays, each with its own shape, spread over a
/// dispatcher's GPUs and streams: every array goes host → device, through minmax_normalize, and
/// back on one stream (one array per chunk), the copies of a device's arrays queued one after
/// another in each direction so that both directions and compute overlap. Inputs and outputs in
/// pinned memory go straight to DMA; pageable ones are staged through each stream's pinned buffers
/// by that stream's host thread, or page-locked in place (pageable_transfer). Device and staging
/// buffers belong to the dispatcher's workspaces: after the first batch of a given size nothing is
/// allocated.

#include <streamkit/dispatcher.hpp>
#include <streamkit/minmax.cuh>
#include <streamkit/pinned_buffer.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace streamkit {

/// How pageable (ordinary) host memory reaches the device.
enum class pageable_transfer {
  stage,              ///< copied by host threads through reusable pinned staging buffers (default: measured faster)
  register_in_place,  ///< page-locked in place with cudaHostRegister for the duration of each array's chunk
};

namespace detail {

/// Lines (rows of a row-major, columns of a column-major matrix) and their length in elements.
template <class T>
std::pair<std::size_t, std::size_t> lines_of(matrix_ref<T> const& m) noexcept
{
  return m.order == layout::row_major ? std::pair{m.rows, m.cols} : std::pair{m.cols, m.rows};
}

/// The same matrix, densely packed (ld = line length) at `data`.
template <class T, class U>
matrix_ref<T> packed(matrix_ref<U> const& m, T* data) noexcept
{
  return matrix_ref<T>::dense(data, m.rows, m.cols, m.order);
}

/// Host copy between a (possibly pitched) matrix and its packed form, element lines only.
template <class T>
void copy_lines(T* to, std::size_t to_ld, T const* from, std::size_t from_ld, std::size_t lines, std::size_t length)
{
  if (to_ld == length && from_ld == length) {
    std::memcpy(to, from, lines * length * sizeof(T));
    return;
  }
  for (std::size_t line = 0; line < lines; ++line) { std::memcpy(to + line * to_ld, from + line * from_ld, length * sizeof(T)); }
}

/// Stream-ordered copy between a (possibly pitched) matrix and its packed form, element lines only.
template <class T>
void copy_lines_async(T* to, std::size_t to_ld, T const* from, std::size_t from_ld, std::size_t lines, std::size_t length,
                      cudaMemcpyKind kind, stream_ref stream)
{
  if (to_ld == length && from_ld == length) {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to, from, lines * length * sizeof(T), kind, stream.value()));
    return;
  }
  STREAMKIT_CUDA_TRY(cudaMemcpy2DAsync(to, to_ld * sizeof(T), from, from_ld * sizeof(T), length * sizeof(T), lines, kind,
                                       stream.value()));
}

}  // namespace detail

/// Scales inputs[k] into outputs[k] (host memory; outputs[k] may equal inputs[k]) and waits.
/// @throws std::invalid_argument for bad shapes or options (before anything is written);
/// dispatch_error if an array fails on a device (naming the device and the array index).
template <class T>
void dispatch_minmax_normalize(dispatcher& workers, std::vector<matrix_ref<T const>> const& inputs,
                               std::vector<matrix_ref<T>> const& outputs, minmax_options<T> const& options = {},
                               pageable_transfer pageable = pageable_transfer::stage)
{
  detail::expect_options(options);
  STREAMKIT_EXPECTS(inputs.size() == outputs.size(), std::invalid_argument,
                    "outputs: " + std::to_string(outputs.size()) + " arrays for " + std::to_string(inputs.size()) + " inputs");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    std::string const in_name = "inputs[" + std::to_string(k) + "]";
    std::string const out_name = "outputs[" + std::to_string(k) + "]";
    detail::expect_matrix(inputs[k], in_name.c_str());
    detail::expect_matrix(outputs[k], out_name.c_str());
    detail::expect_same_shape(inputs[k], outputs[k], out_name);
  }
  workers.run(inputs.size(), 1, [&](chunk_context& chunk) {
    matrix_ref<T const> const in = inputs[chunk.items.begin];
    matrix_ref<T> const out = outputs[chunk.items.begin];
    std::size_t const count = in.rows * in.cols;
    if (count == 0) { return; }
    stream_ref const work = chunk.stream;
    auto const in_shape = detail::lines_of(in);  // (lines, length); not structured bindings: C++17 lambdas cannot capture them
    auto const out_shape = detail::lines_of(out);
    std::size_t const in_lines = in_shape.first, in_length = in_shape.second;
    std::size_t const out_lines = out_shape.first, out_length = out_shape.second;
    bool const in_place = static_cast<void const*>(in.data) == static_cast<void const*>(out.data);
    std::optional<host_registration> in_registration;
    std::optional<host_registration> out_registration;
    bool in_pinned = is_pinned(in.data);
    bool out_pinned = is_pinned(out.data);
    if (pageable == pageable_transfer::register_in_place) {
      if (!in_pinned) { in_registration.emplace(const_cast<T*>(in.data), in.extent() * sizeof(T)); }
      if (!out_pinned && !in_place) { out_registration.emplace(out.data, out.extent() * sizeof(T)); }
      in_pinned = out_pinned = true;
    }
    T* const device_in = chunk.workspace.device<T>(count, 0);
    T* const device_out = chunk.workspace.device<T>(count, 1);

    // Host → device: straight from pinned memory, else through the staging buffer.
    T const* source = in.data;
    std::size_t source_ld = in.ld;
    if (!in_pinned) {
      T* const staging = chunk.workspace.pinned<T>(count, 0);
      detail::copy_lines(staging, in_length, in.data, in.ld, in_lines, in_length);
      source = staging;
      source_ld = in_length;
    }
    chunk.copy_in([&] {
      detail::copy_lines_async(device_in, in_length, source, source_ld, in_lines, in_length, cudaMemcpyHostToDevice, work);
    });
    minmax_normalize_async(detail::packed<T const>(in, device_in), detail::packed(out, device_out), options, work);

    // Device → host: straight into pinned memory, else through the staging buffer.
    T* const staging_out = out_pinned ? nullptr : chunk.workspace.pinned<T>(count, 1);
    T* const destination = out_pinned ? out.data : staging_out;
    std::size_t const destination_ld = out_pinned ? out.ld : out_length;
    chunk.copy_out([&] {
      detail::copy_lines_async(destination, destination_ld, device_out, out_length, out_lines, out_length, cudaMemcpyDeviceToHost, work);
    });
    // Registrations end and staged results are copied out once the array is done.
    work.sync();
    if (!out_pinned) { detail::copy_lines(out.data, out.ld, staging_out, out_length, out_lines, out_length); }
  });
}

}  // namespace streamkit
