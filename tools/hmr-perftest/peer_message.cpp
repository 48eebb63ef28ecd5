#include "peer_message.h"

#include <cstring>

#include "byte_codec.h"

namespace hmr::perftest {
namespace {

constexpr uint8_t kMagic[4] = {'H', 'M', 'R', 'P'};

using wire::ByteReader;

// The header followed by `body` (written with a wire::ByteWriter).
std::vector<uint8_t> message(MessageType type, const wire::ByteWriter& body) {
  wire::ByteWriter header;
  header.raw(kMagic);
  header.u16(kPeerMessageVersion);
  header.u16(static_cast<uint16_t>(type));
  header.u32(static_cast<uint32_t>(body.bytes().size()));
  header.raw(body.bytes());
  return header.take();
}

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
  wire::ByteWriter w;
  w.u16(static_cast<uint16_t>(hello.test));
  w.u16(hello.flags);
  w.u64(hello.min_size);
  w.u64(hello.max_size);
  w.u64(hello.iterations);
  w.str(hello.provider);
  w.str(hello.memory);
  return message(MessageType::hello, w);
}

std::vector<uint8_t> encode(const BufferInfo& buffer) {
  wire::ByteWriter w;
  w.u64(buffer.address);
  w.u64(buffer.length);
  w.u64(buffer.mr_mode);
  w.u8(buffer.key_is_raw ? 1 : 0);
  w.str(buffer.key);
  w.str(buffer.fabric_address);
  return message(MessageType::buffer, w);
}

std::vector<uint8_t> encode(const Done& done) {
  wire::ByteWriter w;
  w.u64(done.value);
  return message(MessageType::done, w);
}

std::vector<uint8_t> encode(const Progress& progress) {
  wire::ByteWriter w;
  w.u64(progress.sequence);
  return message(MessageType::progress, w);
}

std::vector<uint8_t> encode(const PeerError& error) {
  std::string reason = error.reason.substr(0, kMaxReasonSize);
  for (char& c : reason) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  if (reason.empty()) reason = "no reason given";
  wire::ByteWriter w;
  w.str(reason);
  return message(MessageType::error, w);
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
  ByteReader r(header.subspan(sizeof kMagic));
  const uint16_t version = r.u16("version");
  const uint16_t type = r.u16("type");
  const uint32_t size = r.u32("body length");
  if (!r.finish(why)) return std::nullopt;
  if (version != kPeerMessageVersion) {
    return reject("version " + std::to_string(version) + ", this hmr-perftest speaks " +
                  std::to_string(kPeerMessageVersion));
  }
  if (type < static_cast<uint16_t>(MessageType::hello) ||
      type > static_cast<uint16_t>(MessageType::progress)) {
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
  ByteReader r(body);
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
  ByteReader r(body);
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
  ByteReader r(body);
  Done done;
  done.value = r.u64("value");
  if (!r.finish(why)) return std::nullopt;
  return done;
}

std::optional<Progress> decode_progress(std::span<const uint8_t> body, std::string* why) {
  ByteReader r(body);
  Progress progress;
  progress.sequence = r.u64("sequence");
  if (!r.finish(why)) return std::nullopt;
  return progress;
}

std::optional<PeerError> decode_error(std::span<const uint8_t> body, std::string* why) {
  ByteReader r(body);
  PeerError error;
  error.reason = r.name("reason", kMaxReasonSize);
  if (error.reason.empty()) r.fail("reason", "is empty");
  if (!r.finish(why)) return std::nullopt;
  return error;
}

}  // namespace hmr::perftest
