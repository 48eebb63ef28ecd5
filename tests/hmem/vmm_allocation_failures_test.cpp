// The VMM calls (cuMemGetAllocationGranularity, cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemRelease, cuMemSetAccess, cuMemUnmap, cuMemAddressFree) made to fail.  hmr's library
// never makes them: it reads VMM memory through pointer attributes.  Its VmmAllocation
// (tests/gpu/vmm_allocation.h) makes them, for the fake's tests and for the GPU lane on a real
// driver, so a failure there must say which call failed and leave nothing of the allocation
// behind in the driver; otherwise a failed GPU-lane step would leak device memory into the next.
#include <gtest/gtest.h>

#include <string>

#include "tests/gpu/vmm_allocation.h"
#include "tests/hmem/fake_cuda_library.h"

namespace hmr::cuda {
namespace {

using hmr::testing::fake_cuda;
using hmr::testing::fake_cuda_driver;
using hmr::testing::VmmAllocation;

// Codes each call documents (cuda.h, CUDA 13.0): OUT_OF_MEMORY for cuMemCreate,
// cuMemAddressReserve and cuMemMap; INVALID_VALUE for cuMemGetAllocationGranularity and
// cuMemRelease; INVALID_DEVICE for cuMemSetAccess; NOT_PERMITTED for cuMemUnmap and
// cuMemAddressFree.
constexpr int kInvalidValue = 1;
constexpr int kOutOfMemory = 2;
constexpr int kInvalidDevice = 101;
constexpr int kNotPermitted = 800;

struct Live {
  int reservations = 0;
  int mappings = 0;
  int physicals = 0;
};

Live live() {
  Live now;
  fake_cuda().vmm_live(&now.reservations, &now.mappings, &now.physicals);
  return now;
}

using VmmAllocationFailures = hmr::testing::FakeCudaTest;

// Each call of create() refused in turn, on the first segment and on the second: the error
// names the call, and the driver holds nothing afterwards.
TEST_F(VmmAllocationFailures, ACreateThatFailsNamesTheCallAndLeavesNothing) {
  struct Failing {
    const char* call;
    int code;
  };
  init();
  for (const Failing f : {Failing{"cuMemGetAllocationGranularity", kInvalidValue},
                          Failing{"cuMemAddressReserve", kOutOfMemory},
                          Failing{"cuMemCreate", kOutOfMemory}, Failing{"cuMemMap", kOutOfMemory},
                          Failing{"cuMemRelease", kInvalidValue},
                          Failing{"cuMemSetAccess", kInvalidDevice}}) {
    for (int nth : {1, 2}) {
      SCOPED_TRACE(std::string(f.call) + " call " + std::to_string(nth));
      fake_cuda().set_failure_once(f.call, f.code, nth);
      {
        Result<VmmAllocation> created = VmmAllocation::create(fake_cuda_driver(), 0, 2);
        fake_cuda().set_failure(f.call, 0);
        // Granularity and the reservation are asked for once: their second call never comes.
        const bool once = std::string(f.call) == "cuMemGetAllocationGranularity" ||
                          std::string(f.call) == "cuMemAddressReserve";
        if (once && nth == 2) {
          EXPECT_TRUE(created.ok()) << created.status().reason();
          continue;
        }
        ASSERT_FALSE(created.ok());
        EXPECT_NE(created.status().reason().find(f.call), std::string::npos)
            << created.status().reason();
      }
      const Live left = live();
      EXPECT_EQ(left.reservations, 0);
      EXPECT_EQ(left.mappings, 0);
      // A refused cuMemRelease keeps its physical memory; the driver frees it when the
      // process ends (the one thing the caller cannot take back).
      EXPECT_EQ(left.physicals, std::string(f.call) == "cuMemRelease" ? 1 : 0);
      fake_cuda().reset();  // (uninitialises the driver, which the iface started once)
      ASSERT_EQ(fake_cuda_driver().cuInit(0), CUDA_SUCCESS);
    }
  }
}

// A refused cuMemUnmap leaves the segment mapped and says so; the allocation still knows it
// is mapped, so it is unmapped (and the reservation freed) when the allocation goes.
TEST_F(VmmAllocationFailures, ARefusedUnmapIsReportedAndUndoneLater) {
  init();
  {
    Result<VmmAllocation> created = VmmAllocation::create(fake_cuda_driver(), 1, 2);
    ASSERT_TRUE(created.ok()) << created.status().reason();
    fake_cuda().set_failure("cuMemUnmap", kNotPermitted);
    const Status failed = created->unmap_segment(1);
    fake_cuda().set_failure("cuMemUnmap", 0);
    EXPECT_EQ(failed.code(), HMR_EPERM);
    EXPECT_NE(failed.reason().find("cuMemUnmap"), std::string::npos) << failed.reason();
    EXPECT_EQ(live().mappings, 2);
    EXPECT_TRUE(created->unmap_segment(1).ok());
    EXPECT_EQ(live().mappings, 1);
  }
  const Live left = live();
  EXPECT_EQ(left.reservations, 0);
  EXPECT_EQ(left.mappings, 0);
  EXPECT_EQ(left.physicals, 0);
}

}  // namespace
}  // namespace hmr::cuda
