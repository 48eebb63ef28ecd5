#include "control_message.h"

#include <cstring>

#include "byte_codec.h"

namespace hmr::nccl {
namespace {

constexpr uint8_t kMagic[4] = {'H', 'M', 'R', 'C'};
constexpr size_t kHeaderSize = 16;

// The variant's index is the type on the wire, plus one (0 is never a valid type).
uint16_t type_of(const ControlMessage& message) { return static_cast<uint16_t>(message.index() + 1); }

template <typename Connection>
void write_connection(wire::ByteWriter& w, const Connection& m) {
  w.u64(m.nonce);
  w.str(m.address);
  w.u64(m.port);
  w.u32(m.pid);
  w.u64(m.process_space);
  w.u32(m.eager_max);
  w.u32(m.eager_credits);
}
void write_body(wire::ByteWriter& w, const ConnectRequest& m) { write_connection(w, m); }
void write_body(wire::ByteWriter& w, const ConnectAccept& m) { write_connection(w, m); }
void write_body(wire::ByteWriter& w, const ReceiveAnnouncement& m) {
  w.u8(m.slot);
  w.u8(m.generation);
  w.u8(m.count);
  for (size_t i = 0; i < m.count && i < kMaxRecvs; ++i) {
    w.u64(m.buffers[i].address);
    w.u64(m.buffers[i].size);
    w.u64(m.buffers[i].key);
    w.u32(static_cast<uint32_t>(m.buffers[i].tag));
    w.u32(m.buffers[i].ordinal);
  }
}
void write_body(wire::ByteWriter& w, const SendFailure& m) {
  w.u8(m.slot);
  w.u8(m.generation);
  w.u8(m.index);
  w.u32(static_cast<uint32_t>(m.reason));
  w.u64(m.size);
}
void write_body(wire::ByteWriter& w, const EagerCredit& m) {
  w.u8(m.count);
  for (size_t i = 0; i < m.count && i < kMaxRecvs; ++i) {
    w.u32(static_cast<uint32_t>(m.tags[i].tag));
    w.u32(m.tags[i].consumed);
  }
}
void write_body(wire::ByteWriter& w, const EagerFailure& m) {
  w.u32(static_cast<uint32_t>(m.tag));
  w.u32(m.ordinal);
  w.u32(static_cast<uint32_t>(m.reason));
  w.u64(m.size);
}

void write_body(wire::ByteWriter& w, const ConnectReady& m) { w.u64(m.nonce); }
void write_body(wire::ByteWriter& w, const ConnectRefused& m) {
  w.u64(m.nonce);
  w.str(refusal_reason(m.reason));  // (what decode accepts, whoever filled it)
}
void write_body(wire::ByteWriter& w, const SendClosed& m) { w.u64(m.delivered); }

template <typename Connection>
Connection read_connection(wire::ByteReader& r) {
  Connection m;
  m.nonce = r.u64("nonce");
  m.address = r.bytes("address", kMaxFabricAddress);
  m.port = r.u64("port");
  m.pid = r.u32("pid");
  m.process_space = r.u64("process space");
  m.eager_max = r.u32("eager max");
  m.eager_credits = r.u32("eager credits");
  if (m.eager_max > kMaxEagerSize) r.fail("eager max", "is over " + std::to_string(kMaxEagerSize));
  if (m.eager_credits > kMaxEagerCredits) {
    r.fail("eager credits", "is over " + std::to_string(kMaxEagerCredits));
  }
  if (m.nonce == 0) r.fail("nonce", "is 0");
  if (m.address.empty()) r.fail("address", "is empty");
  return m;
}

ReceiveAnnouncement read_announcement(wire::ByteReader& r) {
  ReceiveAnnouncement m;
  m.slot = r.u8("slot");
  m.generation = r.u8("generation");
  m.count = r.u8("count");
  if (m.slot >= kMaxRequests) r.fail("slot", "is out of range");
  if (m.count == 0 || m.count > kMaxRecvs) {
    r.fail("count", "is not between 1 and " + std::to_string(kMaxRecvs));
    return m;
  }
  for (size_t i = 0; i < m.count; ++i) {
    AnnouncedBuffer& b = m.buffers[i];
    b.address = r.u64("buffer address");
    b.size = r.u64("buffer size");
    b.key = r.u64("buffer key");
    b.tag = static_cast<int32_t>(r.u32("buffer tag"));
    b.ordinal = r.u32("buffer ordinal");
    if (b.size > kMaxMessageSize) r.fail("buffer size", "is over the 1 TiB limit");
    if (b.address + b.size < b.address) r.fail("buffer address", "+ size overflows");
  }
  return m;
}

SendFailure read_failure(wire::ByteReader& r) {
  SendFailure m;
  m.slot = r.u8("slot");
  m.generation = r.u8("generation");
  m.index = r.u8("index");
  const uint32_t reason = r.u32("reason");
  m.size = r.u64("size");
  if (m.slot >= kMaxRequests) r.fail("slot", "is out of range");
  if (m.index >= kMaxRecvs) r.fail("index", "is out of range");
  if (reason != static_cast<uint32_t>(SendFailureReason::too_large) &&
      reason != static_cast<uint32_t>(SendFailureReason::write_failed)) {
    r.fail("reason", "is unknown (" + std::to_string(reason) + ")");
  }
  m.reason = static_cast<SendFailureReason>(reason);
  return m;
}

EagerCredit read_credit(wire::ByteReader& r) {
  EagerCredit m;
  m.count = r.u8("count");
  if (m.count == 0 || m.count > kMaxRecvs) {
    r.fail("count", "is not between 1 and " + std::to_string(kMaxRecvs));
    return m;
  }
  for (size_t i = 0; i < m.count; ++i) {
    m.tags[i].tag = static_cast<int32_t>(r.u32("tag"));
    m.tags[i].consumed = r.u32("consumed");
  }
  return m;
}

EagerFailure read_eager_failure(wire::ByteReader& r) {
  EagerFailure m;
  m.tag = static_cast<int32_t>(r.u32("tag"));
  m.ordinal = r.u32("ordinal");
  const uint32_t reason = r.u32("reason");
  m.size = r.u64("size");
  if (reason != static_cast<uint32_t>(EagerFailureReason::send_failed)) {
    r.fail("reason", "is unknown (" + std::to_string(reason) + ")");
  }
  m.reason = static_cast<EagerFailureReason>(reason);
  if (m.size > kMaxEagerSize) r.fail("size", "is over the eager limit");
  return m;
}

ConnectReady read_ready(wire::ByteReader& r) {
  ConnectReady m;
  m.nonce = r.u64("nonce");
  if (m.nonce == 0) r.fail("nonce", "is 0");
  return m;
}

ConnectRefused read_refused(wire::ByteReader& r) {
  ConnectRefused m;
  m.nonce = r.u64("nonce");
  m.reason = r.name("reason", kMaxRefusalReason);
  if (m.nonce == 0) r.fail("nonce", "is 0");
  return m;
}

SendClosed read_closed(wire::ByteReader& r) {
  SendClosed m;
  m.delivered = r.u64("delivered");
  return m;
}

}  // namespace

namespace {

void write_message(wire::ByteWriter& w, const ControlMessage& message, uint64_t port) {
  w.raw(kMagic);
  w.u16(kControlVersion);
  w.u16(type_of(message));
  w.u64(port);
  std::visit([&w](const auto& m) { write_body(w, m); }, message);
}

}  // namespace

std::vector<uint8_t> encode(const ControlMessage& message, uint64_t port) {
  wire::ByteWriter w;
  write_message(w, message, port);
  return w.take();
}

size_t encode_into(const ControlMessage& message, uint64_t port, std::span<uint8_t> out) {
  wire::ByteWriter w(out);
  write_message(w, message, port);
  return w.fits() ? w.size() : 0;
}

std::optional<ControlMessage> decode_control_message(std::span<const uint8_t> bytes,
                                                     std::string* why) {
  auto reject = [why](const std::string& reason) -> std::optional<ControlMessage> {
    if (why != nullptr) *why = "control message rejected: " + reason;
    return std::nullopt;
  };
  if (bytes.size() < kHeaderSize) return reject("shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return reject("bad magic");
  wire::ByteReader r(bytes.subspan(sizeof kMagic));
  const uint16_t version = r.u16("version");
  const uint16_t type = r.u16("type");
  (void)r.u64("port");  // where the message was routed to: control_message_port()
  if (version != kControlVersion) {
    return reject("version " + std::to_string(version) + ", this plugin speaks " +
                  std::to_string(kControlVersion));
  }
  std::optional<ControlMessage> message;
  switch (type) {
    case 1: message = read_connection<ConnectRequest>(r); break;
    case 2: message = read_connection<ConnectAccept>(r); break;
    case 3: message = read_announcement(r); break;
    case 4: message = read_failure(r); break;
    case 5: message = read_credit(r); break;
    case 6: message = read_eager_failure(r); break;
    case 7: message = read_ready(r); break;
    case 8: message = read_refused(r); break;
    case 9: message = read_closed(r); break;
    default: return reject("unknown type " + std::to_string(type));
  }
  std::string reason;
  if (!r.finish(&reason)) return reject(reason);
  return message;
}

std::optional<uint64_t> control_message_port(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return std::nullopt;
  }
  wire::ByteReader r(bytes.subspan(sizeof kMagic, kHeaderSize - sizeof kMagic));
  if (r.u16("version") != kControlVersion) return std::nullopt;
  (void)r.u16("type");
  return r.u64("port");
}

std::string refusal_reason(const std::string& text) {
  std::string fit = text.substr(0, kMaxRefusalReason);
  for (char& c : fit) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return fit;
}

const char* describe(SendFailureReason reason) {
  switch (reason) {
    case SendFailureReason::too_large: return "the message is larger than the posted buffer";
    case SendFailureReason::write_failed: return "the RMA write into the posted buffer failed";
  }
  return "unknown";
}

const char* describe(EagerFailureReason reason) {
  switch (reason) {
    case EagerFailureReason::send_failed: return "the eager send failed";
  }
  return "unknown";
}

}  // namespace hmr::nccl
