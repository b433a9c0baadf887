#pragma once
// The host-to-host min-max pipeline (see minmax.cuh).

#include <streamkit/device.hpp>
#include <streamkit/device_buffer.hpp>
#include <streamkit/error.hpp>
#include <streamkit/pinned_buffer.hpp>
#include <streamkit/stream.hpp>

#include <cstring>
#include <utility>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace streamkit {

template <class T>
struct minmax_host_pipeline<T>::slot {
  explicit slot(int device_id) : work(device_id) {}
  stream work;
  device_buffer<T> device_in;
  device_buffer<T> device_out;
  pinned_buffer<T> staging_in;
  pinned_buffer<T> staging_out;
};

namespace detail {
/// Grows `buffer` to at least `count` elements (never shrinks: reuse after warm-up).
template <class Buffer, class... Args>
void reserve(Buffer& buffer, std::size_t count, Args&&... args)
{
  if (buffer.size() < count) { buffer = Buffer(count, std::forward<Args>(args)...); }
}
}  // namespace detail

template <class T>
minmax_host_pipeline<T>::minmax_host_pipeline(int device_id, host_pipeline_options const& options)
    : device_(streamkit::device(device_id).id()), options_(options)
{
  STREAMKIT_EXPECTS(options.streams > 0, std::invalid_argument,
                    "options.streams: must be positive, got " + std::to_string(options.streams));
  for (int i = 0; i < options.streams; ++i) { slots_.push_back(std::make_unique<slot>(device_)); }
}

template <class T>
minmax_host_pipeline<T>::~minmax_host_pipeline()
{
  for (auto& lane : slots_) { detail::ignore_release_error(cudaStreamSynchronize(lane->work.value())); }
}

template <class T>
std::size_t minmax_host_pipeline<T>::stream_count() const noexcept
{
  return slots_.size();
}

template <class T>
void minmax_host_pipeline<T>::run(std::vector<matrix_ref<T const>> const& inputs, std::vector<matrix_ref<T>> const& outputs,
                                  minmax_options<T> const& options)
{
  detail::expect_options(options);
  STREAMKIT_EXPECTS(inputs.size() == outputs.size(), std::invalid_argument,
                    "outputs: " + std::to_string(outputs.size()) + " arrays for " + std::to_string(inputs.size()) + " inputs");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    std::string const in_name = "inputs[" + std::to_string(k) + "]";
    std::string const out_name = "outputs[" + std::to_string(k) + "]";
    detail::expect_matrix(inputs[k], in_name.c_str());
    detail::expect_matrix(outputs[k], out_name.c_str());
    detail::expect_same_shape(inputs[k], outputs[k]);
  }
  std::vector<std::exception_ptr> errors(slots_.size());
  std::vector<std::thread> workers;
  for (std::size_t s = 0; s < slots_.size() && s < inputs.size(); ++s) {
    workers.emplace_back([&, s] {
      try {
        run_slot(*slots_[s], s, inputs, outputs, options);
      } catch (...) {
        errors[s] = std::current_exception();
      }
    });
  }
  for (auto& worker : workers) { worker.join(); }
  for (auto const& error : errors) {
    if (error) { std::rethrow_exception(error); }
  }
}

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

template <class T>
void minmax_host_pipeline<T>::run_slot(slot& lane, std::size_t first, std::vector<matrix_ref<T const>> const& inputs,
                                       std::vector<matrix_ref<T>> const& outputs, minmax_options<T> const& options)
{
  device_guard guard(device_);
  stream_ref const work = lane.work.ref();
  bool const register_pageable = options_.pageable == pageable_transfer::register_in_place;
  for (std::size_t k = first; k < inputs.size(); k += slots_.size()) {
    matrix_ref<T const> const in = inputs[k];
    matrix_ref<T> const out = outputs[k];
    std::size_t const count = in.rows * in.cols;
    if (count == 0) { continue; }
    auto const [in_lines, in_length] = detail::lines_of(in);
    auto const [out_lines, out_length] = detail::lines_of(out);
    bool const in_place = static_cast<void const*>(in.data) == static_cast<void const*>(out.data);
    std::optional<host_registration> in_registration;
    std::optional<host_registration> out_registration;
    bool in_pinned = is_pinned(in.data);
    bool out_pinned = is_pinned(out.data);
    if (register_pageable) {
      if (!in_pinned) { in_registration.emplace(const_cast<T*>(in.data), in.extent() * sizeof(T)); }
      if (!out_pinned && !in_place) { out_registration.emplace(out.data, out.extent() * sizeof(T)); }
      in_pinned = out_pinned = true;
    }
    detail::reserve(lane.device_in, count, work);
    detail::reserve(lane.device_out, count, work);

    // Host → device: straight from pinned memory, else through the staging buffer.
    T const* source = in.data;
    std::size_t source_ld = in.ld;
    if (!in_pinned) {
      detail::reserve(lane.staging_in, count);
      detail::copy_lines(lane.staging_in.data(), in_length, in.data, in.ld, in_lines, in_length);
      source = lane.staging_in.data();
      source_ld = in_length;
    }
    detail::copy_lines_async(lane.device_in.data(), in_length, source, source_ld, in_lines, in_length, cudaMemcpyHostToDevice, work);
    minmax_normalize_async(detail::packed<T const>(in, lane.device_in.data()), detail::packed(out, lane.device_out.data()),
                           options, work);

    // Device → host: straight into pinned memory, else through the staging buffer.
    if (out_pinned) {
      detail::copy_lines_async(out.data, out.ld, lane.device_out.data(), out_length, out_lines, out_length,
                               cudaMemcpyDeviceToHost, work);
    } else {
      detail::reserve(lane.staging_out, count);
      detail::copy_lines_async(lane.staging_out.data(), out_length, lane.device_out.data(), out_length, out_lines, out_length,
                               cudaMemcpyDeviceToHost, work);
    }
    // Staging is rewritten next time round and registrations end here: wait for this array.
    bool const staged = !in_pinned || !out_pinned;
    if (staged || in_registration || out_registration) { work.sync(); }
    if (!out_pinned) { detail::copy_lines(out.data, out.ld, lane.staging_out.data(), out_length, out_lines, out_length); }
  }
  work.sync();
}

}  // namespace streamkit
