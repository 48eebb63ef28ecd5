// UCX-style queries through the public ABI: hmr_mem_query and hmr_detect_memory_type on host,
// device, managed and host-alloc memory, and hmr_mem_alloc / hmr_mem_free on an iface.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

constexpr size_t kAlloc = 64 * 1024;

hmr_mem_attr query(const void* addr, size_t len, uint64_t fields = 0) {
  hmr_mem_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.field_mask = fields;
  EXPECT_EQ(hmr_mem_query(addr, len, &attr), 0) << hmr_last_error();
  return attr;
}


TEST(MemoryQuery, HostMemoryIsSystemWithItsNumaNodeOnDemand) {
  std::vector<char> host(10000, 1);
  const hmr_mem_attr plain = query(host.data() + 5, 100);
  EXPECT_EQ(plain.iface, HMR_HMEM_SYSTEM);
  EXPECT_EQ(plain.kind, HMR_MEM_HOST);
  EXPECT_EQ(plain.device, 0u);
  EXPECT_EQ(plain.alloc_id, 0u);
  EXPECT_LE(reinterpret_cast<uintptr_t>(plain.base), reinterpret_cast<uintptr_t>(host.data() + 5));
  EXPECT_STREQ(plain.sys_dev, "");  // not asked for
  EXPECT_EQ(plain.numa_node, -1);
  EXPECT_EQ(plain.dmabuf_fd, -1);

  const hmr_mem_attr located = query(host.data(), 100, HMR_MEM_ATTR_SYS_DEV | HMR_MEM_ATTR_DMABUF);
  if (located.numa_node >= 0) {
    EXPECT_EQ(std::string(located.sys_dev), "numa:" + std::to_string(located.numa_node));
  } else {
    EXPECT_STREQ(located.sys_dev, "") << "no NUMA answer from this kernel";
  }
  EXPECT_EQ(located.dmabuf_fd, -1) << "host memory is registered by address, never exported";
  expect_type(host.data(), HMR_HMEM_SYSTEM, HMR_MEM_HOST);
}

// A child forked from a process that used the driver (a data loader's worker) cannot use the
// driver: it answers NOT_INITIALIZED to everything (driver 580 on an H200, docs/gpu.md; the
// fake does the same).  Host memory in the child must still be host memory to hmr, and
// register through a domain the child opens, rather than fail because the CUDA iface cannot
// answer.  (The parent's domain is refused in the child: ForkedChild.* in forked_child_test.)
TEST(MemoryQuery, AForkedChildOfTheDriversProcessStillRegistersHostMemory) {
  FakeAllocation device(0, kAlloc);  // the parent uses the driver
  constexpr size_t kLen = 4 * 4096;
  void* host = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(host, MAP_FAILED);
  std::memset(host, 1, kLen);
  hmr_test::DomainPtr domain = open_domain(nullptr);
  ASSERT_NE(domain, nullptr);
  expect_type(host, HMR_HMEM_SYSTEM, HMR_MEM_HOST);
  expect_type(device.get(), HMR_HMEM_CUDA, HMR_MEM_DEVICE_ONLY);

  enum : int { kDetectFailed = 1, kNotSystem = 2, kRegFailed = 4 };
  const int failed = hmr_test::run_forked([&] {
    int wrong = 0;
    hmr_hmem_iface iface = HMR_HMEM_CUDA;
    hmr_mem_kind kind = HMR_MEM_DEVICE_ONLY;
    if (hmr_detect_memory_type(host, kLen, &iface, &kind) != 0) {
      wrong |= kDetectFailed;
    } else if (iface != HMR_HMEM_SYSTEM || kind != HMR_MEM_HOST) {
      wrong |= kNotSystem;
    }
    hmr_test::DomainPtr own = open_child_domain(nullptr);
    hmr_mr* mr = nullptr;
    if (!own || hmr_mr_reg(own.get(), host, kLen, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
      wrong |= kRegFailed;
    } else {
      hmr_mr_close(mr);
    }
    return wrong;
  });
  ASSERT_GE(failed, 0) << "the child could not be forked, or died of a signal";
  EXPECT_EQ(failed & kDetectFailed, 0) << "hmr_detect_memory_type failed in the child";
  EXPECT_EQ(failed & kNotSystem, 0) << "host memory was not system memory in the child";
  EXPECT_EQ(failed & kRegFailed, 0) << "hmr_mr_reg of host memory failed in the child";
  // The parent's driver still answers.
  expect_type(device.get(), HMR_HMEM_CUDA, HMR_MEM_DEVICE_ONLY);
  munmap(host, kLen);
}

TEST(MemoryQuery, DeviceMemoryInOneCallWithBusIdAndADmabufOfTheRange) {
  FakeAllocation device(1, kAlloc);
  FakeAllocation exportable(0, kAlloc);
  const hmr_mem_attr attr = query(static_cast<char*>(device.get()) + 100, 50,
                                  HMR_MEM_ATTR_SYS_DEV);
  EXPECT_EQ(attr.iface, HMR_HMEM_CUDA);
  EXPECT_EQ(attr.kind, HMR_MEM_DEVICE_ONLY);
  EXPECT_EQ(attr.device, 1u);
  EXPECT_EQ(attr.base, device.get());
  EXPECT_EQ(attr.alloc_len, kAlloc);
  EXPECT_NE(attr.alloc_id, 0u);
  EXPECT_STREQ(attr.sys_dev, "0000:65:00.0");
  EXPECT_EQ(attr.numa_node, -1);
  EXPECT_EQ(attr.dmabuf_fd, -1);  // not asked for

  const int fds = open_fd_count();
  const hmr_mem_attr exported =
      query(static_cast<char*>(exportable.get()) + 4096 + 16, 64, HMR_MEM_ATTR_DMABUF);
  ASSERT_GE(exported.dmabuf_fd, 0);
  EXPECT_EQ(exported.dmabuf_offset, 16u);  // inside the exported (page-rounded) range
  EXPECT_EQ(open_fd_count(), fds + 1);
  close(exported.dmabuf_fd);
  expect_type(device.get(), HMR_HMEM_CUDA, HMR_MEM_DEVICE_ONLY);
}

TEST(MemoryQuery, ManagedAndHostAllocMemoryAreToldApart) {
  FakeAllocation managed(0, kAlloc, FAKE_CUDA_MEM_MANAGED);
  FakeAllocation pinned(1, kAlloc, FAKE_CUDA_MEM_HOST);
  EXPECT_EQ(query(managed.get(), 1).kind, HMR_MEM_MANAGED);
  EXPECT_EQ(query(pinned.get(), 1).kind, HMR_MEM_HOST_ALLOC);
  EXPECT_EQ(query(pinned.get(), 1).device, 1u);
  expect_type(managed.get(), HMR_HMEM_CUDA, HMR_MEM_MANAGED);
  expect_type(pinned.get(), HMR_HMEM_CUDA, HMR_MEM_HOST_ALLOC);
}

TEST(MemoryQuery, IdentityChangesWhenAnAddressIsFreedAndReused) {
  auto first = std::make_unique<FakeAllocation>(0, kAlloc);
  const uint64_t id = query(first->get(), 1).alloc_id;
  const unsigned long long address = first->address();
  first->free_now();
  FakeAllocation second(0, kAlloc);
  ASSERT_EQ(second.address(), address) << "the fake hands a freed address out first";
  EXPECT_NE(query(second.get(), 1).alloc_id, id);
}

TEST(MemoryQuery, MemAllocGivesEachKindOfEachIface) {
  struct Case {
    hmr_hmem_iface iface;
    hmr_mem_kind kind;
  };
  for (const Case& c : {Case{HMR_HMEM_CUDA, HMR_MEM_DEVICE_ONLY}, Case{HMR_HMEM_CUDA, HMR_MEM_HOST_ALLOC},
                        Case{HMR_HMEM_CUDA, HMR_MEM_MANAGED}, Case{HMR_HMEM_SYSTEM, HMR_MEM_HOST}}) {
    SCOPED_TRACE(std::to_string(c.iface) + "/" + std::to_string(c.kind));
    void* memory = nullptr;
    ASSERT_HMR_OK(hmr_mem_alloc(c.iface, 0, 12345, c.kind, &memory));
    ASSERT_NE(memory, nullptr);
    expect_type(memory, c.iface, c.kind);
    if (c.kind != HMR_MEM_DEVICE_ONLY) std::memset(memory, 0x5a, 12345);  // the CPU may touch it
    ASSERT_HMR_OK(hmr_mem_free(c.iface, memory));
  }
}

}  // namespace
}  // namespace hmr_hmem_test
