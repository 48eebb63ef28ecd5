// Little-endian field codec for the byte sequences hmr's tools and plugins exchange with peers
// (hmr-perftest's out-of-band messages, the NCCL net plugin's listen handle and control
// messages).  A peer is another process, possibly hostile: the reader never reads past its
// span, bounds every length it is told, and remembers the first failure with the field's name
// so a decoder reads all fields and checks once, rejecting the message as a whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hmr::wire {

class ByteWriter {
 public:
  // Into a vector of its own (take()).
  ByteWriter() = default;
  // Into `into`, a fixed buffer (a registered send buffer: no allocation per message); what
  // does not fit is counted but not written, and fits() says so.
  explicit ByteWriter(std::span<uint8_t> into) : into_(into), fixed_(true) {}

  void u8(uint8_t value) { put(value); }
  void u16(uint16_t value) { little_endian(value, 2); }
  void u32(uint32_t value) { little_endian(value, 4); }
  void u64(uint64_t value) { little_endian(value, 8); }
  // Bytes as they are, with no length in front (fixed-size fields such as a magic).
  void raw(std::span<const uint8_t> value) {
    for (const uint8_t byte : value) put(byte);
  }
  // A u32 length, then the bytes.
  void str(std::span<const uint8_t> value) {
    u32(static_cast<uint32_t>(value.size()));
    raw(value);
  }
  void str(const std::string& value) {
    str(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  }

  // Bytes written (or, into a fixed buffer, that would have been).
  size_t size() const { return fixed_ ? size_ : bytes_.size(); }
  bool fits() const { return !fixed_ || size_ <= into_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  void put(uint8_t value) {
    if (!fixed_) {
      bytes_.push_back(value);
      return;
    }
    if (size_ < into_.size()) into_[size_] = value;
    ++size_;
  }
  void little_endian(uint64_t value, int size) {
    for (int i = 0; i < size; ++i) put(static_cast<uint8_t>(value >> (8 * i)));
  }
  std::vector<uint8_t> bytes_;
  std::span<uint8_t> into_;
  size_t size_ = 0;
  bool fixed_ = false;
};

// Reads fields in order; the first failure sticks and names the field, and every later read
// returns zeros.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint8_t u8(const char* field) { return static_cast<uint8_t>(little_endian(field, 1)); }
  uint16_t u16(const char* field) { return static_cast<uint16_t>(little_endian(field, 2)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(little_endian(field, 4)); }
  uint64_t u64(const char* field) { return little_endian(field, 8); }

  // `size` bytes as they are (a fixed-size field); empty on failure.
  std::span<const uint8_t> raw(const char* field, size_t size) {
    if (!error_.empty()) return {};
    if (size > remaining()) {
      fail(field, "needs " + std::to_string(size) + " bytes but only " +
                      std::to_string(remaining()) + " follow");
      return {};
    }
    std::span<const uint8_t> out = bytes_.subspan(offset_, size);
    offset_ += size;
    return out;
  }

  // A u32 length of at most `max_size`, then that many bytes.
  std::vector<uint8_t> bytes(const char* field, size_t max_size) {
    const uint32_t size = u32(field);
    if (!error_.empty()) return {};
    if (size > max_size) {
      fail(field, "is " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(max_size) + " allowed");
      return {};
    }
    std::span<const uint8_t> out = raw(field, size);
    return std::vector<uint8_t>(out.begin(), out.end());
  }

  // A name: printable ASCII only, so it is safe to print and to pass as a C string.
  std::string name(const char* field, size_t max_size) {
    std::vector<uint8_t> raw_name = bytes(field, max_size);
    for (uint8_t c : raw_name) {
      if (c < 0x20 || c > 0x7e) {
        fail(field, "contains a byte that is not printable ASCII");
        return {};
      }
    }
    return std::string(raw_name.begin(), raw_name.end());
  }

  void fail(const char* field, const std::string& what) {
    if (error_.empty()) error_ = std::string(field) + " " + what;
  }
  bool failed() const { return !error_.empty(); }
  size_t remaining() const { return bytes_.size() - offset_; }

  // True when every field was read and nothing is left over; else `why` says what failed.
  bool finish(std::string* why) {
    if (error_.empty() && remaining() != 0) {
      error_ = std::to_string(remaining()) + " unexpected bytes after the last field";
    }
    if (error_.empty()) return true;
    if (why != nullptr) *why = error_;
    return false;
  }

 private:
  uint64_t little_endian(const char* field, size_t size) {
    if (!error_.empty()) return 0;
    if (remaining() < size) {
      fail(field, "is cut short (message truncated)");
      return 0;
    }
    uint64_t value = 0;
    for (size_t i = 0; i < size; ++i) value |= uint64_t{bytes_[offset_ + i]} << (8 * i);
    offset_ += size;
    return value;
  }

  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
  std::string error_;
};

}  // namespace hmr::wire
