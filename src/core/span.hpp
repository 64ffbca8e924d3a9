// A read-only view of contiguous values (C++17 has no std::span): what the statistics core takes so
// that callers holding memory it does not own (a numpy buffer in the Python module) pass it without a
// copy. Converts implicitly from std::vector, so vector callers need no change.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

namespace arcal {

template <class T>
class Span {
 public:
  Span() = default;
  Span(const T* data, std::size_t size) : data_(data), size_(size) {}
  Span(const std::vector<T>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT: implicit on purpose
  /// A braced list as an argument (it lives until the call returns; never keep such a span). GCC's
  /// -Winit-list-lifetime warns because a stored span would dangle; as a parameter it cannot.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  Span(std::initializer_list<T> l) : data_(l.begin()), size_(l.size()) {}  // NOLINT
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace arcal
