#include "peer_message.h"

#include <cstring>

namespace hmr::perftest {
namespace {

constexpr uint8_t kMagic[4] = {'H', 'M', 'R', 'P'};

class Writer {
 public:
  void u8(uint8_t value) { bytes_.push_back(value); }
  void u16(uint16_t value) { little_endian(value, 2); }
  void u32(uint32_t value) { little_endian(value, 4); }
  void u64(uint64_t value) { little_endian(value, 8); }
  void str(std::span<const uint8_t> value) {
    u32(static_cast<uint32_t>(value.size()));
    bytes_.insert(bytes_.end(), value.begin(), value.end());
  }
  void str(const std::string& value) {
    str(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  }

  // The header followed by everything written so far as the body.
  std::vector<uint8_t> message(MessageType type) const {
    Writer header;
    header.bytes_.assign(kMagic, kMagic + sizeof kMagic);
    header.u16(kPeerMessageVersion);
    header.u16(static_cast<uint16_t>(type));
    header.u32(static_cast<uint32_t>(bytes_.size()));
    std::vector<uint8_t> out = header.bytes_;
    out.insert(out.end(), bytes_.begin(), bytes_.end());
    return out;
  }

 private:
  void little_endian(uint64_t value, int size) {
    for (int i = 0; i < size; ++i) bytes_.push_back(static_cast<uint8_t>(value >> (8 * i)));
  }
  std::vector<uint8_t> bytes_;
};

// Reads fields in order; the first failure sticks and names the field, and every later
// read returns zeros, so a decoder can read all fields and check once at the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint8_t u8(const char* field) { return static_cast<uint8_t>(little_endian(field, 1)); }
  uint16_t u16(const char* field) { return static_cast<uint16_t>(little_endian(field, 2)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(little_endian(field, 4)); }
  uint64_t u64(const char* field) { return little_endian(field, 8); }

  std::vector<uint8_t> bytes(const char* field, size_t max_size) {
    const uint32_t size = u32(field);
    if (!error_.empty()) return {};
    if (size > max_size) {
      fail(field, "is " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(max_size) + " allowed");
      return {};
    }
    if (size > remaining()) {
      fail(field, "claims " + std::to_string(size) + " bytes but only " +
                      std::to_string(remaining()) + " follow");
      return {};
    }
    std::vector<uint8_t> out(bytes_.begin() + static_cast<ptrdiff_t>(offset_),
                             bytes_.begin() + static_cast<ptrdiff_t>(offset_ + size));
    offset_ += size;
    return out;
  }

  // A name: printable ASCII only, so it is safe to print and to pass as a C string.
  std::string name(const char* field, size_t max_size) {
    std::vector<uint8_t> raw = bytes(field, max_size);
    for (uint8_t c : raw) {
      if (c < 0x20 || c > 0x7e) {
        fail(field, "contains a byte that is not printable ASCII");
        return {};
      }
    }
    return std::string(raw.begin(), raw.end());
  }

  void fail(const char* field, const std::string& what) {
    if (error_.empty()) error_ = std::string(field) + " " + what;
  }

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
  size_t remaining() const { return bytes_.size() - offset_; }
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

bool valid_test(uint16_t test) {
  return test >= static_cast<uint16_t>(TestKind::write_bw) &&
         test <= static_cast<uint16_t>(TestKind::write_lat);
}

}  // namespace

const char* test_name(TestKind test) {
  switch (test) {
    case TestKind::write_bw: return "write_bw";
    case TestKind::read_bw: return "read_bw";
    case TestKind::write_lat: return "write_lat";
  }
  return "unknown";
}

std::vector<uint8_t> encode(const Hello& hello) {
  Writer w;
  w.u16(static_cast<uint16_t>(hello.test));
  w.u16(hello.flags);
  w.u64(hello.min_size);
  w.u64(hello.max_size);
  w.u64(hello.iterations);
  w.str(hello.provider);
  w.str(hello.memory);
  return w.message(MessageType::hello);
}

std::vector<uint8_t> encode(const BufferInfo& buffer) {
  Writer w;
  w.u64(buffer.address);
  w.u64(buffer.length);
  w.u64(buffer.mr_mode);
  w.u8(buffer.key_is_raw ? 1 : 0);
  w.str(buffer.key);
  w.str(buffer.fabric_address);
  return w.message(MessageType::buffer);
}

std::vector<uint8_t> encode(const Done& done) {
  Writer w;
  w.u64(done.value);
  return w.message(MessageType::done);
}

std::optional<MessageType> decode_header(std::span<const uint8_t> header, size_t* body_size,
                                         std::string* why) {
  auto reject = [why](std::string reason) -> std::optional<MessageType> {
    if (why != nullptr) *why = "peer message header rejected: " + std::move(reason);
    return std::nullopt;
  };
  if (header.size() != kPeerHeaderSize) return reject("wrong header size");
  if (std::memcmp(header.data(), kMagic, sizeof kMagic) != 0) {
    return reject("bad magic (the peer is not hmr-perftest)");
  }
  Reader r(header.subspan(sizeof kMagic));
  const uint16_t version = r.u16("version");
  const uint16_t type = r.u16("type");
  const uint32_t size = r.u32("body length");
  if (!r.finish(why)) return std::nullopt;
  if (version != kPeerMessageVersion) {
    return reject("version " + std::to_string(version) + ", this hmr-perftest speaks " +
                  std::to_string(kPeerMessageVersion));
  }
  if (type < static_cast<uint16_t>(MessageType::hello) ||
      type > static_cast<uint16_t>(MessageType::done)) {
    return reject("unknown message type " + std::to_string(type));
  }
  if (size > kMaxBodySize) {
    return reject("body of " + std::to_string(size) + " bytes is over the limit of " +
                  std::to_string(kMaxBodySize));
  }
  *body_size = size;
  return static_cast<MessageType>(type);
}

std::optional<Hello> decode_hello(std::span<const uint8_t> body, std::string* why) {
  Reader r(body);
  Hello hello;
  const uint16_t test = r.u16("test");
  hello.flags = r.u16("flags");
  hello.min_size = r.u64("min_size");
  hello.max_size = r.u64("max_size");
  hello.iterations = r.u64("iterations");
  hello.provider = r.name("provider", kMaxProviderName);
  hello.memory = r.name("memory", kMaxMemoryName);
  if (!valid_test(test)) r.fail("test", "is not a known test (" + std::to_string(test) + ")");
  if (hello.min_size == 0 || hello.min_size > hello.max_size) {
    r.fail("min_size", "must be at least 1 and at most max_size");
  }
  if (hello.max_size > kMaxMessageSize) r.fail("max_size", "is over the 4 GiB limit");
  if (hello.iterations == 0 || hello.iterations > kMaxIterations) {
    r.fail("iterations", "must be between 1 and 2^32");
  }
  if (hello.provider.empty()) r.fail("provider", "is empty");
  if (!r.finish(why)) return std::nullopt;
  hello.test = static_cast<TestKind>(test);
  return hello;
}

std::optional<BufferInfo> decode_buffer(std::span<const uint8_t> body, std::string* why) {
  Reader r(body);
  BufferInfo buffer;
  buffer.address = r.u64("address");
  buffer.length = r.u64("length");
  buffer.mr_mode = r.u64("mr_mode");
  const uint8_t raw = r.u8("key_is_raw");
  buffer.key = r.bytes("key", kMaxKeySize);
  buffer.fabric_address = r.bytes("fabric_address", kMaxFabricAddress);
  if (raw > 1) r.fail("key_is_raw", "must be 0 or 1");
  buffer.key_is_raw = raw == 1;
  if (buffer.length == 0 || buffer.length > kMaxMessageSize) {
    r.fail("length", "must be between 1 byte and 4 GiB");
  }
  if (buffer.address + buffer.length < buffer.address) r.fail("address", "+ length overflows");
  if (buffer.key.empty()) r.fail("key", "is empty");
  if (!buffer.key_is_raw && buffer.key.size() != sizeof(uint64_t)) {
    r.fail("key", "must be 8 bytes unless it is a raw key");
  }
  if (buffer.fabric_address.empty()) r.fail("fabric_address", "is empty");
  if (!r.finish(why)) return std::nullopt;
  return buffer;
}

std::optional<Done> decode_done(std::span<const uint8_t> body, std::string* why) {
  Reader r(body);
  Done done;
  done.value = r.u64("value");
  if (!r.finish(why)) return std::nullopt;
  return done;
}

}  // namespace hmr::perftest
