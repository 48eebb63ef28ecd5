// Packed remote keys through the C ABI: hmr_rkey_pack on the target's MR, hmr_rkey_unpack on
// the initiator's domain, and RMA through what the unpacked key says — plus every way a
// peer's bytes can be wrong.
#include <hmr/hmr.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "test_support.h"

using namespace hmr_test;

namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr uint64_t kVirt = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;

uint64_t va(const void* p) { return reinterpret_cast<uint64_t>(p); }

std::vector<uint8_t> pack(hmr_mr* mr) {
  std::vector<uint8_t> bytes(HMR_RKEY_PACKED_MAX);
  size_t len = bytes.size();
  EXPECT_EQ(hmr_rkey_pack(mr, bytes.data(), &len), 0) << hmr_last_error();
  bytes.resize(len);
  return bytes;
}

hmr_rkey_info query(hmr_rkey* rkey) {
  hmr_rkey_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_EQ(hmr_rkey_query(rkey, &info), 0) << hmr_last_error();
  return info;
}

struct RkeyReleaser {
  void operator()(hmr_rkey* r) const { EXPECT_EQ(hmr_rkey_release(r), 0) << hmr_last_error(); }
};
using RkeyPtr = std::unique_ptr<hmr_rkey, RkeyReleaser>;

RkeyPtr unpack(hmr_domain* domain, const std::vector<uint8_t>& bytes) {
  hmr_rkey* rkey = nullptr;
  EXPECT_EQ(hmr_rkey_unpack(domain, bytes.data(), bytes.size(), &rkey), 0) << hmr_last_error();
  return RkeyPtr(rkey);
}

// The blob's layout (docs/semantics.md): the checksum is FNV-1a over everything before it.
// Tests that forge a field re-seal it, so the check under test is the field's own.
void reseal(std::vector<uint8_t>& blob) {
  uint32_t hash = 2166136261u;
  const size_t body = blob.size() - 4;
  for (size_t i = 0; i < body; ++i) hash = (hash ^ blob[i]) * 16777619u;
  for (size_t i = 0; i < 4; ++i) blob[body + i] = static_cast<uint8_t>(hash >> (8 * i));
}

// ============================================================== round trips

TEST(Rkey, UnpackedKeyReachesTheMrFromAnotherDomain) {
  DomainPtr target_domain = open_domain(kVirt);
  DomainPtr initiator_domain = open_domain(kVirt);
  ASSERT_TRUE(target_domain && initiator_domain);
  Pages target(2 * kPage);
  std::memset(target.data(), 0x11, target.size());
  MrPtr mr = reg(target_domain.get(), target.data(), target.size(), kRemote);
  ASSERT_TRUE(mr);

  const std::vector<uint8_t> blob = pack(mr.get());
  hmr_md_attr md;
  std::memset(&md, 0, sizeof md);
  md.size = sizeof md;
  ASSERT_HMR_OK(hmr_md_query(target_domain.get(), &md));
  EXPECT_EQ(blob.size(), md.rkey_packed_size);

  RkeyPtr rkey = unpack(initiator_domain.get(), blob);
  ASSERT_TRUE(rkey);
  const hmr_rkey_info info = query(rkey.get());
  EXPECT_EQ(info.addr, va(target.data()));
  EXPECT_EQ(info.length, target.size());
  EXPECT_EQ(info.key, hmr_mr_key(mr.get()));
  EXPECT_EQ(info.iface, HMR_HMEM_SYSTEM);
  uint64_t base = 0;
  uint8_t raw[HMR_RKEY_RAW_MAX];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr.get(), &base, raw, &raw_size, 0));
  ASSERT_EQ(info.raw_key_size, raw_size);
  EXPECT_EQ(std::memcmp(info.raw_key, raw, raw_size), 0);

  Link link = connect(initiator_domain.get(), target_domain.get());
  ASSERT_TRUE(link);
  std::vector<uint8_t> out(700);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr,
                             info.addr + kPage - 100, info.key));
  EXPECT_EQ(std::memcmp(target.data() + kPage - 100, out.data(), out.size()), 0);
  EXPECT_EQ(target.data()[kPage - 101], 0x11);
  EXPECT_EQ(target.data()[kPage + 600], 0x11);
  // The range the rkey names is the MR's: one byte past it is refused by the target.
  EXPECT_HMR_ERROR(hmr_ep_write(link.initiator.get(), out.data(), 1, nullptr,
                                info.addr + info.length, info.key),
                   HMR_EFAULT);
}

TEST(Rkey, OffsetDomainsPackAddressZero) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY, "require=PROV_KEY");
  ASSERT_TRUE(domain);
  Pages target(kPage);
  MrPtr mr = reg(domain.get(), target.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  RkeyPtr rkey = unpack(domain.get(), pack(mr.get()));
  ASSERT_TRUE(rkey);
  const hmr_rkey_info info = query(rkey.get());
  EXPECT_EQ(info.addr, 0u);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  const uint32_t value = 0xfeedbeef;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr, info.addr + 8,
                             info.key));
  EXPECT_EQ(std::memcmp(target.data() + 8, &value, sizeof value), 0);
}

// A cached registration covers more than the MR that shares it; the packed address is still
// the MR's own first byte.
TEST(Rkey, MrSharingALargerCachedRegistrationPacksItsOwnStart) {
  DomainPtr domain = open_domain(kVirt);
  ASSERT_TRUE(domain);
  Pages memory(4 * kPage);
  std::memset(memory.data(), 0, memory.size());
  MrPtr whole = reg(domain.get(), memory.data(), memory.size(), kRemote);
  ASSERT_TRUE(whole);
  MrPtr part = reg(domain.get(), memory.data() + 2 * kPage, kPage, kRemote);
  ASSERT_TRUE(part);
  hmr_mr_info mr_info;
  std::memset(&mr_info, 0, sizeof mr_info);
  mr_info.size = sizeof mr_info;
  ASSERT_HMR_OK(hmr_mr_query(part.get(), &mr_info));
  ASSERT_EQ(mr_info.cached, 1) << "the sub-range should share the whole range's registration";

  RkeyPtr rkey = unpack(domain.get(), pack(part.get()));
  ASSERT_TRUE(rkey);
  const hmr_rkey_info info = query(rkey.get());
  EXPECT_EQ(info.addr, va(memory.data() + 2 * kPage));
  // hmr_mr_raw_attr's base is the same address (it once was the shared registration's start).
  uint64_t base = 0;
  uint8_t raw[HMR_RKEY_RAW_MAX];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(part.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, info.addr);
  EXPECT_EQ(info.length, kPage);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  const uint64_t value = 0x0123456789abcdefULL;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr, info.addr,
                             info.key));
  EXPECT_EQ(std::memcmp(memory.data() + 2 * kPage, &value, sizeof value), 0);
}

TEST(Rkey, RawKeysAreMappedUntilReleased) {
  const uint64_t mode = kVirt | HMR_MR_RAW;
  DomainPtr target_domain = open_domain(mode, "require=RAW;key_size=16");
  DomainPtr initiator_domain = open_domain(mode, "require=RAW;key_size=16");
  ASSERT_TRUE(target_domain && initiator_domain);
  Pages target(kPage);
  MrPtr mr = reg(target_domain.get(), target.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  const std::vector<uint8_t> blob = pack(mr.get());
  EXPECT_EQ(blob.size(), 60u);

  hmr_rkey* rkey = nullptr;
  ASSERT_HMR_OK(hmr_rkey_unpack(initiator_domain.get(), blob.data(), blob.size(), &rkey));
  const hmr_rkey_info info = query(rkey);
  EXPECT_EQ(info.raw_key_size, 16u);
  Link link = connect(initiator_domain.get(), target_domain.get());
  ASSERT_TRUE(link);
  const uint16_t value = 0xabcd;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr, info.addr,
                             info.key));
  EXPECT_EQ(std::memcmp(target.data(), &value, sizeof value), 0);

  ASSERT_HMR_OK(hmr_rkey_release(rkey));
  // The mapping went with the rkey.
  EXPECT_HMR_ERROR(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr, info.addr,
                                info.key),
                   HMR_EACCES);
}

TEST(Rkey, CppWrapperRoundTrip) {
  hmr::Domain domain(domain_attr(kVirt));
  Pages target(kPage);
  hmr::MemoryRegion mr = hmr::MemoryRegion::reg(domain, target.data(), kPage, kRemote);
  const std::vector<uint8_t> blob = mr.pack_rkey();
  hmr::RemoteKey rkey = hmr::RemoteKey::unpack(domain, blob);
  EXPECT_EQ(rkey.addr(), va(target.data()));
  EXPECT_EQ(rkey.key(), mr.key());
  rkey.release();
  EXPECT_FALSE(rkey);
  std::vector<uint8_t> broken = blob;
  broken[0] ^= 1;
  EXPECT_THROW(hmr::RemoteKey::unpack(domain, broken), hmr::Error);
}

// ============================================================== bad arguments

TEST(RkeyBadArguments, Pack) {
  DomainPtr domain = open_domain(kVirt);
  ASSERT_TRUE(domain);
  Pages target(kPage);
  MrPtr mr = reg(domain.get(), target.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  uint8_t buf[HMR_RKEY_PACKED_MAX];
  size_t len = 0;
  EXPECT_HMR_ERROR(hmr_rkey_pack(mr.get(), buf, &len), HMR_ETOOSMALL);
  EXPECT_EQ(len, 52u) << "the size needed is written back";
  len = 51;
  EXPECT_HMR_ERROR(hmr_rkey_pack(mr.get(), buf, &len), HMR_ETOOSMALL);
  EXPECT_EQ(len, 52u);
  len = sizeof buf;
  EXPECT_HMR_ERROR(hmr_rkey_pack(mr.get(), nullptr, &len), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_pack(mr.get(), buf, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_pack(nullptr, buf, &len), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_pack(reinterpret_cast<hmr_mr*>(domain.get()), buf, &len), HMR_EINVAL);
  EXPECT_EQ(len, sizeof buf) << "untouched by a failure other than ETOOSMALL";
}

TEST(RkeyBadArguments, UnpackQueryRelease) {
  DomainPtr domain = open_domain(kVirt);
  ASSERT_TRUE(domain);
  Pages target(kPage);
  MrPtr mr = reg(domain.get(), target.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  const std::vector<uint8_t> blob = pack(mr.get());
  hmr_rkey* rkey = reinterpret_cast<hmr_rkey*>(0x1);
  EXPECT_HMR_ERROR(hmr_rkey_unpack(nullptr, blob.data(), blob.size(), &rkey), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_unpack(domain.get(), nullptr, blob.size(), &rkey), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_unpack(domain.get(), blob.data(), blob.size(), nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(
      hmr_rkey_unpack(reinterpret_cast<hmr_domain*>(mr.get()), blob.data(), blob.size(), &rkey),
      HMR_EINVAL);
  EXPECT_EQ(rkey, reinterpret_cast<hmr_rkey*>(0x1)) << "outputs are written only on success";

  hmr_rkey_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_HMR_ERROR(hmr_rkey_query(nullptr, &info), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_query(reinterpret_cast<hmr_rkey*>(domain.get()), &info), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_release(nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_release(reinterpret_cast<hmr_rkey*>(mr.get())), HMR_EINVAL);

  RkeyPtr good = unpack(domain.get(), blob);
  ASSERT_TRUE(good);
  EXPECT_HMR_ERROR(hmr_rkey_query(good.get(), nullptr), HMR_EINVAL);
  info.size = 0;
  EXPECT_HMR_ERROR(hmr_rkey_query(good.get(), &info), HMR_EINVAL);
}

TEST(RkeyBadArguments, DomainWithAnRkeyCannotClose) {
  hmr_domain* domain = open_sim_domain(kVirt);
  ASSERT_NE(domain, nullptr);
  Pages target(kPage);
  MrPtr mr = reg(domain, target.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  const std::vector<uint8_t> blob = pack(mr.get());
  mr.reset();
  hmr_rkey* rkey = nullptr;
  ASSERT_HMR_OK(hmr_rkey_unpack(domain, blob.data(), blob.size(), &rkey));
  EXPECT_HMR_ERROR(hmr_domain_close(domain), HMR_EBUSY);
  ASSERT_HMR_OK(hmr_rkey_release(rkey));
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

// ============================================================== hostile bytes

class HostileRkey : public ::testing::Test {
 protected:
  void SetUp() override {
    domain_ = open_domain(kVirt, "key_size=8");
    ASSERT_TRUE(domain_);
    mr_ = reg(domain_.get(), target_.data(), kPage, kRemote);
    ASSERT_TRUE(mr_);
    blob_ = pack(mr_.get());
    ASSERT_EQ(blob_.size(), 52u);
  }
  // Unpacking must fail with EINVAL and a reason, writing nothing.
  void expect_rejected(const std::vector<uint8_t>& bytes, const char* what) {
    hmr_rkey* rkey = nullptr;
    const int rc = hmr_rkey_unpack(domain_.get(), bytes.data(), bytes.size(), &rkey);
    EXPECT_EQ(rc, -HMR_EINVAL) << what;
    EXPECT_STRNE(hmr_last_error(), "") << what;
    EXPECT_EQ(rkey, nullptr) << what;
    if (rc == 0) hmr_rkey_release(rkey);
  }
  std::vector<uint8_t> forged(size_t offset, std::initializer_list<uint8_t> bytes) {
    std::vector<uint8_t> copy = blob_;
    size_t i = offset;
    for (uint8_t b : bytes) copy[i++] = b;
    reseal(copy);
    return copy;
  }

  Pages target_{kPage};
  DomainPtr domain_;
  MrPtr mr_;
  std::vector<uint8_t> blob_;
};

TEST_F(HostileRkey, EveryTruncationAndExtensionIsRefused) {
  for (size_t len = 0; len < blob_.size(); ++len) {
    expect_rejected(std::vector<uint8_t>(blob_.begin(), blob_.begin() + len), "truncated");
  }
  std::vector<uint8_t> longer = blob_;
  longer.push_back(0);
  expect_rejected(longer, "one byte too many");
}

TEST_F(HostileRkey, EverySingleByteChangeIsRefused) {
  // FNV-1a changes with any one byte, so the checksum alone refuses each of these.
  for (size_t i = 0; i < blob_.size(); ++i) {
    for (const uint8_t flip : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> copy = blob_;
      copy[i] ^= flip;
      expect_rejected(copy, "one byte changed");
    }
  }
}

TEST_F(HostileRkey, ForgedFieldsAreRefusedEachForItsOwnReason) {
  expect_rejected(forged(0, {'x'}), "magic");
  expect_rejected(forged(4, {2}), "version");
  expect_rejected(forged(5, {41}), "header size");
  expect_rejected(forged(6, {3}), "a verbs key on a sim domain");
  expect_rejected(forged(6, {2}), "an ofi key on a sim domain");
  expect_rejected(forged(6, {0}), "NIC kind 0");
  expect_rejected(forged(6, {200}), "unknown NIC kind");
  expect_rejected(forged(6, {4}), "a callback NIC's key on a sim domain");
  expect_rejected(forged(7, {0}), "key size 0");
  expect_rejected(forged(7, {4}), "key size lying about the length");
  expect_rejected(forged(7, {200}), "key size beyond any key");
  expect_rejected(forged(8, {0x04}), "unknown flag");
  expect_rejected(forged(8, {0x03}), "a raw key on a 64-bit-key domain");
  expect_rejected(forged(10, {HMR_HMEM_IFACE_COUNT}), "unknown iface");
  expect_rejected(forged(12, {1}), "a provider identity on a sim key");
  // (An empty range is a zero-byte MR's key, which unpacks: ZeroBytesAndNoAccess.*.)
  expect_rejected(forged(24, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "range wraps");
  // A well-formed key of another key size: a 4-byte-key domain refuses an 8-byte key.
  DomainPtr small = open_domain(kVirt, "key_size=4");
  ASSERT_TRUE(small);
  hmr_rkey* rkey = nullptr;
  EXPECT_HMR_ERROR(hmr_rkey_unpack(small.get(), blob_.data(), blob_.size(), &rkey), HMR_EINVAL);
  EXPECT_EQ(rkey, nullptr);
}

// Random blobs and random mutations of a valid one, re-sealed or not: each is refused or, if
// it happens to be valid, unpacks to a key that can be queried and released.  (The libFuzzer
// target tests/fuzz/rkey_unpack_fuzz.cpp explores further in the clang build.)
TEST_F(HostileRkey, RandomBytesNeverCrashOrLeak) {
  std::mt19937_64 random(20261125);
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> bytes;
    if (round % 4 == 0) {
      bytes.resize(random() % 80);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
    } else {
      bytes = blob_;
      const int changes = 1 + static_cast<int>(random() % 4);
      for (int c = 0; c < changes; ++c) {
        bytes[random() % bytes.size()] = static_cast<uint8_t>(random());
      }
      if (round % 2 == 0) reseal(bytes);
    }
    hmr_rkey* rkey = nullptr;
    const int rc = hmr_rkey_unpack(domain_.get(), bytes.data(), bytes.size(), &rkey);
    if (rc == 0) {
      (void)query(rkey);
      ASSERT_HMR_OK(hmr_rkey_release(rkey));
    } else {
      ASSERT_EQ(rc, -HMR_EINVAL);
      ASSERT_EQ(rkey, nullptr);
    }
  }
}

}  // namespace
