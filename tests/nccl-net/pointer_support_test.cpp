// What the plugin tells NCCL it may register (plugins/nccl-net/net/pointer_support.h): GPU
// memory as NCCL_PTR_CUDA only where hmr registers a bare CUDA pointer itself on every device.
// NCCL 2.28 turns GPU Direct RDMA on from NCCL_PTR_CUDA alone and then hands regMr device
// pointers, so saying it where hmr cannot failed the communicator instead of staging.
#include <gtest/gtest.h>

#include "abi/nccl_net_common.h"
#include "../scoped_env.h"
#include "net/pointer_support.h"

namespace hmr::nccl {
namespace {

using hmr_test::ScopedEnv;

constexpr uint64_t kCuda = HMR_HMEM_IFACE_BIT(HMR_HMEM_CUDA);
constexpr uint64_t kSystem = HMR_HMEM_IFACE_BIT(HMR_HMEM_SYSTEM);

// A domain as hmr_md_query would describe it: CUDA loaded or not, the NIC importing dma-bufs
// or not, and the device memory that reaches it by each path.
hmr_md_attr domain(bool cuda_loaded, bool nic_imports_dmabuf, uint64_t dmabuf_mem_types,
                   uint64_t peer_direct_mem_types) {
  hmr_md_attr md{};
  md.size = sizeof md;
  md.reg_mem_types = kSystem | (cuda_loaded ? kCuda : 0);
  md.flags = nic_imports_dmabuf ? HMR_MD_FLAG_DMABUF : 0;
  md.dmabuf_mem_types = dmabuf_mem_types;
  md.peer_direct_mem_types = peer_direct_mem_types;
  return md;
}

TEST(PointerSupport, HostOnlyWithoutCuda) {
  EXPECT_EQ(pointer_support(domain(false, true, 0, 0), true), NCCL_PTR_HOST);
}

TEST(PointerSupport, CudaWhereHmrExportsAndTheNicImports) {
  EXPECT_EQ(pointer_support(domain(true, true, kCuda, 0), true),
            NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF);
}

// The NIC imports dma-bufs, but the GPUs cannot export them (CUDA's proprietary kernel module:
// DMA_BUF_SUPPORTED 0) and nvidia-peermem is not there: NCCL is not told NCCL_PTR_CUDA, so it
// stages through host memory (it still sees NCCL_PTR_DMABUF, and checks its own export).
TEST(PointerSupport, NoCudaWhereNoDeviceCanExportAndNoPeerDirect) {
  EXPECT_EQ(pointer_support(domain(true, true, 0, 0), true), NCCL_PTR_HOST | NCCL_PTR_DMABUF);
}

// NCCL_DMABUF_ENABLE=0 turns hmr's own export off as it turns off NCCL's.
TEST(PointerSupport, NcclDmabufEnableZeroRulesOutHmrsExport) {
  EXPECT_EQ(pointer_support(domain(true, true, kCuda, 0), false), NCCL_PTR_HOST | NCCL_PTR_DMABUF);
}

TEST(PointerSupport, PeerDirectGivesCudaWhateverDmabufSays) {
  EXPECT_EQ(pointer_support(domain(true, false, 0, kCuda), true), NCCL_PTR_HOST | NCCL_PTR_CUDA);
  EXPECT_EQ(pointer_support(domain(true, false, 0, kCuda), false), NCCL_PTR_HOST | NCCL_PTR_CUDA);
}

TEST(PointerSupport, OtherRuntimesMemoryIsNotCuda) {
  const uint64_t rocr = HMR_HMEM_IFACE_BIT(HMR_HMEM_ROCR);
  EXPECT_EQ(pointer_support(domain(true, true, rocr, rocr), true), NCCL_PTR_HOST | NCCL_PTR_DMABUF);
}

TEST(PointerSupport, NcclDmabufEnableIsReadAsNcclReadsIt) {
  {
    const ScopedEnv unset("NCCL_DMABUF_ENABLE", nullptr);
    EXPECT_TRUE(nccl_dmabuf_enabled());
  }
  for (const char* off : {"0", "0x0", "00"}) {
    const ScopedEnv value("NCCL_DMABUF_ENABLE", off);
    EXPECT_FALSE(nccl_dmabuf_enabled()) << off;
  }
  for (const char* on : {"1", "2", "", "yes", "0 "}) {  // not a number: NCCL's default, on
    const ScopedEnv value("NCCL_DMABUF_ENABLE", on);
    EXPECT_TRUE(nccl_dmabuf_enabled()) << "'" << on << "'";
  }
}

}  // namespace
}  // namespace hmr::nccl
