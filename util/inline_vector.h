// A vector of trivially copyable T that keeps up to N elements inside itself and moves to the
// heap only beyond them.  For a registration's segments: nearly every request has one, and a
// miss should not pay an allocation and a free just to hold it.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>

namespace hmr {

template <typename T, size_t N>
class InlineVector {
  static_assert(std::is_trivially_copyable_v<T>, "elements are copied as bytes");
  static_assert(N > 0);

 public:
  InlineVector() = default;
  InlineVector(const InlineVector& other) { assign(other.begin(), other.end()); }
  InlineVector(InlineVector&& other) noexcept { take(other); }
  InlineVector& operator=(const InlineVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  InlineVector& operator=(InlineVector&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  InlineVector& operator=(std::span<const T> elements) {
    assign(elements.data(), elements.data() + elements.size());
    return *this;
  }

  void assign(const T* first, const T* last) {
    const size_t count = static_cast<size_t>(last - first);
    if (count > capacity_) {  // (first may point into our own storage only when it fits)
      heap_ = std::make_unique_for_overwrite<T[]>(count);
      capacity_ = count;
    }
    if (count != 0) std::memmove(data(), first, count * sizeof(T));
    size_ = count;
  }
  void push_back(const T& element) {
    const T copy = element;  // it may live in the storage grow() frees
    if (size_ == capacity_) grow();
    data()[size_++] = copy;
  }
  void clear() { size_ = 0; }

  T* data() { return heap_ ? heap_.get() : inline_; }
  const T* data() const { return heap_ ? heap_.get() : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  operator std::span<const T>() const { return {data(), size_}; }

 private:
  void grow() {
    const size_t capacity = 2 * capacity_;
    auto bigger = std::make_unique_for_overwrite<T[]>(capacity);
    std::memcpy(bigger.get(), data(), size_ * sizeof(T));
    heap_ = std::move(bigger);
    capacity_ = capacity;
  }
  void take(InlineVector& other) {
    heap_ = std::move(other.heap_);
    capacity_ = heap_ ? other.capacity_ : N;
    size_ = other.size_;
    if (!heap_) std::memcpy(inline_, other.inline_, size_ * sizeof(T));
    other.capacity_ = N;
    other.size_ = 0;
  }

  T inline_[N];
  std::unique_ptr<T[]> heap_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace hmr
