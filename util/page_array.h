// A zero-filled array of trivially constructible T for data read at random addresses over
// many megabytes (the cache's index table and entry slabs).  From 1 MiB up it is mapped on
// its own, 2 MiB-aligned, and offered to the kernel as transparent huge pages
// (MADV_HUGEPAGE), so that a lookup among a million regions misses the cache but not also
// the TLB.  Smaller arrays come from the heap.  Where the kernel gives no huge pages the
// array is simply made of 4 KiB pages.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace hmr {

namespace page_array_detail {
inline constexpr size_t kHugePage = size_t{2} << 20;
// nullptr when the mapping fails (the caller then uses the heap).
void* map_huge(size_t bytes);
void unmap(void* address, size_t bytes);
}  // namespace page_array_detail

template <typename T>
class PageArray {
  static_assert(std::is_trivially_destructible_v<T>, "mapped storage is never destroyed");

 public:
  PageArray() = default;
  explicit PageArray(size_t count) : count_(count) {
    const size_t bytes = count * sizeof(T);
    // From half a huge page up: the rest of the page is a small price for not missing the TLB.
    if (bytes >= page_array_detail::kHugePage / 2) {
      data_ = static_cast<T*>(page_array_detail::map_huge(bytes));
      mapped_ = data_ != nullptr;
    }
    if (data_ == nullptr) data_ = new T[count]();
  }
  PageArray(PageArray&& other) noexcept { swap(other); }
  PageArray& operator=(PageArray&& other) noexcept {
    PageArray(std::move(other)).swap(*this);
    return *this;
  }
  ~PageArray() {
    if (mapped_) {
      page_array_detail::unmap(data_, count_ * sizeof(T));
    } else {
      delete[] data_;
    }
  }

  T& operator[](size_t i) const { return data_[i]; }
  T* get() const { return data_; }
  size_t size() const { return count_; }

 private:
  void swap(PageArray& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    std::swap(mapped_, other.mapped_);
  }

  T* data_ = nullptr;
  size_t count_ = 0;
  bool mapped_ = false;
};

}  // namespace hmr
