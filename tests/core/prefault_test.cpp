// core/prefault: which registrations are pre-faulted, and that pre-faulting makes an untouched
// range resident without ever crashing on memory the CPU may not write or touch at all.
#include "registration/prefault.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace hmr::core {
namespace {

constexpr size_t kMiB = 1ULL << 20;

class Mapping {
 public:
  Mapping(size_t len, int prot)
      : len_(len), addr_(mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) {}
  ~Mapping() {
    if (addr_ != MAP_FAILED) munmap(addr_, len_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  bool ok() const { return addr_ != MAP_FAILED; }
  void* addr() const { return addr_; }
  size_t len() const { return len_; }

 private:
  size_t len_;
  void* addr_;
};

// Pages of the mapping present in memory, by mincore (which never faults anything in).
size_t resident_pages(const Mapping& mapping) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> present((mapping.len() + page - 1) / page);
  if (mincore(mapping.addr(), mapping.len(), present.data()) != 0) return SIZE_MAX;
  size_t count = 0;
  for (unsigned char bit : present) count += bit & 1;
  return count;
}

size_t pages(size_t len) { return len / static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

nic::RegistrationRequest host_request(const iovec& segment) {
  nic::RegistrationRequest request;
  request.segments = {&segment, 1};
  return request;
}

TEST(Prefault, DecidesForLargeHostMemoryOnly) {
  const iovec big{reinterpret_cast<void*>(0x100000), 128 * kMiB};
  const iovec small{reinterpret_cast<void*>(0x100000), 1 * kMiB};
  EXPECT_TRUE(wants_prefault(host_request(big), 64 * kMiB, true, false));
  EXPECT_FALSE(wants_prefault(host_request(small), 64 * kMiB, true, false));
  EXPECT_TRUE(wants_prefault(host_request(small), 1 * kMiB, true, false));  // the threshold counts
  EXPECT_FALSE(wants_prefault(host_request(big), 64 * kMiB, true, true));   // ODP: never
  EXPECT_FALSE(wants_prefault(host_request(big), 64 * kMiB, false, false));  // nothing pinned

  nic::RegistrationRequest device = host_request(big);
  device.iface = HMR_HMEM_CUDA;  // device memory, even a host-alloc or managed range
  EXPECT_FALSE(wants_prefault(device, 0, true, false));
  nic::RegistrationRequest device_only = host_request(big);
  device_only.flags = HMR_HMEM_DEVICE_ONLY;
  EXPECT_FALSE(wants_prefault(device_only, 0, true, false));
  nic::RegistrationRequest dmabuf;
  hmr_mr_dmabuf buf{};
  dmabuf.dmabuf = &buf;
  EXPECT_FALSE(wants_prefault(dmabuf, 0, true, false));

  const iovec halves[2] = {{reinterpret_cast<void*>(0x100000), 40 * kMiB},
                           {reinterpret_cast<void*>(0x8000000), 40 * kMiB}};
  nic::RegistrationRequest split;
  split.segments = halves;
  EXPECT_TRUE(wants_prefault(split, 64 * kMiB, true, false));  // the whole request's size
}

class PrefaultMethods : public ::testing::TestWithParam<PrefaultMethod> {};

TEST_P(PrefaultMethods, MakesAnUntouchedRangeResident) {
  Mapping mapping(256 * kMiB, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(mapping.ok());
  ASSERT_EQ(resident_pages(mapping), 0u);
  ThreadPool pool(3, 16);
  const PrefaultOutcome outcome = prefault_range(mapping.addr(), mapping.len(), pool, true, GetParam());
  EXPECT_EQ(outcome.populated_bytes, mapping.len());
  EXPECT_EQ(outcome.skipped_bytes, 0u);
  EXPECT_EQ(resident_pages(mapping), pages(mapping.len()));
}

TEST_P(PrefaultMethods, KeepsTheDataOfAPartlyWrittenRange) {
  Mapping mapping(16 * kMiB, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(mapping.ok());
  auto* bytes = static_cast<unsigned char*>(mapping.addr());
  for (size_t i = 0; i < mapping.len(); i += 3 * 4096) bytes[i] = static_cast<unsigned char>(i >> 12);
  ThreadPool pool(2, 16);
  // An unaligned start and length: the pages covering them are populated.
  const PrefaultOutcome outcome = prefault_range(bytes + 100, mapping.len() - 200, pool, true, GetParam());
  EXPECT_EQ(outcome.populated_bytes, mapping.len());
  for (size_t i = 0; i < mapping.len(); i += 4096) {
    const unsigned char expected = (i % (3 * 4096) == 0) ? static_cast<unsigned char>(i >> 12) : 0;
    ASSERT_EQ(bytes[i], expected) << "offset " << i;
  }
}

TEST_P(PrefaultMethods, ReadOnlyMappingIsNeverWritten) {
  Mapping mapping(64 * kMiB, PROT_READ);
  ASSERT_TRUE(mapping.ok());
  ThreadPool pool(2, 16);
  const PrefaultOutcome outcome = prefault_range(mapping.addr(), mapping.len(), pool, true, GetParam());
  // Read-populated or left alone, but the process is still here and nothing was written.
  EXPECT_EQ(outcome.populated_bytes + outcome.skipped_bytes, mapping.len());
  EXPECT_EQ(static_cast<const unsigned char*>(mapping.addr())[0], 0);
}

TEST_P(PrefaultMethods, InaccessibleRangeIsSkipped) {
  // What a device reservation looks like to the CPU: touching it would kill the process.
  Mapping mapping(32 * kMiB, PROT_NONE);
  ASSERT_TRUE(mapping.ok());
  ThreadPool pool(2, 16);
  const PrefaultOutcome outcome = prefault_range(mapping.addr(), mapping.len(), pool, true, GetParam());
  EXPECT_EQ(outcome.populated_bytes, 0u);
  EXPECT_EQ(outcome.skipped_bytes, mapping.len());
  EXPECT_EQ(resident_pages(mapping), 0u);
}

INSTANTIATE_TEST_SUITE_P(Methods, PrefaultMethods,
                         ::testing::Values(PrefaultMethod::automatic, PrefaultMethod::touch),
                         [](const ::testing::TestParamInfo<PrefaultMethod>& method) {
                           return method.param == PrefaultMethod::automatic ? "madvise" : "touch";
                         });

TEST(Prefault, ForRegistrationHonoursTheThreshold) {
  Mapping mapping(8 * kMiB, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(mapping.ok());
  const iovec segment{mapping.addr(), mapping.len()};
  prefault_for_registration(host_request(segment), {16 * kMiB, 2}, true, false);
  EXPECT_EQ(resident_pages(mapping), 0u);
  nic::RegistrationRequest device = host_request(segment);
  device.flags = HMR_HMEM_DEVICE_ONLY;
  prefault_for_registration(device, {1 * kMiB, 2}, true, false);
  EXPECT_EQ(resident_pages(mapping), 0u);
  prefault_for_registration(host_request(segment), {1 * kMiB, 2}, true, false);
  EXPECT_EQ(resident_pages(mapping), pages(mapping.len()));
}

}  // namespace
}  // namespace hmr::core
