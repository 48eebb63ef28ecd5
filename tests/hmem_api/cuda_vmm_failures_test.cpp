// CUDA VMM calls failing in the application (hmr itself never calls cuMemMap, cuMemUnmap or
// cuMemSetAccess: it reads VMM ranges through pointer attributes), and what hmr must do with
// the memory they leave behind, from several threads at once: a cuMemMap that failed leaves a
// hole that no registration may cover, and once it is mapped the range registers (no failed
// answer is remembered); a cuMemUnmap that failed leaves the segment mapped, so its cached
// registration is still good, and one that then succeeds is never answered from the cache; a
// cuMemSetAccess that failed leaves memory no copy reaches, so a host shadow fails naming the
// copy.
#include <string>
#include <vector>

#include "tests/hmem/fake_library.h"
#include "tests/hmem_api/failing_calls.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::DomainPtr;
using hmr_test::MrPtr;

// cuMemMap documents CUDA_ERROR_OUT_OF_MEMORY; cuMemUnmap CUDA_ERROR_NOT_PERMITTED;
// cuMemSetAccess CUDA_ERROR_INVALID_DEVICE (cuda.h, CUDA 13.0).
constexpr int kCudaErrorOutOfMemory = 2;
constexpr int kCudaErrorInvalidDevice = 101;
constexpr int kCudaErrorNotPermitted = 800;
constexpr size_t kSegment = 2u << 20;  // the fake's VMM granularity

// CUmemAllocationProp and CUmemAccessDesc as cuda.h lays them out.
struct AllocationProp {
  int type = 1;  // PINNED
  int requested_handle_types = 0;
  int location_type = 1;  // DEVICE
  int location_id = 0;
  void* win32_metadata = nullptr;
  unsigned char compression_type = 0;
  unsigned char gpu_direct_rdma_capable = 1;
  unsigned short usage = 0;
  unsigned char reserved[4] = {};
};
struct AccessDesc {
  int location_type = 1;
  int location_id = 0;
  int flags = 3;  // PROT_READWRITE
};

// The application's VMM calls, straight into the fake driver.
struct Vmm {
  int (*create)(unsigned long long*, size_t, const AllocationProp*, unsigned long long);
  int (*release)(unsigned long long);
  int (*reserve)(unsigned long long*, size_t, size_t, unsigned long long, unsigned long long);
  int (*address_free)(unsigned long long, size_t);
  int (*map)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long);
  int (*set_access)(unsigned long long, size_t, const AccessDesc*, size_t);
  int (*unmap)(unsigned long long, size_t);
};

const Vmm& vmm() {
  static const Vmm calls = [] {
    const hmr::testing::FakeLibrary library("fake CUDA driver", HMR_FAKE_CUDA_PATH);
    Vmm v{};
    v.create = library.function<decltype(v.create)>("cuMemCreate");
    v.release = library.function<decltype(v.release)>("cuMemRelease");
    v.reserve = library.function<decltype(v.reserve)>("cuMemAddressReserve");
    v.address_free = library.function<decltype(v.address_free)>("cuMemAddressFree");
    v.map = library.function<decltype(v.map)>("cuMemMap");
    v.set_access = library.function<decltype(v.set_access)>("cuMemSetAccess");
    v.unmap = library.function<decltype(v.unmap)>("cuMemUnmap");
    return v;
  }();
  return calls;
}

// One reservation of `segments` segments on device 0, none mapped; freed with what is mapped.
class Reservation {
 public:
  explicit Reservation(size_t segments) : mapped_(segments, false) {
    EXPECT_EQ(vmm().reserve(&base_, segments * kSegment, kSegment, 0, 0), 0);
  }
  ~Reservation() {
    for (size_t i = 0; i < mapped_.size(); ++i) {
      if (mapped_[i]) {
        EXPECT_EQ(unmap(i), 0);
      }
    }
    EXPECT_EQ(vmm().address_free(base_, mapped_.size() * kSegment), 0);
  }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  // The application's three calls for one segment; the driver's code of the first that fails.
  int map(size_t index, bool grant_access = true) {
    const AllocationProp prop;
    unsigned long long handle = 0;
    int rc = vmm().create(&handle, kSegment, &prop, 0);
    if (rc != 0) return rc;
    rc = vmm().map(segment(index), kSegment, 0, handle, 0);
    EXPECT_EQ(vmm().release(handle), 0);  // the mapping keeps the memory
    if (rc != 0) return rc;
    mapped_[index] = true;
    const AccessDesc access;
    return grant_access ? vmm().set_access(segment(index), kSegment, &access, 1) : 0;
  }
  int unmap(size_t index) {
    const int rc = vmm().unmap(segment(index), kSegment);
    if (rc == 0) mapped_[index] = false;
    return rc;
  }
  unsigned long long segment(size_t index) const { return base_ + index * kSegment; }
  void* at(size_t index) const { return as_pointer(segment(index)); }

 private:
  unsigned long long base_ = 0;
  std::vector<bool> mapped_;
};

// A cuMemMap refused for the second segment: a registration across both is refused as a hole
// on every thread (never a registration of unmapped memory), the first segment alone
// registers, and once the application maps the second the range registers: the refusal was
// not remembered.
TEST(CudaVmmFailures, AFailedMapLeavesAHoleThatIsRefusedUntilMapped) {
  DomainPtr domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  Reservation memory(2);
  ASSERT_EQ(memory.map(0), 0);
  {
    FailingCall failing("cuMemMap", kCudaErrorOutOfMemory);
    ASSERT_EQ(memory.map(1), kCudaErrorOutOfMemory);
  }
  const std::vector<std::string> refused = on_threads([&](int) -> std::string {
    hmr_mr* mr = nullptr;
    std::string why = reason_unless(
        register_attr(domain.get(), memory.at(0), 2 * kSegment, HMR_HMEM_SYSTEM, 0, 0, &mr),
        HMR_EFAULT, "has a hole there");
    if (mr != nullptr) why += " (and *mr was written)";
    hmr_mr* first = nullptr;
    if (register_attr(domain.get(), memory.at(0), kSegment, HMR_HMEM_SYSTEM, 0, 0, &first) != 0) {
      return why + " the first segment alone: " + hmr_last_error();
    }
    MrPtr owned(first);
    return why;
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(refused[static_cast<size_t>(i)], "") << i;

  ASSERT_EQ(memory.map(1), 0);
  const std::vector<std::string> failures = on_threads([&](int) -> std::string {
    hmr_mr* mr = nullptr;
    if (register_attr(domain.get(), memory.at(0), 2 * kSegment, HMR_HMEM_SYSTEM, 0, 0, &mr) != 0) {
      return hmr_last_error();
    }
    MrPtr owned(mr);
    return {};
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  ASSERT_EQ(hmr_domain_cache_flush(domain.get()), 0) << hmr_last_error();
}

// A cuMemUnmap refused: the segment is still mapped, so its cached registration still serves
// it (the same key on every thread).  The unmap then succeeds: no thread is handed the cached
// registration of memory that is gone, and memory mapped there again gets a new registration.
TEST(CudaVmmFailures, AFailedUnmapKeepsTheRegistrationAndASuccessfulOneEndsIt) {
  DomainPtr domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  Reservation memory(1);
  ASSERT_EQ(memory.map(0), 0);
  uint64_t key = 0;
  {
    MrPtr mr = register_ok(domain.get(), memory.at(0), kSegment);
    ASSERT_TRUE(mr);
    key = hmr_mr_key(mr.get());
  }
  {
    FailingCall failing("cuMemUnmap", kCudaErrorNotPermitted);
    ASSERT_EQ(memory.unmap(0), kCudaErrorNotPermitted);
  }
  const std::vector<std::string> kept = on_threads([&](int) -> std::string {
    hmr_mr* mr = nullptr;
    if (register_attr(domain.get(), memory.at(0), kSegment, HMR_HMEM_SYSTEM, 0, 0, &mr) != 0) {
      return hmr_last_error();
    }
    MrPtr owned(mr);
    if (hmr_mr_key(mr) != key) return "another registration of unchanged memory";
    return {};
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(kept[static_cast<size_t>(i)], "") << i;

  ASSERT_EQ(memory.unmap(0), 0);
  // What is left is a hole of the reservation: no CUDA memory.  Whether the NIC takes that
  // address as host memory is the NIC's to say (the sim NIC does; a kernel refuses
  // PROT_NONE pages); hmr must only never hand out the registration of what was unmapped.
  const std::vector<std::string> gone = on_threads([&](int) -> std::string {
    hmr_mr* mr = nullptr;
    if (register_attr(domain.get(), memory.at(0), kSegment, HMR_HMEM_SYSTEM, 0, 0, &mr) == 0) {
      MrPtr owned(mr);
      if (hmr_mr_key(mr) == key) return "the cached registration of unmapped memory";
    }
    return {};
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(gone[static_cast<size_t>(i)], "") << i;
  ASSERT_EQ(hmr_domain_cache_flush(domain.get()), 0) << hmr_last_error();

  ASSERT_EQ(memory.map(0), 0);
  MrPtr again = register_ok(domain.get(), memory.at(0), kSegment);
  ASSERT_TRUE(again);
  EXPECT_NE(hmr_mr_key(again.get()), key) << "the registration of the unmapped memory came back";
  again.reset();
  ASSERT_EQ(hmr_domain_cache_flush(domain.get()), 0) << hmr_last_error();
}

// A cuMemSetAccess refused: the segment is mapped but no copy may reach it, so the host shadow
// of a domain without dma-buf cannot be filled: each thread's registration fails naming the
// copy, and nothing is left at the NIC.
TEST(CudaVmmFailures, MemoryWithoutAccessGetsNoShadow) {
  CountingNic nic;
  hmr_nic_callbacks callbacks = nic.callbacks(HMR_NIC_CB_PINS_HOST_MEMORY);
  DomainPtr domain = open_callback_domain(callbacks, HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);
  Reservation memory(1);
  {
    FailingCall failing("cuMemSetAccess", kCudaErrorInvalidDevice);
    ASSERT_EQ(memory.map(0), kCudaErrorInvalidDevice);
  }
  const std::vector<std::string> failures = on_threads([&](int) -> std::string {
    hmr_mr* mr = nullptr;
    std::string why = reason_unless(
        register_attr(domain.get(), memory.at(0), kSegment, HMR_HMEM_SYSTEM, 0, 0, &mr),
        HMR_EINVAL, "cuMemcpyDtoH");
    if (mr != nullptr) why += " (and *mr was written)";
    return why;
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  EXPECT_EQ(nic.held.load(), 0);
}

}  // namespace
}  // namespace hmr_hmem_test
