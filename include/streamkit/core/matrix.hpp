#pragma once
/// @file matrix.hpp
/// A non-owning view of a 2-D array: rows × cols with a leading dimension, row- or column-major.

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <streamkit/core/config.hpp>
#include <streamkit/core/error.hpp>

namespace streamkit {

/// Storage order of a matrix_ref.
enum class layout {
  row_major,     ///< element (i, j) at data[i * ld + j]; ld ≥ cols
  column_major,  ///< element (i, j) at data[i + j * ld]; ld ≥ rows
};

/// A non-owning view of rows × cols elements of T (const T for read-only views). "Columns" are the
/// features that min-max scaling treats one by one. Index arithmetic is in std::size_t throughout,
/// so views beyond 2^31 elements are fine.
template <class T>
struct matrix_ref {
  T* data = nullptr;  ///< element (0, 0)
  std::size_t rows = 0;  ///< number of rows
  std::size_t cols = 0;  ///< number of columns (features)
  std::size_t ld = 0;  ///< leading dimension (pitch) in elements
  layout order = layout::row_major;  ///< row- or column-major

  /// A dense view (ld = cols for row-major, rows for column-major).
  [[nodiscard]] static matrix_ref dense(T* data, std::size_t rows, std::size_t cols, layout order = layout::row_major) noexcept
  {
    return {data, rows, cols, order == layout::row_major ? cols : rows, order};
  }
  /// Position of element (i, j) from `data`, in elements (host and device).
  [[nodiscard]] STREAMKIT_HOST_DEVICE std::size_t offset(std::size_t i, std::size_t j) const noexcept
  {
    return order == layout::row_major ? i * ld + j : i + j * ld;
  }
  /// Element (i, j), unchecked (host and device).
  [[nodiscard]] STREAMKIT_HOST_DEVICE T& operator()(std::size_t i, std::size_t j) const noexcept { return data[offset(i, j)]; }
  /// Number of elements, rows × cols (pitch not included).
  [[nodiscard]] std::size_t size() const noexcept { return rows * cols; }
  /// Elements spanned from the first to one past the last, pitch included.
  [[nodiscard]] std::size_t extent() const noexcept
  {
    if (rows == 0 || cols == 0) { return 0; }
    return offset(rows - 1, cols - 1) + 1;
  }
  /// A read-only view of the same elements.
  template <class U = T, std::enable_if_t<!std::is_const_v<U>, int> = 0>
  operator matrix_ref<U const>() const noexcept  // NOLINT: implicit by design
  {
    return {data, rows, cols, ld, order};
  }
};

namespace detail {
/// T itself, in a context where template arguments are not deduced: a parameter of type
/// identity_t<matrix_ref<T const>> takes a matrix_ref<T> (converted) once T is deduced elsewhere.
template <class T>
struct identity {
  using type = T;
};
template <class T>
using identity_t = typename identity<T>::type;

/// Throws std::invalid_argument naming `argument` if the view is not well formed.
template <class T>
void expect_matrix(matrix_ref<T> const& m, char const* argument)
{
  STREAMKIT_EXPECTS(m.data != nullptr || m.rows == 0 || m.cols == 0, std::invalid_argument,
                    std::string(argument) + ": null data with " + std::to_string(m.rows) + " x " + std::to_string(m.cols) +
                      " elements");
  std::size_t const minimum = m.order == layout::row_major ? m.cols : m.rows;
  STREAMKIT_EXPECTS(m.ld >= minimum || m.rows == 0 || m.cols == 0, std::invalid_argument,
                    std::string(argument) + ": leading dimension " + std::to_string(m.ld) + " is less than the " +
                      (m.order == layout::row_major ? "width " : "height ") + std::to_string(minimum));
  std::size_t const outer = m.order == layout::row_major ? m.rows : m.cols;
  STREAMKIT_EXPECTS(m.rows == 0 || m.cols == 0 || outer - 1 <= (std::numeric_limits<std::size_t>::max() - minimum) / m.ld,
                    std::invalid_argument,
                    std::string(argument) + ": " + std::to_string(m.rows) + " x " + std::to_string(m.cols) + " elements with a leading dimension of " +
                      std::to_string(m.ld) + " span more than std::size_t can address");
}
}  // namespace detail

}  // namespace streamkit
