#pragma once
/// @file minmax_dispatch.cuh
/// Host-to-host column min-max scaling of a batch of arrays, each with its own shape, spread over a
/// dispatcher's GPUs and streams: every array is cut into chunks of whole columns, and each chunk
/// goes host → device, through minmax_normalize, and back on one stream, the copies of a device's
/// chunks queued one after another in each direction so that both directions and compute overlap.
/// Inputs and outputs in pinned memory go straight to DMA; pageable ones are staged through each
/// stream's pinned buffers by that stream's host thread, or page-locked in place
/// (pageable_transfer). Device and staging buffers belong to the dispatcher's workspaces: after the
/// first batch nothing is allocated.

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/detail/staging.hpp>
#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/memory/pinned_buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
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

/// A host matrix as lines (rows of a row-major, columns of a column-major matrix).
template <class T>
host_lines<T> host_lines_of(matrix_ref<T> const& m, bool pinned) noexcept
{
  bool const rows = m.order == layout::row_major;
  return {m.data, rows ? m.rows : m.cols, rows ? m.cols : m.rows, m.ld, pinned};
}

/// The same matrix, densely packed (ld = line length) at `data`.
template <class T, class U>
matrix_ref<T> packed(matrix_ref<U> const& m, T* data) noexcept
{
  return matrix_ref<T>::dense(data, m.rows, m.cols, m.order);
}

}  // namespace detail

/// Chunk sizes dispatch_minmax_normalize picks when given none, measured fastest for 18 arrays of
/// 60 × 98450 doubles on an H100 (docs/performance.md): arrays staged through pinned buffers
/// (pageable, pageable_transfer::stage), and arrays in pinned or registered memory.
inline constexpr std::size_t staged_chunk_bytes = std::size_t{4} << 20;
/// The chunk size for arrays in pinned or registered memory; see staged_chunk_bytes.
inline constexpr std::size_t pinned_chunk_bytes = std::size_t{8} << 20;

namespace detail {

/// Columns [begin, end) of array `array`: one chunk of the host-to-host pipeline.
struct column_chunk {
  std::size_t array;
  std::size_t begin;
  std::size_t end;
};

/// Cuts every non-empty array k into runs of whole columns of at most about `chunk_bytes[k]` (at
/// least one column each), of nearly equal widths, rounded to multiples of 32 columns where wider.
template <class T>
std::vector<column_chunk> column_chunks(std::vector<matrix_ref<T const>> const& arrays, std::vector<std::size_t> const& chunk_bytes)
{
  std::vector<column_chunk> chunks;
  for (std::size_t k = 0; k < arrays.size(); ++k) {
    std::size_t const rows = arrays[k].rows, cols = arrays[k].cols;
    if (rows == 0 || cols == 0) { continue; }
    std::size_t const widest = std::max<std::size_t>(1, chunk_bytes[k] / (rows * sizeof(T)));
    std::size_t const count = (cols + widest - 1) / widest;
    std::size_t const align = cols / count >= 64 ? 32 : 1;
    for (std::size_t c = 0; c < count; ++c) {
      std::size_t const begin = c * cols / count / align * align;
      std::size_t const end = c + 1 == count ? cols : (c + 1) * cols / count / align * align;
      chunks.push_back({k, begin, end});
    }
  }
  return chunks;
}

/// Columns [begin, end) of m.
template <class T>
matrix_ref<T> columns_of(matrix_ref<T> const& m, std::size_t begin, std::size_t end) noexcept
{
  return {m.data + m.offset(0, begin), m.rows, end - begin, m.ld, m.order};
}

/// A memory resource over one slot of a stream's workspace, for minmax_normalize_async's scratch
/// (one buffer per call, used on the workspace's stream and released before that stream's next
/// chunk): the chunks of a stream reuse it, so repeated batches allocate nothing after the first,
/// and the memory comes from the dispatcher's resource for the device, as every other buffer does.
class workspace_slot_resource {
 public:
  workspace_slot_resource(stream_workspace& workspace, std::size_t slot) noexcept : workspace_(&workspace), slot_(slot) {}
  void* allocate_async(std::size_t bytes, std::size_t, cuda::stream_ref) { return workspace_->device<std::byte>(bytes, slot_); }
  void deallocate_async(void*, std::size_t, std::size_t, cuda::stream_ref) noexcept {}  // kept by the workspace
  void* allocate(std::size_t bytes, std::size_t = device_alignment) { return workspace_->device<std::byte>(bytes, slot_); }
  void deallocate(void*, std::size_t, std::size_t = device_alignment) noexcept {}
  [[nodiscard]] bool operator==(workspace_slot_resource const& other) const noexcept
  {
    return workspace_ == other.workspace_ && slot_ == other.slot_;
  }
  [[nodiscard]] bool operator!=(workspace_slot_resource const& other) const noexcept { return !(*this == other); }
  friend void get_property(workspace_slot_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  stream_workspace* workspace_;
  std::size_t slot_;
};

}  // namespace detail

/// Scales inputs[k] into outputs[k] (host memory; outputs[k] may equal inputs[k]) and waits. Each
/// array is cut into chunks of whole columns of at most about `chunk_bytes` (one column at least;
/// 0 picks staged_chunk_bytes for an array staged in either direction, else pinned_chunk_bytes),
/// handed out to the dispatcher's streams, so that a large array is copied in, scaled and copied
/// back in pieces that overlap, and device and staging memory per stream stay near 2 × chunk_bytes.
/// Register_in_place page-locks each pageable array once, when its first chunk starts, until the
/// call returns.
/// @throws std::invalid_argument for bad shapes or options (before anything is written);
/// dispatch_error if a chunk fails (naming the device, the array and its columns; the original
/// exception nested in original()).
template <class T>
void dispatch_minmax_normalize(dispatcher& workers, std::vector<matrix_ref<T const>> const& inputs,
                               std::vector<matrix_ref<T>> const& outputs, minmax_options<T> const& options = {},
                               pageable_transfer pageable = pageable_transfer::stage, std::size_t chunk_bytes = 0)
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
  // Whether each array's input and output are page-locked: asked once per array, not per chunk.
  struct page_locked {
    bool in;
    bool out;
  };
  std::vector<page_locked> pinned(inputs.size());
  std::vector<std::size_t> sizes(inputs.size(), chunk_bytes);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    pinned[k] = {is_pinned(inputs[k].data), is_pinned(outputs[k].data)};
    bool const staged = pageable == pageable_transfer::stage && !(pinned[k].in && pinned[k].out);
    if (chunk_bytes == 0) { sizes[k] = staged ? staged_chunk_bytes : pinned_chunk_bytes; }
  }
  std::vector<detail::column_chunk> const chunks = detail::column_chunks(inputs, sizes);
  // Registrations, made by the first chunk of each array and kept until every chunk has run.
  std::vector<std::once_flag> registered(pageable == pageable_transfer::register_in_place ? inputs.size() : 0);
  std::vector<host_registration> registrations(registered.size() * 2);
  auto const scale_chunk = [&](chunk_context& context, detail::column_chunk const& chunk) {
    matrix_ref<T const> const in = detail::columns_of(inputs[chunk.array], chunk.begin, chunk.end);
    matrix_ref<T> const out = detail::columns_of(outputs[chunk.array], chunk.begin, chunk.end);
    bool in_pinned = pinned[chunk.array].in;
    bool out_pinned = pinned[chunk.array].out;
    if (pageable == pageable_transfer::register_in_place) {
      std::call_once(registered[chunk.array], [&] {
        matrix_ref<T const> const whole_in = inputs[chunk.array];
        matrix_ref<T> const whole_out = outputs[chunk.array];
        if (!in_pinned) { registrations[2 * chunk.array] = host_registration(const_cast<T*>(whole_in.data), whole_in.extent() * sizeof(T)); }
        if (!out_pinned) { registrations[2 * chunk.array + 1] = host_registration(whole_out.data, whole_out.extent() * sizeof(T)); }
      });
      in_pinned = out_pinned = true;
    }
    std::size_t const count = in.rows * in.cols;
    T* const device_in = context.workspace.device<T>(count, 0);
    T* const device_out = context.workspace.device<T>(count, 1);
    detail::copy_to_device(context, detail::host_lines_of(in, in_pinned), device_in, 0);
    detail::workspace_slot_resource scratch(context.workspace, 2);  // the two-pass path's 5 x cols values
    minmax_normalize_async(detail::packed<T const>(in, device_in), detail::packed(out, device_out), options, context.stream, nullptr,
                           nullptr, device_resource_ref(scratch));
    detail::copy_to_host<T> const back(context, device_out, detail::host_lines_of(out, out_pinned), 1);
    context.stream.sync();
    back.finish();
  };
  workers.run(chunks.size(), 1, [&](chunk_context& context) {
    detail::column_chunk const& chunk = chunks[context.items.begin];
    try {
      scale_chunk(context, chunk);
    } catch (...) {
      // The dispatcher names the chunk's index; say which array and columns that is.
      std::throw_with_nested(std::runtime_error("inputs[" + std::to_string(chunk.array) + "], columns [" + std::to_string(chunk.begin) +
                                                ", " + std::to_string(chunk.end) + "): " + detail::describe(std::current_exception())));
    }
  });
}

}  // namespace streamkit
