// hmr-perftest's out-of-band messages: what a well-behaved peer sends round-trips, and what a
// malformed or hostile one sends is rejected with a reason, never used.
#include "peer_message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "byte_codec.h"
#include "peer_socket.h"

namespace hmr::perftest {
namespace {

std::span<const uint8_t> body_of(const std::vector<uint8_t>& message) {
  return std::span<const uint8_t>(message).subspan(kPeerHeaderSize);
}

Hello sample_hello() {
  Hello hello;
  hello.test = TestKind::read_bw;
  hello.flags = 3;
  hello.min_size = 8;
  hello.max_size = 1 << 20;
  hello.iterations = 1000;
  hello.provider = "tcp;ofi_rxm";
  hello.memory = "cuda:1";
  return hello;
}

BufferInfo sample_buffer() {
  BufferInfo buffer;
  buffer.address = 0x7f0000001000;
  buffer.length = 1 << 20;
  buffer.mr_mode = 0x10;
  buffer.key = {1, 2, 3, 4, 5, 6, 7, 8};
  buffer.fabric_address = {10, 20, 30};
  return buffer;
}

// Overwrites the little-endian u32 at `offset` of a whole message.
void poke_u32(std::vector<uint8_t>& message, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i) message[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}

TEST(PeerMessage, HelloRoundTrips) {
  const std::vector<uint8_t> message = encode(sample_hello());
  size_t body = 0;
  std::string why;
  ASSERT_EQ(decode_header(std::span(message).first(kPeerHeaderSize), &body, &why),
            MessageType::hello)
      << why;
  EXPECT_EQ(body, message.size() - kPeerHeaderSize);
  std::optional<Hello> decoded = decode_hello(body_of(message), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(decoded->test, TestKind::read_bw);
  EXPECT_EQ(decoded->flags, 3);
  EXPECT_EQ(decoded->min_size, 8u);
  EXPECT_EQ(decoded->max_size, 1u << 20);
  EXPECT_EQ(decoded->iterations, 1000u);
  EXPECT_EQ(decoded->provider, "tcp;ofi_rxm");
  EXPECT_EQ(decoded->memory, "cuda:1");
}

TEST(PeerMessage, BufferAndDoneRoundTrip) {
  std::string why;
  const std::vector<uint8_t> message = encode(sample_buffer());
  std::optional<BufferInfo> decoded = decode_buffer(body_of(message), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(decoded->address, 0x7f0000001000u);
  EXPECT_EQ(decoded->length, 1u << 20);
  EXPECT_EQ(decoded->mr_mode, 0x10u);
  EXPECT_FALSE(decoded->key_is_raw);
  EXPECT_EQ(decoded->key, sample_buffer().key);
  EXPECT_EQ(decoded->fabric_address, sample_buffer().fabric_address);

  const std::vector<uint8_t> done = encode(Done{0xabcdef});
  std::optional<Done> decoded_done = decode_done(body_of(done), &why);
  ASSERT_TRUE(decoded_done) << why;
  EXPECT_EQ(decoded_done->value, 0xabcdefu);
}

// Version 3: the client of a bandwidth test tells the server it still moves bytes.
TEST(PeerMessage, ProgressRoundTripsAndIsExact) {
  std::string why;
  const std::vector<uint8_t> message = encode(Progress{7});
  size_t body = 0;
  EXPECT_EQ(decode_header(std::span(message).first(kPeerHeaderSize), &body, &why),
            MessageType::progress)
      << why;
  std::optional<Progress> decoded = decode_progress(body_of(message), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(decoded->sequence, 7u);
  std::vector<uint8_t> longer(body_of(message).begin(), body_of(message).end());
  longer.push_back(0);
  EXPECT_FALSE(decode_progress(longer, &why));
  EXPECT_FALSE(decode_progress(std::span(longer).first(7), &why));
}

TEST(PeerMessage, HeaderRejectsWrongMagicVersionTypeAndSize) {
  const std::vector<uint8_t> good = encode(Done{1});
  size_t body = 0;
  std::string why;
  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  EXPECT_FALSE(decode_header(std::span(bad).first(kPeerHeaderSize), &body, &why));
  EXPECT_NE(why.find("magic"), std::string::npos) << why;

  bad = good;
  bad[4] = 1;  // version 1: a peer from before the error message
  EXPECT_FALSE(decode_header(std::span(bad).first(kPeerHeaderSize), &body, &why));
  EXPECT_NE(why.find("version 1"), std::string::npos) << why;
  bad[4] = 2;  // version 2: a peer from before the progress message
  EXPECT_FALSE(decode_header(std::span(bad).first(kPeerHeaderSize), &body, &why));
  EXPECT_NE(why.find("version 2"), std::string::npos) << why;

  bad = good;
  bad[6] = 9;  // type 9
  EXPECT_FALSE(decode_header(std::span(bad).first(kPeerHeaderSize), &body, &why));
  EXPECT_NE(why.find("type 9"), std::string::npos) << why;

  bad = good;
  poke_u32(bad, 8, 1u << 30);  // a body far over the limit
  EXPECT_FALSE(decode_header(std::span(bad).first(kPeerHeaderSize), &body, &why));
  EXPECT_NE(why.find("over the limit"), std::string::npos) << why;

  EXPECT_FALSE(decode_header(std::span(good).first(kPeerHeaderSize - 1), &body, &why));
}

TEST(PeerMessage, TruncatedAndOverlongBodiesAreRejected) {
  const std::vector<uint8_t> message = encode(sample_buffer());
  std::span<const uint8_t> body = body_of(message);
  std::string why;
  for (size_t cut = 0; cut < body.size(); ++cut) {
    EXPECT_FALSE(decode_buffer(body.first(cut), &why)) << "accepted a body cut at " << cut;
    EXPECT_FALSE(why.empty());
  }
  std::vector<uint8_t> longer(body.begin(), body.end());
  longer.push_back(0);
  EXPECT_FALSE(decode_buffer(longer, &why));
  EXPECT_NE(why.find("unexpected bytes"), std::string::npos) << why;
}

TEST(PeerMessage, HostileLengthsAreRejectedBeforeUse) {
  std::vector<uint8_t> message = encode(sample_buffer());
  // The key's length prefix sits after address, length, mr_mode and key_is_raw.
  const size_t key_length_at = kPeerHeaderSize + 8 + 8 + 8 + 1;
  poke_u32(message, key_length_at, 0xffffffffu);
  std::string why;
  EXPECT_FALSE(decode_buffer(body_of(message), &why));
  EXPECT_NE(why.find("key is 4294967295 bytes"), std::string::npos) << why;

  poke_u32(message, key_length_at, 200);  // allowed size, but more than follows
  EXPECT_FALSE(decode_buffer(body_of(message), &why));
  EXPECT_NE(why.find("only"), std::string::npos) << why;
}

TEST(PeerMessage, FieldValuesAreChecked) {
  std::string why;
  Hello hello = sample_hello();
  hello.min_size = 0;
  EXPECT_FALSE(decode_hello(body_of(encode(hello)), &why));
  hello = sample_hello();
  hello.max_size = uint64_t{1} << 40;
  EXPECT_FALSE(decode_hello(body_of(encode(hello)), &why));
  EXPECT_NE(why.find("4 GiB"), std::string::npos) << why;
  hello = sample_hello();
  hello.iterations = 0;
  EXPECT_FALSE(decode_hello(body_of(encode(hello)), &why));
  hello = sample_hello();
  hello.test = static_cast<TestKind>(77);
  EXPECT_FALSE(decode_hello(body_of(encode(hello)), &why));
  hello = sample_hello();
  hello.provider = std::string("tcp\n", 4);
  EXPECT_FALSE(decode_hello(body_of(encode(hello)), &why));
  EXPECT_NE(why.find("printable"), std::string::npos) << why;
  hello = sample_hello();
  hello.provider.clear();
  EXPECT_FALSE(decode_hello(body_of(encode(hello)), &why));

  BufferInfo buffer = sample_buffer();
  buffer.address = UINT64_MAX - 10;
  EXPECT_FALSE(decode_buffer(body_of(encode(buffer)), &why));
  EXPECT_NE(why.find("overflows"), std::string::npos) << why;
  buffer = sample_buffer();
  buffer.key = {1, 2, 3};  // a u64 key must be 8 bytes
  EXPECT_FALSE(decode_buffer(body_of(encode(buffer)), &why));
  buffer.key_is_raw = true;  // a raw key may be any size up to the limit
  EXPECT_TRUE(decode_buffer(body_of(encode(buffer)), &why)) << why;
  buffer = sample_buffer();
  buffer.fabric_address.clear();
  EXPECT_FALSE(decode_buffer(body_of(encode(buffer)), &why));
  std::vector<uint8_t> raw_flag = encode(sample_buffer());
  raw_flag[kPeerHeaderSize + 24] = 7;  // key_is_raw must be 0 or 1
  EXPECT_FALSE(decode_buffer(body_of(raw_flag), &why));
}

TEST(PeerMessage, ErrorRoundTripsPrintableAndBounded) {
  std::string why;
  const std::vector<uint8_t> message = encode(PeerError{"server: no provider 'bogus'"});
  size_t body = 0;
  ASSERT_EQ(decode_header(std::span(message).first(kPeerHeaderSize), &body, &why),
            MessageType::error)
      << why;
  std::optional<PeerError> decoded = decode_error(body_of(message), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(decoded->reason, "server: no provider 'bogus'");

  // What the sender's reason holds is made printable and cut to the bound before it is sent.
  decoded = decode_error(body_of(encode(PeerError{std::string("a\nb\x1b\xff", 5)})), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(decoded->reason, "a?b??");
  decoded = decode_error(body_of(encode(PeerError{std::string(5000, 'x')})), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(decoded->reason.size(), kMaxReasonSize);
  decoded = decode_error(body_of(encode(PeerError{""})), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(decoded->reason, "no reason given");
}

TEST(PeerMessage, HostileErrorsAreRejected) {
  std::string why;
  // A control character (a terminal escape) from the peer is never printed.
  wire::ByteWriter escape;
  escape.str(std::string("\x1b]0;owned\x07"));
  EXPECT_FALSE(decode_error(escape.bytes(), &why));
  EXPECT_NE(why.find("printable"), std::string::npos) << why;
  wire::ByteWriter empty;
  empty.str(std::string());
  EXPECT_FALSE(decode_error(empty.bytes(), &why));
  std::vector<uint8_t> message = encode(PeerError{"x"});
  poke_u32(message, kPeerHeaderSize, kMaxReasonSize + 1);  // a length over the bound
  EXPECT_FALSE(decode_error(body_of(message), &why));
  EXPECT_NE(why.find("more than the"), std::string::npos) << why;
  message = encode(PeerError{"x"});
  message.push_back(0);  // trailing bytes
  EXPECT_FALSE(decode_error(body_of(message), &why));
}

// Random bytes never crash a decoder (ASan and UBSan watch) and are never all accepted.
TEST(PeerMessage, RandomBytesNeverCrashTheDecoders) {
  std::mt19937 random(1234);
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> bytes(random() % 96);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
    std::string why;
    accepted += decode_hello(bytes, &why).has_value();
    accepted += decode_buffer(bytes, &why).has_value();
    // An error is any printable text, so random bytes may well pass; they must only never
    // crash it nor yield a byte that is not printable.
    if (std::optional<PeerError> error = decode_error(bytes, &why)) {
      for (char c : error->reason) EXPECT_TRUE(c >= 0x20 && c <= 0x7e);
    }
    size_t body = 0;
    if (bytes.size() >= kPeerHeaderSize) {
      (void)decode_header(std::span(bytes).first(kPeerHeaderSize), &body, &why);
    }
  }
  EXPECT_LT(accepted, 10);
}

TEST(PeerSocket, MessagesCrossALoopbackConnection) {
  std::string why;
  std::optional<PeerSocket> server = PeerSocket::listen(0, &why);
  ASSERT_TRUE(server) << why;
  std::optional<PeerSocket> client =
      PeerSocket::connect("127.0.0.1", server->listening_port(), 5000, &why);
  ASSERT_TRUE(client) << why;
  ASSERT_TRUE(server->accept(5000, &why)) << why;

  ASSERT_TRUE(client->send(encode(sample_hello()), &why)) << why;
  std::optional<std::vector<uint8_t>> body = server->receive(MessageType::hello, 5000, &why);
  ASSERT_TRUE(body) << why;
  std::optional<Hello> hello = decode_hello(*body, &why);
  ASSERT_TRUE(hello) << why;
  EXPECT_EQ(hello->provider, "tcp;ofi_rxm");

  // A message of the wrong type where another is due is refused.
  ASSERT_TRUE(server->send(encode(Done{5}), &why)) << why;
  EXPECT_FALSE(client->receive(MessageType::buffer, 5000, &why));
  EXPECT_NE(why.find("where type 2 was due"), std::string::npos) << why;

  // A peer that hangs up mid-message ends the read with a reason, not a hang.
  std::vector<uint8_t> partial = encode(sample_buffer());
  partial.resize(kPeerHeaderSize + 4);
  ASSERT_TRUE(client->send(partial, &why)) << why;
  client.reset();
  EXPECT_FALSE(server->receive(MessageType::buffer, 5000, &why));
  EXPECT_NE(why.find("closed"), std::string::npos) << why;
}

// A peer that gives up sends its reason; the side waiting for another message reports that
// reason, not only that the connection closed.
TEST(PeerSocket, APeersReasonReachesTheOtherSide) {
  std::string why;
  std::optional<PeerSocket> server = PeerSocket::listen(0, &why);
  ASSERT_TRUE(server) << why;
  std::optional<PeerSocket> client =
      PeerSocket::connect("127.0.0.1", server->listening_port(), 5000, &why);
  ASSERT_TRUE(client) << why;
  ASSERT_TRUE(server->accept(5000, &why)) << why;
  ASSERT_TRUE(server->send(encode(PeerError{"server: the client uses provider 'shm'"}), &why));
  server.reset();
  EXPECT_FALSE(client->receive(MessageType::buffer, 5000, &why));
  EXPECT_EQ(why, "the peer stopped: server: the client uses provider 'shm'");
}

TEST(PeerSocket, SilentPeerTimesOutAndBadHostIsReported) {
  std::string why;
  std::optional<PeerSocket> server = PeerSocket::listen(0, &why);
  ASSERT_TRUE(server) << why;
  EXPECT_FALSE(server->accept(50, &why));  // nobody connects
  EXPECT_NE(why.find("timed out"), std::string::npos) << why;
  EXPECT_FALSE(PeerSocket::connect("no-such-host.invalid", 1, 100, &why));
  EXPECT_NE(why.find("cannot resolve"), std::string::npos) << why;
}

}  // namespace
}  // namespace hmr::perftest
