// The GPU lane, the CUDA iface itself: detection, VMM ranges, dma-buf export, alloc ids,
// copies and capabilities against the real driver (tests/gpu/gpu_lane.h, README.md).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "hmem/page_range.h"
#include "tests/gpu/gpu_lane.h"
#include "tests/gpu/vmm_allocation.h"

namespace hmr::cuda {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::CudaGpuLane;
using hmr::testing::VmmAllocation;

void* as_pointer(CUdeviceptr address) { return hmr::testing::as_device_pointer(address); }

// The size a dma-buf fd covers, and whether the kernel calls it a dma-buf at all: a dma-buf's
// /proc/self/fdinfo entry has "size:" and "exp_name:" lines (a memfd has neither).
struct FdInfo {
  bool dmabuf = false;
  std::string exporter;
  unsigned long long size = 0;
};

FdInfo read_fdinfo(int fd) {
  FdInfo info;
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(fd));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("exp_name:", 0) == 0) {
      info.dmabuf = true;
      info.exporter = line.substr(9);
    } else if (line.rfind("size:", 0) == 0) {
      info.size = std::strtoull(line.c_str() + 5, nullptr, 10);
    }
  }
  return info;
}

TEST_F(CudaGpuLane, DeviceMemoryIsDeviceOnlyWithItsOrdinalAndLength) {
  for (int ordinal = 0; ordinal < devices() && ordinal < 2; ++ordinal) {
    SCOPED_TRACE("device " + std::to_string(ordinal));
    CUcontext own = nullptr;
    HMR_CU_ASSERT(driver().cuDevicePrimaryCtxRetain(&own, ordinal));
    HMR_CU_ASSERT(driver().cuCtxSetCurrent(own));
    const size_t size = (3 << 20) + 123;
    CUdeviceptr memory = 0;
    HMR_CU_ASSERT(driver().cuMemAlloc(&memory, size));
    Result<PointerInfo> info = query(memory + 64, 1000);
    HMR_CU_ASSERT(driver().cuMemFree(memory));
    HMR_CU_ASSERT(driver().cuCtxSetCurrent(context_));
    HMR_CU_ASSERT(driver().cuDevicePrimaryCtxRelease(ordinal));
    ASSERT_TRUE(info.ok()) << info.status().reason();
    EXPECT_EQ(info->iface, HMR_HMEM_CUDA);
    EXPECT_EQ(info->kind, MemoryKind::device_only);
    EXPECT_EQ(info->device, DeviceId{static_cast<uint64_t>(ordinal)});
    EXPECT_EQ(info->base, memory);
    EXPECT_EQ(info->alloc_len, size);
    EXPECT_NE(info->alloc_id, 0u);
    EXPECT_FALSE(info->sys_dev.empty());
  }
}

TEST_F(CudaGpuLane, ManagedMemoryIsManagedAndNeverExported) {
  CUdeviceptr memory = 0;
  HMR_CU_ASSERT(driver().cuMemAllocManaged(&memory, 1 << 20, CU_MEM_ATTACH_GLOBAL));
  Result<PointerInfo> info = query(memory, 4096);
  Result<DmabufExport> exported = iface().export_dmabuf({as_pointer(memory), 4096});
  HMR_CU_ASSERT(driver().cuMemFree(memory));
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->kind, MemoryKind::managed);
  EXPECT_EQ(info->base, memory);
  EXPECT_EQ(info->alloc_len, size_t{1} << 20);
  EXPECT_EQ(exported.status().code(), HMR_EOPNOTSUPP);
}

TEST_F(CudaGpuLane, HostAllocatedAndHostRegisteredMemoryIsHostAlloc) {
  void* pinned = nullptr;
  const size_t pinned_size = (3 << 20) + 100;
  HMR_CU_ASSERT(driver().cuMemHostAlloc(&pinned, pinned_size, CU_MEMHOSTALLOC_PORTABLE));
  Result<PointerInfo> info = iface().query(static_cast<char*>(pinned) + (2 << 20), 4096);
  HMR_CU_ASSERT(driver().cuMemFreeHost(pinned));
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->kind, MemoryKind::host_alloc);
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(pinned));
  EXPECT_EQ(info->alloc_len, pinned_size);

  const size_t size = 1 << 20;
  void* host = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(host, MAP_FAILED);
  EXPECT_EQ(iface().query(host, 4096).status().code(), HMR_ENOENT);  // ordinary memory
  Status registered = iface().host_register(host, size);
  EXPECT_TRUE(registered.ok()) << registered.reason();
  Result<PointerInfo> pinned_info = iface().query(host, 4096);
  EXPECT_EQ(iface().host_register(static_cast<char*>(host) + 4096, 4096).code(), HMR_EALREADY);
  Status unregistered = iface().host_unregister(host);
  EXPECT_TRUE(unregistered.ok()) << unregistered.reason();
  EXPECT_EQ(iface().query(host, 4096).status().code(), HMR_ENOENT);
  munmap(host, size);
  ASSERT_TRUE(pinned_info.ok()) << pinned_info.status().reason();
  EXPECT_EQ(pinned_info->kind, MemoryKind::host_alloc);
  EXPECT_EQ(pinned_info->base, reinterpret_cast<uintptr_t>(host));
  EXPECT_EQ(pinned_info->alloc_len, size);
}

// Stream-ordered pool memory (cuMemAllocAsync, PyTorch's cudaMallocAsync backend): the driver's
// MAPPING attributes name the pool's chunk, not the allocation; hmr must still report one
// allocation, with one id, from wherever in it it is asked.
TEST_F(CudaGpuLane, PoolMemoryIsOneAllocationFromWhereverItIsAsked) {
  const std::optional<hmr::testing::PoolCalls> calls = hmr::testing::pool_calls();
  if (HasFailure()) return;
  if (!calls) GTEST_SKIP() << "the driver has no stream-ordered allocator";
  const auto alloc_async = calls->alloc_async;
  const auto free_async = calls->free_async;
  const auto synchronize = calls->synchronize;
  const size_t size = size_t{100} << 20;
  CUdeviceptr memory = 0;
  HMR_CU_ASSERT(alloc_async(&memory, size, nullptr));
  HMR_CU_ASSERT(synchronize(nullptr));
  Result<PointerInfo> start = query(memory, 4096);
  Result<PointerInfo> middle = query(memory + (50 << 20), 4096);
  Result<PointerInfo> across = query(memory + (20 << 20), size_t{60} << 20);
  CUdeviceptr mapping_base = 0;
  size_t mapping_size = 0;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                      CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
  void* data[] = {&mapping_base, &mapping_size};
  (void)driver().cuPointerGetAttributes(2, attributes, data, memory + (50 << 20));
  std::printf("cuMemAllocAsync of %zu bytes at 0x%llx: at +50 MiB the mapping is [0x%llx, +%zu)\n",
              size, memory, mapping_base, mapping_size);
  HMR_CU_ASSERT(free_async(memory, nullptr));
  HMR_CU_ASSERT(synchronize(nullptr));
  ASSERT_TRUE(start.ok()) << start.status().reason();
  ASSERT_TRUE(middle.ok()) << middle.status().reason();
  ASSERT_TRUE(across.ok()) << across.status().reason();
  for (const PointerInfo& info : {*start, *middle, *across}) {
    EXPECT_EQ(info.base, memory);
    EXPECT_EQ(info.alloc_len, size);
    EXPECT_EQ(info.alloc_id, start->alloc_id);
  }
}

// Small allocations, from cuMemAlloc and from the stream-ordered pool: where the driver places
// them (printed: whether they share pages and 2 MiB mappings, which the fake's models assume;
// docs/gpu.md), and what hmr must make of them wherever they are — each one allocation with its
// own base, length and id — and whether a page-rounded dma-buf export of one, which covers its
// neighbours' bytes where they share a page, is accepted (printed: the fake accepts it).
TEST_F(CudaGpuLane, SmallAllocationsAreOneAllocationEachWhereverTheDriverPlacesThem) {
  const std::optional<hmr::testing::PoolCalls> calls = hmr::testing::pool_calls();
  if (HasFailure()) return;
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok()) << caps.status().reason();
  constexpr size_t kSmall = 1000;
  constexpr int kCount = 3;
  for (const bool pooled : {false, true}) {
    if (pooled && !calls) {
      std::printf("the driver has no stream-ordered allocator: pool half not run\n");
      break;
    }
    const char* what = pooled ? "cuMemAllocAsync" : "cuMemAlloc";
    SCOPED_TRACE(what);
    CUdeviceptr memory[kCount] = {};
    for (CUdeviceptr& address : memory) {
      if (pooled) {
        HMR_CU_ASSERT(calls->alloc_async(&address, kSmall, nullptr));
      } else {
        HMR_CU_ASSERT(driver().cuMemAlloc(&address, kSmall));
      }
    }
    if (pooled) {
      HMR_CU_ASSERT(calls->synchronize(nullptr));
    }
    std::vector<uint64_t> ids;
    for (int i = 0; i < kCount; ++i) {
      CUdeviceptr mapping_base = 0;
      size_t mapping_size = 0;
      CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                          CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
      void* data[] = {&mapping_base, &mapping_size};
      const CUresult asked = driver().cuPointerGetAttributes(2, attributes, data, memory[i]);
      std::printf("%s of %zu bytes #%d at 0x%llx (+%lld from the first): mapping [0x%llx, +%zu) "
                  "(cuPointerGetAttributes -> %d)\n",
                  what, kSmall, i, memory[i], static_cast<long long>(memory[i] - memory[0]),
                  mapping_base, mapping_size, static_cast<int>(asked));
      Result<PointerInfo> info = query(memory[i], kSmall);
      ASSERT_TRUE(info.ok()) << info.status().reason();
      EXPECT_EQ(info->base, memory[i]);
      EXPECT_EQ(info->alloc_len, kSmall);
      for (const uint64_t id : ids) EXPECT_NE(info->alloc_id, id);
      ids.push_back(info->alloc_id);
      if (!caps->dmabuf.supported) continue;
      Result<DmabufExport> exported = iface().export_dmabuf({as_pointer(memory[i]), kSmall});
      if (exported.ok()) {
        std::printf("  its page-rounded dma-buf export: %zu bytes, the allocation at +%llu\n",
                    exported->exported_len, static_cast<unsigned long long>(exported->offset));
        EXPECT_EQ(exported->offset, memory[i] % hmem::host_page_size());
      } else {
        std::printf("  its page-rounded dma-buf export was refused: %s\n",
                    exported.status().reason().c_str());
        EXPECT_FALSE(exported.status().reason().empty());
      }
    }
    for (const CUdeviceptr address : memory) {
      if (pooled) {
        HMR_CU_ASSERT(calls->free_async(address, nullptr));
      } else {
        HMR_CU_ASSERT(driver().cuMemFree(address));
      }
    }
    if (pooled) {
      HMR_CU_ASSERT(calls->synchronize(nullptr));
    }
  }
}

TEST_F(CudaGpuLane, VmmSegmentsAreDetectedAsTheWholeMappedRange) {
  bool rdma = false;
  if (!vmm_supported(0, &rdma)) GTEST_SKIP() << "device 0 has no VMM support";
  Result<VmmAllocation> created = VmmAllocation::create(driver(), 0, 2, 1, 1, rdma);
  ASSERT_TRUE(created.ok()) << created.status().reason();
  VmmAllocation& memory = *created;
  const size_t segment = memory.segment_size();

  // The driver fact this is about: cuMemGetAddressRange answers for one segment only.
  CUdeviceptr base = 0;
  size_t size = 0;
  HMR_CU_ASSERT(driver().cuMemGetAddressRange(&base, &size, memory.base()));
  EXPECT_EQ(base, memory.base());
  EXPECT_EQ(size, segment);

  Result<PointerInfo> whole = query(memory.base() + 100, 2 * segment - 200);
  ASSERT_TRUE(whole.ok()) << whole.status().reason();
  EXPECT_EQ(whole->kind, MemoryKind::device_only);
  EXPECT_EQ(whole->device, DeviceId{0});
  EXPECT_EQ(whole->base, memory.base());
  EXPECT_EQ(whole->alloc_len, 2 * segment);

  // hmr's assumption: each mapping has its own BUFFER_ID, new when a segment is remapped.
  Result<PointerInfo> first = query(memory.segment(0), 64);
  Result<PointerInfo> second = query(memory.segment(1), 64);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(first->alloc_id, second->alloc_id);
  ASSERT_TRUE(memory.unmap_segment(1).ok());
  Result<PointerInfo> holed = query(memory.base(), 2 * segment);
  EXPECT_EQ(holed.status().code(), HMR_EFAULT) << holed.status().reason();
  ASSERT_TRUE(memory.map_segment(1).ok());
  Result<PointerInfo> remapped = query(memory.base() + 100, 2 * segment - 200);
  ASSERT_TRUE(remapped.ok()) << remapped.status().reason();
  EXPECT_NE(remapped->alloc_id, whole->alloc_id);
  EXPECT_EQ(query(memory.segment(0), 64)->alloc_id, first->alloc_id);
}

TEST_F(CudaGpuLane, RealDmabufExportCoversThePageRoundedRange) {
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok()) << caps.status().reason();
  if (!caps->dmabuf.supported) GTEST_SKIP() << "device 0: " << caps->dmabuf.reason;
  const size_t page = hmem::host_page_size();

  CUdeviceptr memory = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&memory, 4 << 20));
  Result<DmabufExport> exported = iface().export_dmabuf({as_pointer(memory + page + 5), 2 * page});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  const FdInfo info = read_fdinfo(exported->fd.get());
  EXPECT_TRUE(info.dmabuf) << "fd " << exported->fd.get() << " has no exp_name: not a dma-buf";
  EXPECT_EQ(info.size, 3 * page);
  EXPECT_EQ(exported->exported_len, 3 * page);
  EXPECT_EQ(exported->offset, 5u);
  EXPECT_EQ(lseek(exported->fd.get(), 0, SEEK_END), static_cast<off_t>(3 * page));
  RecordProperty("dmabuf_exporter", info.exporter);
  exported->fd.reset();  // closed before the memory goes
  HMR_CU_ASSERT(driver().cuMemFree(memory));

  bool rdma = false;
  if (!vmm_supported(0, &rdma) || !rdma) {  // VMM export needs GPUDirect-capable segments
    std::printf("device 0: no GPUDirect RDMA VMM memory; the VMM half of this test did not run\n");
    return;
  }
  Result<VmmAllocation> vmm = VmmAllocation::create(driver(), 0, 2, 1, 1, true);
  ASSERT_TRUE(vmm.ok()) << vmm.status().reason();
  const size_t segment = vmm->segment_size();
  Result<DmabufExport> spanning =
      iface().export_dmabuf({as_pointer(vmm->base() + segment - page), 2 * page});
  ASSERT_TRUE(spanning.ok()) << spanning.status().reason();
  const FdInfo across = read_fdinfo(spanning->fd.get());
  EXPECT_TRUE(across.dmabuf);
  EXPECT_EQ(across.size, 2 * page);  // exactly the range: not one segment, not the reservation
}

// A thread with no current context (hmr-perftest's, after hmr_mem_alloc gave its borrowed
// context back): the driver refuses cuMemGetAddressRange there, so hmr must lend one for queries
// and exports, and leave the thread without a context afterwards.
TEST_F(CudaGpuLane, QueriesAndExportsWorkOnAThreadWithNoCurrentContext) {
  CUdeviceptr memory = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&memory, 2 << 20));
  HMR_CU_ASSERT(driver().cuCtxSetCurrent(nullptr));

  // The driver facts: what each call gives without a context (printed for docs/gpu.md).
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult range = driver().cuMemGetAddressRange(&base, &size, memory);
  int fd = -1;
  const CUresult handle = driver().cuMemGetHandleForAddressRange == nullptr
                              ? CUDA_ERROR_NOT_SUPPORTED
                              : driver().cuMemGetHandleForAddressRange(
                                    &fd, memory, 1 << 20, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (fd >= 0) close(fd);
  std::printf("without a current context: cuMemGetAddressRange -> %d, "
              "cuMemGetHandleForAddressRange -> %d\n", static_cast<int>(range),
              static_cast<int>(handle));

  Result<PointerInfo> info = query(memory + 4096, 4096);
  EXPECT_TRUE(info.ok()) << info.status().reason();
  if (info.ok()) {
    EXPECT_EQ(info->base, memory);
    EXPECT_EQ(info->alloc_len, size_t{2} << 20);
  }
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok()) << caps.status().reason();
  if (caps->dmabuf.supported) {
    Result<DmabufExport> exported = iface().export_dmabuf({as_pointer(memory), 1 << 20});
    EXPECT_TRUE(exported.ok()) << exported.status().reason();
  }
  CUcontext current = reinterpret_cast<CUcontext>(1);
  HMR_CU_ASSERT(driver().cuCtxGetCurrent(&current));
  EXPECT_EQ(current, nullptr) << "hmr left its borrowed context current";
  HMR_CU_ASSERT(driver().cuCtxSetCurrent(context_));
  HMR_CU_ASSERT(driver().cuMemFree(memory));
}

TEST_F(CudaGpuLane, FreeAndReallocationChangesTheAllocId) {
  const size_t size = 2 << 20;
  CUdeviceptr first = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&first, size));
  Result<PointerInfo> before = query(first, 64);
  ASSERT_TRUE(before.ok()) << before.status().reason();
  HMR_CU_ASSERT(driver().cuMemFree(first));
  EXPECT_EQ(query(first, 64).status().code(), HMR_ENOENT);

  CUdeviceptr second = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&second, size));
  Result<PointerInfo> after = query(second, 64);
  HMR_CU_ASSERT(driver().cuMemFree(second));
  ASSERT_TRUE(after.ok()) << after.status().reason();
  EXPECT_NE(after->alloc_id, before->alloc_id);
  RecordProperty("same_address_reused", second == first ? "yes" : "no");
  if (second != first) {
    std::printf("note: the driver did not hand the freed address out again (0x%llx, 0x%llx)\n",
                first, second);
  }
}

TEST_F(CudaGpuLane, CopiesRoundTripAndLeaveTheCallersContext) {
  struct Case {
    MemoryKind kind;
    size_t size;
  };
  for (const Case c : {Case{MemoryKind::device_only, 3 << 20}, Case{MemoryKind::managed, 1 << 20},
                       Case{MemoryKind::host_alloc, 1 << 20}}) {
    SCOPED_TRACE(hmem::memory_kind_name(c.kind));
    const int device = devices() > 1 ? 1 : 0;  // another device than the current context's
    Result<void*> memory = iface().mem_alloc(DeviceId{static_cast<uint64_t>(device)}, c.size,
                                             c.kind);
    ASSERT_TRUE(memory.ok()) << memory.status().reason();
    Result<PointerInfo> info = iface().query(*memory, c.size);
    ASSERT_TRUE(info.ok()) << info.status().reason();
    EXPECT_EQ(info->kind, c.kind);
    std::vector<unsigned char> sent(c.size - 100);
    for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<unsigned char>(i * 13 + 7);
    void* target = static_cast<char*>(*memory) + 100;
    Status to = iface().copy_to_device(target, sent.data(), sent.size());
    EXPECT_TRUE(to.ok()) << to.reason();
    std::vector<unsigned char> received(sent.size(), 0);
    Status from = iface().copy_from_device(received.data(), target, received.size());
    EXPECT_TRUE(from.ok()) << from.reason();
    EXPECT_TRUE(received == sent);
    CUcontext current = nullptr;
    HMR_CU_ASSERT(driver().cuCtxGetCurrent(&current));
    EXPECT_EQ(current, context_);
    Status freed = iface().mem_free(*memory);
    EXPECT_TRUE(freed.ok()) << freed.reason();
  }

  bool rdma = false;
  if (!vmm_supported(0, &rdma)) return;
  Result<VmmAllocation> vmm = VmmAllocation::create(driver(), 0, 2, 1, 1, rdma);
  ASSERT_TRUE(vmm.ok()) << vmm.status().reason();
  std::vector<unsigned char> sent(8192, 0x3c);
  void* boundary = as_pointer(vmm->segment(1) - 4096);  // across two segments
  ASSERT_TRUE(iface().copy_to_device(boundary, sent.data(), sent.size()).ok());
  std::vector<unsigned char> received(sent.size(), 0);
  ASSERT_TRUE(iface().copy_from_device(received.data(), boundary, received.size()).ok());
  EXPECT_TRUE(received == sent);
}

TEST_F(CudaGpuLane, CapabilitiesAnswerPerDeviceWithReasons) {
  for (int ordinal = 0; ordinal < devices(); ++ordinal) {
    Result<hmem::DeviceCapabilities> caps =
        iface().capabilities(DeviceId{static_cast<uint64_t>(ordinal)});
    ASSERT_TRUE(caps.ok()) << caps.status().reason();
    for (const hmem::Capability* capability : {&caps->dmabuf, &caps->peer_direct, &caps->ipc}) {
      EXPECT_EQ(capability->supported, capability->reason.empty()) << capability->reason;
    }
    std::printf("cuda device %d: dma-buf %s%s; peer-direct %s%s\n", ordinal,
                caps->dmabuf.supported ? "yes" : "no: ", caps->dmabuf.reason.c_str(),
                caps->peer_direct.supported ? "yes" : "no: ", caps->peer_direct.reason.c_str());
  }
  EXPECT_EQ(iface().capabilities(DeviceId{static_cast<uint64_t>(devices())}).status().code(),
            HMR_EINVAL);
}

}  // namespace
}  // namespace hmr::cuda
