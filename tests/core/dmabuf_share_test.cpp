// DmabufShares (hmem/dmabuf_share.h): one dma-buf export per allocation, shared by the
// registrations inside it — but never one that may be a freed allocation's.  Exports come from
// a test iface whose export_dmabuf hands out a fresh memfd and counts its calls; it can run a
// hook while it exports (another thread's free, reported meanwhile).
#include "hmem/dmabuf_share.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <utility>

namespace hmr::core {
namespace {

class ExportingIface final : public hmem::Iface {
 public:
  int iface() const override { return HMR_HMEM_ROCR; }
  const char* name() const override { return "test exporter"; }
  Status init() override { return ok_status(); }
  Result<int> device_count() override { return 1; }
  Result<hmem::DeviceCapabilities> capabilities(hmem::DeviceId device) override {
    return hmem::DeviceCapabilities{device, hmem::Capability::yes(), hmem::Capability::no("test"),
                                    hmem::Capability::no("test")};
  }
  Result<hmem::PointerInfo> query(const void*, size_t) override {
    return not_its_memory("not the test's");
  }
  Result<hmem::DmabufExport> export_dmabuf(hmem::MemoryRange range) override {
    ++exports;
    const std::function<void()> hook = std::exchange(during_export, nullptr);  // runs once
    if (hook) hook();
    hmem::DmabufExport made;
    made.fd = hmem::DmabufFd(memfd_create("test dma-buf", MFD_CLOEXEC));
    made.len = range.length;
    made.exported_len = range.length;
    return made;
  }
  int exports = 0;
  std::function<void()> during_export;
};

// An allocation with no id (ROCr's), at a base no other test uses.
hmem::PointerInfo allocation(uint64_t base) {
  hmem::PointerInfo memory;
  memory.iface = HMR_HMEM_ROCR;
  memory.base = base;
  memory.alloc_len = 1 << 16;
  return memory;
}

TEST(DmabufShares, RegistrationsInOneAllocationShareItsExport) {
  ExportingIface iface;
  DmabufShares& shares = DmabufShares::instance();
  auto first = shares.acquire(iface, allocation(0x7e1000000000));
  auto second = shares.acquire(iface, allocation(0x7e1000000000));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(iface.exports, 1);
}

// Memory whose free hmr cannot hear (ROCr's callback refused): a new allocation at a freed
// one's address and length has the same name, so its registration must not be handed the
// freed one's export, still open for an MR of the old allocation.
TEST(DmabufShares, AnAllocationNotToldApartGetsAnExportOfItsOwn) {
  ExportingIface iface;
  DmabufShares& shares = DmabufShares::instance();
  const hmem::PointerInfo memory = allocation(0x7e2000000000);
  auto old_allocation = shares.acquire(iface, memory, /*shareable=*/false);
  auto new_allocation = shares.acquire(iface, memory, /*shareable=*/false);
  ASSERT_TRUE(old_allocation.ok() && new_allocation.ok());
  EXPECT_NE(old_allocation->get(), new_allocation->get())
      << "STALE: the new allocation was given the old one's dma-buf";
  EXPECT_EQ(iface.exports, 2);
  // Nor does a shareable registration later find either of them.
  auto shared = shares.acquire(iface, memory);
  ASSERT_TRUE(shared.ok());
  EXPECT_NE(shared->get(), old_allocation->get());
  EXPECT_NE(shared->get(), new_allocation->get());
}

// A free reported while an export is being made (forget_range() before the export was
// listed): the export may be the freed allocation's, so it serves its own registration only,
// and the next registration at the address exports anew.
TEST(DmabufShares, AnExportMadeWhileAFreeWasReportedIsNotShared) {
  ExportingIface iface;
  DmabufShares& shares = DmabufShares::instance();
  const hmem::PointerInfo memory = allocation(0x7e3000000000);
  iface.during_export = [&] { shares.forget_range(memory.base, memory.base + memory.alloc_len); };
  auto raced = shares.acquire(iface, memory);
  auto next = shares.acquire(iface, memory);
  ASSERT_TRUE(raced.ok() && next.ok());
  EXPECT_NE(raced->get(), next->get()) << "STALE: the export made across the free was shared";
  EXPECT_EQ(iface.exports, 2);
  auto again = shares.acquire(iface, memory);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), next->get()) << "exports made after the free are shared again";
}

}  // namespace
}  // namespace hmr::core
