// The plugin's parsers of bytes from another process: the listen handle NCCL's bootstrap
// carries, the control messages between comms, the remote CQ data of a write.  Valid input
// round-trips; truncated, corrupted, random and mutated input is rejected with a reason or,
// where accepted, means exactly what its bytes say (tests/nccl-net/wire_exercise.cpp).  The
// same exerciser runs under libFuzzer in clang builds (hmr_nccl_net_wire_fuzz).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "wire/control_message.h"
#include "wire/eager_data.h"
#include "wire/listen_handle.h"
#include "wire/write_completion.h"
#include "wire_exercise.h"

namespace hmr::nccl {
namespace {

std::vector<uint8_t> address(size_t n) {
  std::vector<uint8_t> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint8_t>(i * 7 + 1);
  return a;
}

std::array<uint8_t, kHandleSize> valid_handle(size_t address_size = 16) {
  std::array<uint8_t, kHandleSize> out{};
  std::string why;
  EXPECT_TRUE(encode(ListenHandle{0x1122334455667788ull, provider_tag("tcp;ofi_rxm"), address(address_size),
                                  0x0f1e2d3c4b5a6978ull}, out, &why)) << why;
  return out;
}

std::vector<std::vector<uint8_t>> valid_messages() {
  ReceiveAnnouncement announcement;
  announcement.slot = 31;  // the round trip below keeps every field
  announcement.generation = 200;
  announcement.count = kMaxRecvs;
  for (size_t i = 0; i < kMaxRecvs; ++i) {
    announcement.buffers[i] = AnnouncedBuffer{0x7f0000000000ull + i * 4096, 4096 + i, 0xabcdef00ull + i,
                                              static_cast<int32_t>(i) - 3, 0xfedcba98u + static_cast<uint32_t>(i)};
  }
  ReceiveAnnouncement one;
  one.count = 1;
  one.buffers[0] = AnnouncedBuffer{0, 0, 0, 0, 0};
  ConnectAccept accept{9, address(kMaxFabricAddress), 77, 1234, 0x55aa};
  accept.eager_max = kMaxEagerSize;
  accept.eager_credits = kMaxEagerCredits;
  EagerCredit credit;
  credit.count = kMaxRecvs;
  for (size_t i = 0; i < kMaxRecvs; ++i) {
    credit.tags[i] = TagCredit{static_cast<int32_t>(i) - 4, 0xfffffff0u + static_cast<uint32_t>(i)};
  }
  return {encode(ConnectRequest{7, address(16)}), encode(accept),
          encode(announcement), encode(one),
          encode(SendFailure{3, 4, 5, SendFailureReason::too_large, 1 << 20}),
          encode(SendFailure{0, 0, 0, SendFailureReason::write_failed, 0}),
          encode(credit),
          encode(EagerFailure{-7, 0xffffffffu, EagerFailureReason::send_failed, kMaxEagerSize}),
          encode(ConnectReady{0x8877665544332211ull}),
          encode(ConnectRefused{0x8877665544332212ull, std::string(kMaxRefusalReason, '~')}),
          encode(ConnectRefused{3, ""}),
          encode(SendClosed{0}),
          encode(SendClosed{0xfffffffffffffffeull})};
}

void expect_invariants(const std::vector<uint8_t>& bytes, const std::string& what) {
  EXPECT_EQ(test::exercise_wire_parsers(bytes.data(), bytes.size()), "") << what;
}

TEST(ListenHandle, RoundTripsEveryAddressLength) {
  for (size_t n = 1; n <= kMaxHandleAddress; ++n) {
    const auto bytes = valid_handle(n);
    std::string why;
    auto decoded = decode_listen_handle(bytes, &why);
    ASSERT_TRUE(decoded) << n << ": " << why;
    EXPECT_EQ(decoded->address, address(n));
    EXPECT_EQ(decoded->nonce, 0x1122334455667788ull);
    EXPECT_EQ(decoded->provider_tag, provider_tag("tcp;ofi_rxm"));
    EXPECT_EQ(decoded->port, 0x0f1e2d3c4b5a6978ull);
  }
  std::array<uint8_t, kHandleSize> out{};
  std::string why;
  EXPECT_FALSE(encode(ListenHandle{1, 0, {}, 5}, out, &why));
  EXPECT_FALSE(encode(ListenHandle{1, 0, address(kMaxHandleAddress + 1), 5}, out, &why));
  EXPECT_NE(why.find("80"), std::string::npos) << why;
  EXPECT_FALSE(encode(ListenHandle{1, 0, address(16), 0}, out, &why));
  EXPECT_NE(why.find("port"), std::string::npos) << why;
}

TEST(ListenHandle, EveryTruncationAndEverySingleByteChangeIsRefused) {
  const auto good = valid_handle(16);
  const size_t meaningful = kHandleAddressOffset + 16;
  for (size_t n = 0; n < meaningful; ++n) {
    auto cut = good;
    std::fill(cut.begin() + static_cast<std::ptrdiff_t>(n), cut.end(), uint8_t{0});
    if (cut == good) continue;
    std::string why;
    EXPECT_FALSE(decode_listen_handle(cut, &why)) << "truncated to " << n;
    EXPECT_NE(why.find("listen handle rejected"), std::string::npos) << why;
  }
  // FNV-1a changes its state on any single-byte change and every later step is a bijection,
  // so each such change outside the connect state's id is caught.
  for (size_t i = 0; i < kHandleSize; ++i) {
    if (i >= kConnectStateOffset && i < kConnectStateOffset + 8) continue;
    for (int delta : {1, 0x80, 0xff}) {
      auto bad = good;
      bad[i] = static_cast<uint8_t>(bad[i] + delta);
      std::string why;
      EXPECT_FALSE(decode_listen_handle(bad, &why)) << "byte " << i << " + " << delta;
      EXPECT_FALSE(why.empty());
    }
  }
}

TEST(ListenHandle, ConnectStateIsTheConnectorsOwn) {
  auto bytes = valid_handle();
  EXPECT_EQ(read_connect_state(bytes), 0u);
  write_connect_state(bytes, 0xfeedull);
  EXPECT_EQ(read_connect_state(bytes), 0xfeedull);
  std::string why;
  EXPECT_TRUE(decode_listen_handle(bytes, &why)) << why;  // outside the checksum
}

TEST(ListenHandle, ProviderTagsDiffer) {
  EXPECT_NE(provider_tag("tcp;ofi_rxm"), provider_tag("shm"));
  EXPECT_NE(provider_tag("tcp"), provider_tag("tcp;ofi_rxm"));
}

TEST(ControlMessage, RoundTripsEveryType) {
  for (const auto& bytes : valid_messages()) {
    std::string why;
    auto decoded = decode_control_message(bytes, &why);
    ASSERT_TRUE(decoded) << why;
    EXPECT_EQ(encode(*decoded), bytes);
    expect_invariants(bytes, "a valid message");
  }
  EXPECT_LE(valid_messages()[1].size(), kControlBufferSize);
  EXPECT_LE(valid_messages()[2].size(), kControlBufferSize);
}

// encode_into (the send path's, into a registered buffer) writes exactly encode()'s bytes,
// and writes nothing it cannot fit: 0, and not a byte past the buffer.
TEST(ControlMessage, EncodedIntoABufferAsIntoAVector) {
  for (const auto& bytes : valid_messages()) {
    std::string why;
    auto decoded = decode_control_message(bytes, &why);
    ASSERT_TRUE(decoded) << why;
    std::vector<uint8_t> buffer(kControlBufferSize + 8, 0xee);
    ASSERT_EQ(encode_into(*decoded, 0, {buffer.data(), kControlBufferSize}), bytes.size());
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), buffer.begin()));
    std::vector<uint8_t> short_buffer(bytes.size(), 0xee);
    EXPECT_EQ(encode_into(*decoded, 0, {short_buffer.data(), bytes.size() - 1}), 0u);
    EXPECT_EQ(short_buffer.back(), 0xee) << "wrote past the buffer it was given";
  }
}

// The header's port (which comm of a shared endpoint a message is for) is what the router
// reads without decoding the body; a header of another version or magic, or a short one,
// names no port.  A connect request's and an accept's own ports round-trip.
TEST(ControlMessage, TheHeaderNamesThePortAndConnectionsTheirOwn) {
  for (const auto& bytes : valid_messages()) {
    std::string why;
    auto decoded = decode_control_message(bytes, &why);
    ASSERT_TRUE(decoded) << why;
    const auto addressed = encode(*decoded, 0xfeedfacedeadbeefull);
    EXPECT_EQ(control_message_port(addressed), 0xfeedfacedeadbeefull);
    EXPECT_TRUE(decode_control_message(addressed, &why)) << why;
    std::vector<uint8_t> into(kControlBufferSize);
    ASSERT_EQ(encode_into(*decoded, 0xfeedfacedeadbeefull, into), addressed.size());
    EXPECT_TRUE(std::equal(addressed.begin(), addressed.end(), into.begin()));
    for (size_t at : {0u, 4u}) {  // magic, version
      auto bad = addressed;
      bad[at] ^= 0x40;
      EXPECT_FALSE(control_message_port(bad)) << at;
    }
    EXPECT_FALSE(control_message_port(std::span(addressed).first(15)));
  }
  ConnectRequest request{7, address(16), 0x0102030405060708ull, 99, 5};
  std::string why;
  auto decoded = decode_control_message(encode(request, 0), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(std::get<ConnectRequest>(*decoded).port, 0x0102030405060708ull);
  EXPECT_EQ(std::get<ConnectRequest>(*decoded).pid, 99u);
  ConnectAccept accept{7, address(16), 0xa0b0c0d0e0f00011ull, 98, 6};
  decoded = decode_control_message(encode(accept, 0), &why);
  ASSERT_TRUE(decoded) << why;
  EXPECT_EQ(std::get<ConnectAccept>(*decoded).port, 0xa0b0c0d0e0f00011ull);
}

TEST(ControlMessage, ARefusalsReasonIsMadePrintableAndCut) {
  const std::string sent = std::string("no fd\x01\n\xff left ") + std::string(2 * kMaxRefusalReason, 'z');
  std::string why;
  auto decoded = decode_control_message(encode(ConnectRefused{42, sent}), &why);
  ASSERT_TRUE(decoded) << why;
  const std::string& reason = std::get<ConnectRefused>(*decoded).reason;
  EXPECT_EQ(reason.size(), kMaxRefusalReason);
  EXPECT_EQ(reason.substr(0, 14), "no fd??? left ");
  EXPECT_EQ(refusal_reason(sent), reason);
  EXPECT_EQ(std::get<ConnectRefused>(*decoded).nonce, 42u);
}

TEST(ControlMessage, FieldsOutOfRangeAreRefusedWithTheirName) {
  struct Case {
    std::vector<uint8_t> bytes;
    const char* reason;
  };
  ReceiveAnnouncement a;
  a.count = 1;
  auto with = [](ReceiveAnnouncement m) { return encode(m); };
  ReceiveAnnouncement slot = a;
  slot.slot = kMaxRequests;
  ReceiveAnnouncement too_big = a;
  too_big.buffers[0].size = kMaxMessageSize + 1;
  ReceiveAnnouncement wraps = a;
  wraps.buffers[0] = AnnouncedBuffer{~0ull - 10, 100, 0, 0};
  auto nine = with(a);
  nine[18] = 9;  // the count byte (after the 16-byte header, slot and generation)
  auto zero = with(a);
  zero[18] = 0;
  auto reason = encode(SendFailure{});
  reason[19] = 99;  // the reason's low byte
  ConnectRequest eager_over{1, address(4)};
  eager_over.eager_max = kMaxEagerSize + 1;
  ConnectAccept credits_over{1, address(4)};
  credits_over.eager_credits = kMaxEagerCredits + 1;
  EagerCredit no_tags;
  EagerCredit credit_nine;
  credit_nine.count = 1;
  auto nine_tags = encode(credit_nine);
  nine_tags[16] = 9;  // the count byte, right after the header
  auto eager_reason = encode(EagerFailure{});
  eager_reason[24] = 2;  // the reason's low byte (after tag and ordinal)
  EagerFailure eager_size;
  eager_size.size = kMaxEagerSize + 1;
  // A refusal's reason is printed by the connector: a control byte, or one more than the
  // limit, refuses the message (encode itself never writes either: refusal_reason()).
  auto unprintable_reason = encode(ConnectRefused{1, "out of fds"});
  unprintable_reason.back() = '\n';
  auto long_reason = encode(ConnectRefused{1, std::string(kMaxRefusalReason, 'a')});
  long_reason[24] = static_cast<uint8_t>(kMaxRefusalReason + 1);  // the length's low byte
  long_reason[25] = static_cast<uint8_t>((kMaxRefusalReason + 1) >> 8);
  long_reason.push_back('a');
  const std::vector<Case> cases = {
      {with(slot), "slot"},
      {with(too_big), "buffer size"},
      {with(wraps), "overflows"},
      {nine, "count"},
      {zero, "count"},
      {reason, "reason"},
      {encode(ConnectRequest{0, address(4)}), "nonce"},
      {encode(ConnectRequest{1, {}}), "address"},
      {encode(ConnectAccept{1, address(kMaxFabricAddress + 1)}), "address"},
      {encode(eager_over), "eager max"},
      {encode(credits_over), "eager credits"},
      {encode(no_tags), "count"},
      {nine_tags, "count"},
      {eager_reason, "reason"},
      {encode(eager_size), "size"},
      {encode(ConnectReady{0}), "nonce"},
      {encode(ConnectRefused{0, "x"}), "nonce"},
      {unprintable_reason, "printable"},
      {long_reason, "allowed"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(decode_control_message(c.bytes, &why)) << c.reason;
    EXPECT_NE(why.find(c.reason), std::string::npos) << why;
  }
  // Wrong magic, version, type; a byte too many.
  for (size_t at : {0u, 4u, 6u}) {
    auto bad = valid_messages()[0];
    bad[at] ^= 0x40;
    std::string why;
    EXPECT_FALSE(decode_control_message(bad, &why)) << at;
  }
  auto longer = valid_messages()[0];
  longer.push_back(0);
  std::string why;
  EXPECT_FALSE(decode_control_message(longer, &why));
}

TEST(ControlMessage, EveryTruncationIsRefused) {
  for (const auto& bytes : valid_messages()) {
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      std::string why;
      EXPECT_FALSE(decode_control_message(cut, &why)) << n << " of " << bytes.size();
      EXPECT_FALSE(why.empty());
    }
  }
}

TEST(EagerAddress, FieldsSurviveAndOrdinalsCompareAcrossTheWrap) {
  for (const EagerAddress a : {EagerAddress{0, 0}, EagerAddress{kMaxEagerTag, 0xffffffffu},
                               EagerAddress{12345, 12345}}) {
    const EagerAddress b = decode_eager_address(encode(a));
    EXPECT_EQ(b.tag, a.tag);
    EXPECT_EQ(b.ordinal, a.ordinal & 0xfffu);
  }
  EXPECT_TRUE(eager_tag(0));
  EXPECT_TRUE(eager_tag(kMaxEagerTag));
  EXPECT_FALSE(eager_tag(kMaxEagerTag + 1));
  EXPECT_FALSE(eager_tag(-1));
  EXPECT_TRUE(ordinal_before(0xfffffffeu, 1));
  EXPECT_FALSE(ordinal_before(1, 0xfffffffeu));
  EXPECT_FALSE(ordinal_before(5, 5));
}

// The receiver restores every ordinal an eager message may name (posted up to 256 buffers
// back, or up to the credits ahead of the tag's next posting), across the 32-bit wrap too.
TEST(EagerAddress, TheReceiverRestoresEveryOrdinalOfItsWindow) {
  for (const uint32_t next : {0u, 1u, 255u, 256u, 4095u, 4096u, 0x7fffffffu, 0xfffffff0u, 0xffffffffu}) {
    for (uint32_t back = 1; back <= kEagerOrdinalsBehind; ++back) {
      const uint32_t ordinal = next - back;
      EXPECT_EQ(restore_ordinal(decode_eager_address(encode(EagerAddress{7, ordinal})).ordinal, next), ordinal) << next;
    }
    for (uint32_t ahead = 0; ahead < kEagerOrdinalsAhead; ++ahead) {
      const uint32_t ordinal = next + ahead;
      EXPECT_EQ(restore_ordinal(decode_eager_address(encode(EagerAddress{7, ordinal})).ordinal, next), ordinal) << next;
    }
  }
}

TEST(WriteCompletion, FieldsFillThirtyTwoBitsAndSurvive) {
  for (const WritePart part : {WritePart::whole, WritePart::head_only, WritePart::head_then_tail, WritePart::tail}) {
    const WriteCompletion c{31, 3, 7, part, static_cast<uint32_t>(kWholeWriteLimit - 1)};
    const uint32_t bits = encode(c);
    const WriteCompletion d = decode_write_completion(bits);
    EXPECT_EQ(d.slot, 31);
    EXPECT_EQ(d.generation, 3);
    EXPECT_EQ(d.index, 7);
    EXPECT_EQ(d.part, part);
    EXPECT_EQ(d.value, kWholeWriteLimit - 1);
  }
  EXPECT_EQ(encode(WriteCompletion{31, 3, 7, WritePart::tail, static_cast<uint32_t>(kWholeWriteLimit - 1)}), 0xffffffffu);
  // Only the generation's low bits travel: a receive two generations on does not match.
  EXPECT_EQ(decode_write_completion(encode(WriteCompletion{0, 6, 0, WritePart::whole, 0})).generation, 2);
}

// The receiver's side of plan_writes: the parts of every size, in either order, add up to it,
// and the message is complete only once all of them landed.
TEST(WriteCompletion, PartsInAnyOrderAddUpToTheMessage) {
  const uint64_t mib = kWholeWriteLimit;
  for (const uint64_t size : {uint64_t{0}, uint64_t{1}, mib - 1, mib, mib + 1, 3 * mib + 5, 64 * mib,
                              kMaxMessageSize - mib + 1, kMaxMessageSize}) {
    const WritePlan plan = plan_writes(size);
    ASSERT_TRUE(plan.count == 1 || plan.count == 2) << size;
    // The writes cover the message once, in order: a whole one under 1 MiB, else a head of
    // whole MiB and a tail of less than 1 MiB.
    uint64_t covered = 0;
    std::vector<WriteCompletion> parts;
    for (size_t i = 0; i < plan.count; ++i) {
      const PlannedWrite& w = plan.writes[i];
      EXPECT_EQ(w.offset, covered) << size;
      covered += w.bytes;
      if (w.part == WritePart::head_only || w.part == WritePart::head_then_tail) {
        EXPECT_EQ(w.bytes % mib, 0u);
        EXPECT_EQ(w.value, w.bytes / mib);
      } else {
        EXPECT_LT(w.bytes, mib);
        EXPECT_EQ(w.value, w.bytes);
      }
      parts.push_back({1, 2, 3, w.part, w.value});
    }
    EXPECT_EQ(covered, size);
    EXPECT_EQ(plan.writes[0].part == WritePart::whole, size < mib) << size;
    for (bool reversed : {false, true}) {
      LandedParts landed;
      for (size_t i = 0; i < parts.size(); ++i) {
        const WriteCompletion c = decode_write_completion(encode(parts[reversed ? parts.size() - 1 - i : i]));
        ASSERT_EQ(take_part(landed, c), nullptr) << size;
        EXPECT_EQ(landed.complete, i + 1 == parts.size()) << size << " after part " << i;
      }
      EXPECT_EQ(landed.bytes, size);
      // Nothing more is taken once complete.
      EXPECT_NE(take_part(landed, parts.front()), nullptr) << size;
    }
  }
}

TEST(WriteCompletion, PartsThatContradictEachOtherAreRefused) {
  using P = WritePart;
  struct Case {
    std::vector<WriteCompletion> parts;  // the last one must be refused
    const char* why;
  };
  const Case cases[] = {
      {{{0, 0, 0, P::head_then_tail, 1}, {0, 0, 0, P::head_then_tail, 1}}, "second head"},
      {{{0, 0, 0, P::tail, 5}, {0, 0, 0, P::tail, 5}}, "second tail"},
      {{{0, 0, 0, P::head_only, 2}, {0, 0, 0, P::tail, 5}}, "already complete"},  // (the head said so)
      {{{0, 0, 0, P::tail, 5}, {0, 0, 0, P::head_only, 2}}, "no tail"},
      {{{0, 0, 0, P::tail, 0}}, "empty tail"},
      {{{0, 0, 0, P::head_only, 0}}, "empty head"},
      {{{0, 0, 0, P::head_then_tail, 3}, {0, 0, 0, P::whole, 7}}, "whole message after part"},
      {{{0, 0, 0, P::whole, 7}, {0, 0, 0, P::whole, 7}}, "already complete"},
  };
  for (const Case& c : cases) {
    LandedParts landed;
    for (size_t i = 0; i + 1 < c.parts.size(); ++i) ASSERT_EQ(take_part(landed, c.parts[i]), nullptr) << c.why;
    const char* refused = take_part(landed, c.parts.back());
    ASSERT_NE(refused, nullptr) << c.why;
    EXPECT_NE(std::string(refused).find(c.why), std::string::npos) << refused;
  }
}

// The deterministic counterpart of the fuzzer: mutations of valid inputs (bit flips, byte
// sets, insertions, deletions, splices) and random bytes, every invariant checked each time.
TEST(WireParsers, SurviveMutatedAndRandomInput) {
  std::mt19937_64 random(20240611);
  std::vector<std::vector<uint8_t>> seeds = valid_messages();
  for (size_t n : {size_t{1}, size_t{16}, size_t{28}, kMaxHandleAddress}) {
    const auto h = valid_handle(n);
    seeds.emplace_back(h.begin(), h.end());
  }
  size_t checked = 0;
  for (int round = 0; round < 60000; ++round) {
    std::vector<uint8_t> input = seeds[random() % seeds.size()];
    const int mutations = 1 + static_cast<int>(random() % 4);
    for (int m = 0; m < mutations; ++m) {
      const size_t at = input.empty() ? 0 : random() % input.size();
      switch (random() % 6) {
        case 0:
          if (!input.empty()) input[at] ^= static_cast<uint8_t>(1u << (random() % 8));
          break;
        case 1:
          if (!input.empty()) input[at] = static_cast<uint8_t>(random());
          break;
        case 2: input.insert(input.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(random())); break;
        case 3:
          if (!input.empty()) input.erase(input.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        case 4: input.resize(random() % (input.size() + 1)); break;
        case 5: {
          const auto& other = seeds[random() % seeds.size()];
          const size_t from = random() % other.size();
          input.insert(input.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
          break;
        }
      }
    }
    ASSERT_EQ(test::exercise_wire_parsers(input.data(), input.size()), "") << "round " << round;
    ++checked;
  }
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> input(random() % 600);
    for (uint8_t& b : input) b = static_cast<uint8_t>(random());
    if (input.size() >= 4 && round % 2 == 0) std::memcpy(input.data(), round % 4 == 0 ? "HMRC" : "HMRN", 4);
    ASSERT_EQ(test::exercise_wire_parsers(input.data(), input.size()), "") << "random input " << round;
    ++checked;
  }
  EXPECT_EQ(checked, 80000u);
}

}  // namespace
}  // namespace hmr::nccl
