// The CUDA iface on VMM memory (cuMemCreate + cuMemMap segments back to back in one reserved
// range, as PyTorch's expandable segments allocate), against the fake driver.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "hmem/page_range.h"
#include "monitor/device_monitor.h"
#include "monitor/monitor.h"
#include "tests/gpu/vmm_allocation.h"
#include "tests/hmem/fake_cuda_library.h"

namespace hmr::cuda {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::as_pointer;
using hmr::testing::fake_cuda;
using hmr::testing::fake_cuda_driver;
using hmr::testing::VmmAllocation;

std::string hex(unsigned long long address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", address);
  return text;
}

class CudaVmmRangeTest : public hmr::testing::FakeCudaTest {
 protected:
  // A VMM allocation on `device` with `segments` mapped and `spare` unmapped after them.
  VmmAllocation& vmm(int device, size_t segments, size_t spare = 1) {
    Result<VmmAllocation> created =
        VmmAllocation::create(fake_cuda_driver(), device, segments, 1, spare);
    EXPECT_TRUE(created.ok()) << created.status().reason();
    vmm_.emplace(std::move(*created));
    return *vmm_;
  }
  void TearDown() override {
    vmm_.reset();  // before the fake is reset under it
    FakeCudaTest::TearDown();
  }

  std::optional<VmmAllocation> vmm_;
};

TEST_F(CudaVmmRangeTest, RangeAcrossAdjacentSegmentsGetsTheWholeMappedRange) {
  init();
  VmmAllocation& memory = vmm(1, 3);
  const size_t segment = memory.segment_size();

  Result<PointerInfo> spanning = iface_.query(as_pointer(memory.base() + 100), 2 * segment);
  ASSERT_TRUE(spanning.ok()) << spanning.status().reason();
  EXPECT_EQ(spanning->iface, HMR_HMEM_CUDA);
  EXPECT_EQ(spanning->device, DeviceId{1});
  EXPECT_EQ(spanning->kind, MemoryKind::device_only);
  EXPECT_EQ(spanning->base, memory.base());
  EXPECT_EQ(spanning->alloc_len, 3 * segment);  // 100 bytes into the third segment
  EXPECT_EQ(spanning->sys_dev, "0000:65:00.0");

  Result<PointerInfo> two = iface_.query(as_pointer(memory.base() + 100), segment);
  ASSERT_TRUE(two.ok()) << two.status().reason();
  EXPECT_EQ(two->alloc_len, 2 * segment);

  // Inside one segment: that segment alone, as cuMemGetAddressRange reports it.
  Result<PointerInfo> one = iface_.query(as_pointer(memory.segment(1) + 8), 64);
  ASSERT_TRUE(one.ok()) << one.status().reason();
  EXPECT_EQ(one->base, memory.segment(1));
  EXPECT_EQ(one->alloc_len, segment);
  EXPECT_NE(one->alloc_id, spanning->alloc_id);
  EXPECT_NE(two->alloc_id, spanning->alloc_id);
}

TEST_F(CudaVmmRangeTest, ExportCoversExactlyThePageRoundedRequestedRange) {
  init();
  VmmAllocation& memory = vmm(0, 3);
  const size_t segment = memory.segment_size();
  const size_t page = hmem::host_page_size();
  const unsigned long long address = memory.base() + segment - page + 7;  // across a boundary

  Result<DmabufExport> exported = iface_.export_dmabuf({as_pointer(address), segment + page});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(exported->offset, 7u);
  EXPECT_EQ(exported->len, segment + page);
  EXPECT_EQ(exported->exported_len, segment + 2 * page);

  unsigned long long ptr = 0;
  size_t size = 0;
  unsigned long long flags = 0;
  fake_cuda().last_export(&ptr, &size, &flags);
  EXPECT_EQ(ptr, memory.base() + segment - page);  // not the segment, not the reservation
  EXPECT_EQ(size, segment + 2 * page);
  struct stat st {};
  ASSERT_EQ(fstat(exported->fd.get(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), segment + 2 * page);
}

TEST_F(CudaVmmRangeTest, HoleInsideTheRangeIsAnErrorWithItsAddress) {
  init();
  VmmAllocation& memory = vmm(0, 3);
  const size_t segment = memory.segment_size();
  ASSERT_TRUE(memory.unmap_segment(1).ok());

  Result<PointerInfo> info = iface_.query(as_pointer(memory.base()), 3 * segment);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EFAULT);
  EXPECT_NE(info.status().reason().find("not mapped"), std::string::npos) << info.status().reason();
  EXPECT_NE(info.status().reason().find(hex(memory.segment(1))), std::string::npos)
      << info.status().reason();

  Result<DmabufExport> exported = iface_.export_dmabuf({as_pointer(memory.base()), 3 * segment});
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), HMR_EFAULT);
  EXPECT_EQ(fake_cuda().call_count("cuMemGetHandleForAddressRange"), 0);  // never asked

  // The segments on either side of the hole are still memory of their own.
  EXPECT_TRUE(iface_.query(as_pointer(memory.segment(0)), segment).ok());
  EXPECT_TRUE(iface_.query(as_pointer(memory.segment(2)), segment).ok());
}

TEST_F(CudaVmmRangeTest, RangePastTheMappedEndOrTheReservationIsRejected) {
  init();
  VmmAllocation& memory = vmm(0, 2, /*spare=*/1);
  const size_t segment = memory.segment_size();
  Result<PointerInfo> into_spare = iface_.query(as_pointer(memory.segment(1)), 2 * segment);
  ASSERT_FALSE(into_spare.ok());
  EXPECT_EQ(into_spare.status().code(), HMR_EFAULT);

  Result<PointerInfo> past_reservation =
      iface_.query(as_pointer(memory.segment(1)), 3 * segment);
  ASSERT_FALSE(past_reservation.ok());
  EXPECT_EQ(past_reservation.status().code(), HMR_EINVAL);
  EXPECT_NE(past_reservation.status().reason().find("VMM reservation"), std::string::npos)
      << past_reservation.status().reason();
}

TEST_F(CudaVmmRangeTest, RemappingASegmentChangesTheIdentityOfRangesThatCoverIt) {
  init();
  VmmAllocation& memory = vmm(0, 2);
  const size_t segment = memory.segment_size();
  auto id_of = [&](unsigned long long address, size_t len) {
    Result<PointerInfo> info = iface_.query(as_pointer(address), len);
    EXPECT_TRUE(info.ok()) << info.status().reason();
    return info.ok() ? info->alloc_id : 0;
  };
  const uint64_t whole = id_of(memory.base(), 2 * segment);
  const uint64_t first = id_of(memory.base(), 64);
  const uint64_t second = id_of(memory.segment(1), 64);
  EXPECT_NE(whole, 0u);
  EXPECT_EQ(id_of(memory.base(), 2 * segment), whole);  // stable while nothing changes
  EXPECT_NE(first, second);

  ASSERT_TRUE(memory.unmap_segment(1).ok());
  ASSERT_TRUE(memory.map_segment(1).ok());  // fresh physical memory at the same address
  EXPECT_NE(id_of(memory.base(), 2 * segment), whole);
  EXPECT_NE(id_of(memory.segment(1), 64), second);
  EXPECT_EQ(id_of(memory.base(), 64), first);  // the untouched segment keeps its identity
}

// What the device hit path asks (identify: one cuPointerGetAttributes) names a range inside
// one segment as query() does, and so sees a segment unmapped and mapped again; a range of
// several segments gets another answer than query()'s mix, which can only miss.
TEST_F(CudaVmmRangeTest, IdentifyMatchesQueryInsideASegmentAndSeesARemap) {
  init();
  VmmAllocation& memory = vmm(0, 2);
  const size_t segment = memory.segment_size();
  auto identify = [&](unsigned long long address, size_t len) {
    hmem::AllocationIdentity identity;
    Status found = iface_.identify(as_pointer(address), len, identity);
    EXPECT_TRUE(found.ok()) << found.reason();
    return found.ok() ? identity.alloc_id : 0;
  };
  auto query = [&](unsigned long long address, size_t len) {
    Result<PointerInfo> info = iface_.query(as_pointer(address), len);
    EXPECT_TRUE(info.ok()) << info.status().reason();
    return info.ok() ? info->alloc_id : 0;
  };
  const uint64_t second = identify(memory.segment(1), 64);
  EXPECT_EQ(second, query(memory.segment(1), 64));
  EXPECT_EQ(identify(memory.base(), 64), query(memory.base(), 64));
  EXPECT_NE(identify(memory.base(), 2 * segment), query(memory.base(), 2 * segment))
      << "a range across segments: identify() must not claim query()'s identity";
  ASSERT_TRUE(memory.unmap_segment(1).ok());
  ASSERT_TRUE(memory.map_segment(1).ok());
  EXPECT_NE(identify(memory.segment(1), 64), second) << "a remapped segment kept its identity";
  EXPECT_EQ(identify(memory.segment(1), 64), query(memory.segment(1), 64));
}

TEST_F(CudaVmmRangeTest, SegmentOfAnotherDeviceEndsTheRange) {
  init();
  VmmAllocation& memory = vmm(0, 1, /*spare=*/1);
  ASSERT_TRUE(memory.map_segment(1, /*device=*/1).ok());
  Result<PointerInfo> info = iface_.query(as_pointer(memory.base()), 2 * memory.segment_size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EINVAL);
  EXPECT_NE(info.status().reason().find("device 1"), std::string::npos) << info.status().reason();
  Result<PointerInfo> second = iface_.query(as_pointer(memory.segment(1)), 64);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->device, DeviceId{1});
}

TEST_F(CudaVmmRangeTest, AdjacentPlainAllocationsAreNeverMerged) {
  init();
  const unsigned long long first = alloc(0, 2 << 20);
  const unsigned long long second = alloc(0, 2 << 20);
  ASSERT_EQ(second, first + (2 << 20));  // back to back in the device's address range
  Result<PointerInfo> info = iface_.query(as_pointer(first), 4 << 20);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EINVAL);
  EXPECT_NE(info.status().reason().find("not inside one CUDA allocation"), std::string::npos)
      << info.status().reason();
}

TEST_F(CudaVmmRangeTest, CopiesCrossSegmentBoundaries) {
  init();
  VmmAllocation& memory = vmm(1, 2);
  const unsigned long long boundary = memory.segment(1);
  std::vector<unsigned char> pattern(8192);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 7 + 3);
  void* start = const_cast<void*>(as_pointer(boundary - 4096));
  ASSERT_TRUE(iface_.copy_to_device(start, pattern.data(), pattern.size()).ok());

  std::vector<unsigned char> seen(pattern.size());
  ASSERT_EQ(fake_cuda().peek(boundary - 4096, seen.data(), seen.size()), 0);
  EXPECT_EQ(seen, pattern);
  std::vector<unsigned char> back(pattern.size(), 0);
  ASSERT_TRUE(iface_.copy_from_device(back.data(), start, back.size()).ok());
  EXPECT_EQ(back, pattern);

  // A copy that would run into the unmapped spare segment fails before moving anything.
  void* tail = const_cast<void*>(as_pointer(memory.segment(2) - 16));
  EXPECT_EQ(iface_.copy_to_device(tail, pattern.data(), 32).code(), HMR_EFAULT);
}

// What the device monitor drops, as a cache that listens to it sees it.
class RecordingSink final : public core::InvalidationSink {
 public:
  RecordingSink() { EXPECT_TRUE(core::DeviceMonitor::instance().add_sink(this).ok()); }
  ~RecordingSink() { core::DeviceMonitor::instance().remove_sink(this); }
  void invalidate(uintptr_t start, uintptr_t end) override { dropped.emplace_back(start, end); }
  // Whether a cache entry of [start, +len) was dropped (a drop of any range overlapping it).
  bool dropped_any_of(unsigned long long start, size_t len) const {
    for (const auto& [from, to] : dropped) {
      if (from < start + len && start < to) return true;
    }
    return false;
  }
  std::vector<std::pair<uintptr_t, uintptr_t>> dropped;
};

// Ranges of one reservation as the device monitor is told of them (a full-path registration):
// a buffer inside segment 0, one across segments 0 and 1 (same base: PyTorch's expandable
// segments hand out both), one inside segment 1.
class CudaVmmViewsTest : public CudaVmmRangeTest {
 protected:
  using Range = std::pair<unsigned long long, size_t>;
  void SetUp() override {
    CudaVmmRangeTest::SetUp();
    init();
    memory_ = &vmm(0, 2);
    segment_ = memory_->segment_size();
    inside_first_ = {memory_->base() + 4096, 4096};
    across_ = {memory_->base() + segment_ - 8192, 16384};
    inside_second_ = {memory_->segment(1) + 4096, 4096};
  }
  void TearDown() override {
    // The monitor is the process's: what this test recorded goes with its memory.
    monitor().invalidate_everywhere(memory_->base(), memory_->base() + 2 * segment_);
    CudaVmmRangeTest::TearDown();
  }
  static core::DeviceMonitor& monitor() { return core::DeviceMonitor::instance(); }
  PointerInfo resolve(Range range) {
    Result<PointerInfo> info = iface_.query(as_pointer(range.first), range.second);
    EXPECT_TRUE(info.ok()) << info.status().reason();
    return info.ok() ? *info : PointerInfo{};
  }
  // What a registration of `range` resolves to, told to the monitor.
  void observe(Range range) { monitor().observe(iface_, resolve(range)); }
  static int driver_calls() { return fake_cuda().call_count("*"); }

  VmmAllocation* memory_ = nullptr;
  size_t segment_ = 0;
  Range inside_first_, across_, inside_second_;
};

// A range across segments resolves to each segment with its own identity, which is what the
// monitor records.
TEST_F(CudaVmmViewsTest, ARangeAcrossSegmentsNamesEachSegment) {
  const PointerInfo across = resolve(across_);
  ASSERT_EQ(across.pieces.size(), 2u);
  EXPECT_EQ(across.pieces[0].base, memory_->base());
  EXPECT_EQ(across.pieces[0].length, segment_);
  EXPECT_EQ(across.pieces[0].alloc_id, resolve(inside_first_).alloc_id);
  EXPECT_EQ(across.pieces[1].base, memory_->segment(1));
  EXPECT_EQ(across.pieces[1].alloc_id, resolve(inside_second_).alloc_id);
  EXPECT_TRUE(resolve(inside_first_).pieces.empty()) << "one segment: no pieces listed";
}

// Registering ranges of live memory in turn never drops one for another (the monitor took a
// different (length, id) at a base it knew as a free: both missed for ever, each paying the
// cold path, ~35-50 us on the H100), and observing what is known asks the runtime nothing.
TEST_F(CudaVmmViewsTest, RangesOfLiveMemoryAreNotAFreeOfEachOther) {
  RecordingSink sink;
  observe(inside_first_);
  observe(across_);
  observe(inside_second_);
  const uint64_t generation = monitor().generation();
  for (int round = 0; round < 3; ++round) {
    const std::vector<PointerInfo> resolved = {resolve(inside_first_), resolve(across_),
                                               resolve(inside_second_)};
    const int calls = driver_calls();
    for (const PointerInfo& info : resolved) monitor().observe(iface_, info);
    EXPECT_EQ(driver_calls(), calls) << "round " << round;
  }
  EXPECT_EQ(monitor().generation(), generation) << "the ranges dropped each other";
  EXPECT_TRUE(sink.dropped.empty());
}

// A remapped segment is a free of that segment: registering anything in it drops what covers
// it (the range across both segments too) and leaves what lies only in the other segment.
TEST_F(CudaVmmViewsTest, ARemapDropsWhatCoversTheSegmentAndNothingElse) {
  observe(inside_first_);
  observe(across_);
  observe(inside_second_);
  RecordingSink sink;
  const uint64_t generation = monitor().generation();
  ASSERT_TRUE(memory_->unmap_segment(1).ok());
  ASSERT_TRUE(memory_->map_segment(1).ok());
  observe(inside_second_);
  EXPECT_GT(monitor().generation(), generation);
  EXPECT_TRUE(sink.dropped_any_of(inside_second_.first, inside_second_.second));
  EXPECT_TRUE(sink.dropped_any_of(across_.first, across_.second))
      << "the range across the remapped segment was kept";
  EXPECT_FALSE(sink.dropped_any_of(inside_first_.first, inside_first_.second))
      << "segment 0 was dropped, though only segment 1 was remapped";

  // Segment 0 is still known: observing it drops nothing.
  sink.dropped.clear();
  const uint64_t after = monitor().generation();
  observe(inside_first_);
  EXPECT_EQ(monitor().generation(), after);
  EXPECT_TRUE(sink.dropped.empty());
}

// Whichever range is registered after a remap of segment 0, the range across both segments
// goes once anything in segment 0 is registered again (the promise for every allocation:
// dropped when its address is registered again, or at its free where the runtime reports it).
TEST_F(CudaVmmViewsTest, ARangeAcrossARemappedSegmentGoesWhenTheSegmentIsRegisteredAgain) {
  observe(across_);
  observe(inside_first_);
  RecordingSink sink;
  ASSERT_TRUE(memory_->unmap_segment(0).ok());
  ASSERT_TRUE(memory_->map_segment(0).ok());
  observe(inside_second_);  // segment 1 is unchanged
  EXPECT_TRUE(sink.dropped.empty());
  observe(inside_first_);  // a new identity in segment 0
  EXPECT_TRUE(sink.dropped_any_of(across_.first, across_.second));
  EXPECT_FALSE(sink.dropped_any_of(inside_second_.first, inside_second_.second));
}

// Freeing through hmr (hmr_mem_free's and hmr_mem_invalidate's path) forgets every segment of
// the range, so memory at the address later is not compared with them.
TEST_F(CudaVmmViewsTest, InvalidationForgetsEverySegmentOfTheRange) {
  observe(across_);
  monitor().invalidate_everywhere(memory_->base(), memory_->base() + 2 * segment_);
  RecordingSink sink;
  ASSERT_TRUE(memory_->unmap_segment(1).ok());
  ASSERT_TRUE(memory_->map_segment(1).ok());
  observe(across_);
  EXPECT_TRUE(sink.dropped.empty()) << "a forgotten segment was compared";
}

}  // namespace
}  // namespace hmr::cuda
