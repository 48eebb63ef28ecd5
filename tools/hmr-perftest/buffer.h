// The memory hmr-perftest moves: host pages, or device memory of one iface (--mem cuda:0),
// allocated through hmr so the tool needs no vendor SDK.
#pragma once

#include <hmr/hmr.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace hmr::perftest {

class Buffer {
 public:
  static std::optional<Buffer> allocate(const std::string& memory, size_t size, std::string* why);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&&) = delete;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Only host memory is touched by the CPU: patterns, checks and latency polling need it.
  bool host() const { return iface_ == HMR_HMEM_SYSTEM; }

  // Writes the test pattern (byte i = f(i)) over [0, len); host memory only.
  void fill_pattern(size_t len);
  bool matches_pattern(size_t len) const;
  uint64_t checksum(size_t len) const;

 private:
  Buffer(uint8_t* data, size_t size, hmr_hmem_iface iface)
      : data_(data), size_(size), iface_(iface) {}
  uint8_t* data_;
  size_t size_;
  hmr_hmem_iface iface_;
};

}  // namespace hmr::perftest
