#include "nic/ofi/ofi_mr_attr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <string>

namespace hmr::nic::ofi {
namespace {

const std::string kWho = "libfabric test provider";
constexpr uint32_t kApi117 = FI_VERSION(1, 17);

RegistrationRequest host_request(const iovec* segments, size_t count) {
  RegistrationRequest request;
  request.segments = std::span<const iovec>(segments, count);
  request.access = HMR_REMOTE_READ | HMR_READ;
  return request;
}

void expect_refused(const RegistrationRequest& request, uint32_t api, int code,
                    const char* reason_part) {
  MrAttr attr;
  Status status = build_mr_attr(request, 0, api, kWho, attr);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), code);
  EXPECT_NE(status.reason().find(reason_part), std::string::npos) << status.reason();
  EXPECT_NE(status.reason().find(kWho), std::string::npos) << status.reason();
}

// The keys hmr chooses stay within the provider's key size and come round again: a 2-byte
// provider (opx) refuses requested keys past its table, and after 65535 registrations in the
// process every registration failed.
TEST(OfiChosenKey, StaysWithinTheKeySizeAndComesRound) {
  EXPECT_EQ(chosen_key(1, 8), 1u);
  EXPECT_EQ(chosen_key(70000, 8), 70000u);
  EXPECT_EQ(chosen_key(1, 2), 1u);
  EXPECT_EQ(chosen_key(65535, 2), 65535u);
  EXPECT_EQ(chosen_key(65536, 2), 1u) << "key 0 and 65536 are not 2-byte keys";
  EXPECT_EQ(chosen_key(70000, 2), 70000u - 65535u);
  EXPECT_EQ(chosen_key(256, 1), 1u);
  for (uint64_t count : {uint64_t{0}, uint64_t{1} << 40, ~uint64_t{0}}) {
    for (size_t size : {1, 2, 4}) {
      const uint64_t key = chosen_key(count, size);
      EXPECT_GE(key, 1u);
      EXPECT_EQ(key >> (8 * size), 0u) << count << " at " << size << " bytes";
    }
  }
}

// The keys 64 collisions in a row make hmr try are 64 different keys for every key size, and
// reach past a block of used keys as long as 1/128 of the space.  (Doubling strides came round
// mod 2^16 - 1: 16 different 2-byte keys in 64 attempts, none more than 32768 on.)
TEST(OfiChosenKey, SixtyFourCollisionsTrySixtyFourDifferentKeys) {
  for (size_t size : {1, 2, 4, 8}) {
    for (uint64_t start : {uint64_t{1}, uint64_t{40000}, uint64_t{1} << 40}) {
      std::set<uint64_t> tried;
      uint64_t count = start;
      uint64_t farthest = 0;
      for (int attempt = 1; attempt <= 64; ++attempt) {
        tried.insert(chosen_key(count, size));
        farthest = count - start;
        count += chosen_key_stride(attempt, size);
      }
      const uint64_t keys = size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
      EXPECT_EQ(tried.size(), std::min<uint64_t>(64, keys)) << size << "-byte keys from " << start;
      if (keys > 128) {
        EXPECT_GE(farthest, keys / 128) << size << "-byte keys: a block this long is never passed";
        EXPECT_LT(farthest, keys) << size << "-byte keys: came round";
      }
    }
  }
}

// What a provider of a newer libfabric reads past fi_mr_attr (hmem_data, page_size, base_mr,
// sub_mr_cnt) is zero, also when hmr passes flags (which once followed the struct).
TEST(OfiMrAttr, NothingFollowsTheAttr) {
  char buffer[256];
  const iovec segment = {buffer, sizeof buffer};
  RegistrationRequest request = host_request(&segment, 1);
  request.flags = HMR_RMA_PMEM;
  MrAttr attr;
  ASSERT_TRUE(build_mr_attr(request, 0, kApi117, kWho, attr).ok());
  EXPECT_NE(attr.flags, 0u);
  const auto* past = reinterpret_cast<const unsigned char*>(&attr.attr) + sizeof(fi_mr_attr);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(past[i], 0) << "byte " << i << " past fi_mr_attr";
}

TEST(OfiMrAttr, HostSegmentsAccessAndKeyPassThrough) {
  char buffer[256];
  const iovec segments[2] = {{buffer, 100}, {buffer + 128, 64}};
  RegistrationRequest request = host_request(segments, 2);
  MrAttr attr;
  ASSERT_TRUE(build_mr_attr(request, 0x77, kApi117, kWho, attr).ok());
  EXPECT_EQ(attr.attr.mr_iov, segments);
  EXPECT_EQ(attr.attr.iov_count, 2u);
  EXPECT_EQ(attr.attr.access, FI_REMOTE_READ | FI_READ);
  EXPECT_EQ(attr.attr.requested_key, 0x77u);
  EXPECT_EQ(attr.attr.offset, 0u);
  EXPECT_EQ(attr.attr.iface, FI_HMEM_SYSTEM);
  EXPECT_EQ(attr.attr.device.reserved, 0u);
  EXPECT_EQ(attr.flags, 0u);
}

TEST(OfiMrAttr, DeviceIfaceDeviceAndFlagsPassThrough) {
  char buffer[64];
  const iovec segment = {buffer, sizeof buffer};
  RegistrationRequest request = host_request(&segment, 1);
  request.iface = HMR_HMEM_CUDA;
  request.device = 3;
  request.flags = HMR_HMEM_DEVICE_ONLY;
  MrAttr attr;
  ASSERT_TRUE(build_mr_attr(request, 0, kApi117, kWho, attr).ok());
  EXPECT_EQ(attr.attr.iface, FI_HMEM_CUDA);
  EXPECT_EQ(attr.attr.device.cuda, 3);
  EXPECT_EQ(attr.flags, FI_HMEM_DEVICE_ONLY);

  request.iface = HMR_HMEM_ZE;
  request.device = (1u << 16) | 2;  // driver 1, device 2
  request.flags = HMR_HMEM_HOST_ALLOC;
  MrAttr ze;
  ASSERT_TRUE(build_mr_attr(request, 0, kApi117, kWho, ze).ok());
  EXPECT_EQ(ze.attr.iface, FI_HMEM_ZE);
  EXPECT_EQ(ze.attr.device.ze, (1 << 16) | 2);
  EXPECT_EQ(ze.flags, FI_HMEM_HOST_ALLOC);
}

TEST(OfiMrAttr, FieldsTheSpokenVersionLacksAreRefusedNotDropped) {
  char buffer[64];
  const iovec segment = {buffer, sizeof buffer};
  const hmr_mr_dmabuf dmabuf = {5, 0, 4096, buffer};
  RegistrationRequest request;
  request.dmabuf = &dmabuf;
  request.access = HMR_REMOTE_WRITE;
  expect_refused(request, kApi117, HMR_ENOSYS, "libfabric 1.20");
  expect_refused(request, FI_VERSION(1, 19), HMR_ENOSYS, "FI_MR_DMABUF");

  RegistrationRequest with_data = host_request(&segment, 1);
  int opaque = 0;
  with_data.hmem_data = &opaque;
  expect_refused(with_data, FI_VERSION(1, 18), HMR_ENOSYS, "hmem_data");

  RegistrationRequest with_page = host_request(&segment, 1);
  with_page.page_size = 1 << 21;
  expect_refused(with_page, FI_VERSION(1, 21), HMR_ENOSYS, "page_size");
}

#if HMR_OFI_HAS_DMABUF
TEST(OfiMrAttr, DmabufWhenHeadersAndRuntimeHaveIt) {
  char buffer[64];
  const hmr_mr_dmabuf dmabuf = {5, 4096, 8192, buffer};
  RegistrationRequest request;
  request.dmabuf = &dmabuf;
  request.access = HMR_REMOTE_WRITE;
  MrAttr attr;
  ASSERT_TRUE(build_mr_attr(request, 0, FI_VERSION(1, 20), kWho, attr).ok());
  EXPECT_EQ(attr.attr.dmabuf, &attr.dmabuf);
  EXPECT_EQ(attr.dmabuf.fd, 5);
  EXPECT_EQ(attr.dmabuf.offset, 4096u);
  EXPECT_EQ(attr.dmabuf.len, 8192u);
  // libfabric's base_addr names the dma-buf's byte 0, hmr's the range's first byte.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(attr.dmabuf.base_addr) + attr.dmabuf.offset,
            reinterpret_cast<uintptr_t>(buffer));
  EXPECT_EQ(attr.flags & FI_MR_DMABUF, FI_MR_DMABUF);
}
#else
TEST(OfiMrAttr, HeadersOfThisBuildHaveNoDmabuf) {
  // Debian 12's libfabric 1.17: fi_mr_attr ends at `device`.
  EXPECT_LT(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 20));
  char buffer[64];
  const hmr_mr_dmabuf dmabuf = {5, 0, 4096, buffer};
  RegistrationRequest request;
  request.dmabuf = &dmabuf;
  request.access = HMR_REMOTE_WRITE;
  expect_refused(request, FI_VERSION(1, 22), HMR_ENOSYS, "headers");
}
#endif

TEST(OfiMrAttr, RmaEventAndAuthKeyAreRefused) {
  char buffer[64];
  const iovec segment = {buffer, sizeof buffer};
  RegistrationRequest request = host_request(&segment, 1);
  request.flags = HMR_RMA_EVENT;
  expect_refused(request, kApi117, HMR_EOPNOTSUPP, "HMR_RMA_EVENT");
  request.flags = HMR_AUTH_KEY;
  expect_refused(request, kApi117, HMR_EOPNOTSUPP, "HMR_AUTH_KEY");
}

}  // namespace
}  // namespace hmr::nic::ofi
