// A child forked from a process that used a GPU runtime (a data loader's worker) must not have
// the parent's GPU memory called host memory, which would ask the NIC to register device
// addresses as host pages, and must still register its own host memory (issue 33).  ROCr
// answers such a child UNKNOWN for every address, and the memory is not mapped there; Level
// Zero answers it from the parent's allocations as they were at fork().  The fakes do the same
// (tests/fakes/fake_hsa.c, fake_ze.c, with the runtimes' sources); CUDA's case is in
// memory_query_test.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/fakes/fake_hsa_control.h"
#include "tests/fakes/fake_ze_control.h"
#include "tests/hmem/fake_library.h"
#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

constexpr size_t kAlloc = 64 * 1024;
constexpr size_t kHostLen = 4 * 4096;
// Set in the process that plays the Level Zero application (run_self: this binary again, with
// HMR_ZE_LIBRARY naming the fake loader, which must be chosen before hmr's first call).
constexpr const char* kZeParent = "HMR_TEST_FORKED_CHILD_ZE_PARENT";

// What the child found wrong, one bit each (gtest assertions made in a child are lost).
enum : int {
  kDeviceDetected = 1,       // hmr_detect_memory_type answered for the parent's GPU memory
  kDeviceWrongError = 2,     // it refused, but with another code than expected
  kDeviceRegistered = 4,     // hmr_mr_reg of the parent's GPU memory succeeded
  kHostDetectFailed = 8,     // hmr_detect_memory_type of host memory failed
  kHostNotSystem = 16,       // host memory was not system memory
  kHostRegFailed = 32,       // hmr_mr_reg of host memory failed
  kDeviceStillMapped = 64,   // (ROCr) the parent's GPU memory is mapped in the child
  kNoReason = 128,           // the refusal's reason does not say it is the parent's memory
  kInheritedUsed = 256,      // the parent's domain was not refused (HMR_EBADF), or not closed
  kOwnDomainFailed = 512,    // the child could not open a domain of its own
};

std::string describe(int wrong) {
  std::string text;
  const char* names[] = {"the parent's GPU memory was detected as memory of some iface",
                         "the parent's GPU memory was refused with an unexpected code",
                         "the parent's GPU memory registered",
                         "detecting host memory failed",
                         "host memory was not system memory",
                         "registering host memory failed",
                         "the parent's ROCr GPU memory is mapped in the child",
                         "the refusal does not say the memory is the parent's",
                         "the parent's domain was not refused with HMR_EBADF, or not closed",
                         "the child could not open a domain"};
  for (int bit = 0; bit < 10; ++bit) {
    if ((wrong & (1 << bit)) != 0) text += std::string(names[bit]) + "; ";
  }
  return text;
}

// Runs in the child: the parent's domain refused and closed; in a domain the child opens with
// `options`, the parent's `device` memory refused with -`code`, `host` registered.
int check_in_child(hmr_domain* inherited, const char* options, void* device, void* host,
                   int code) {
  int wrong = 0;
  hmr_mr* inherited_mr = nullptr;
  if (hmr_mr_reg(inherited, host, kHostLen, kAccess, 0, 0, 0, &inherited_mr, nullptr) !=
          -HMR_EBADF ||
      hmr_domain_close(inherited) != 0) {
    wrong |= kInheritedUsed;
  }
  hmr_test::DomainPtr own = open_child_domain(options);
  if (!own) return wrong | kOwnDomainFailed;
  hmr_domain* domain = own.get();
  hmr_hmem_iface iface = HMR_HMEM_SYSTEM;
  hmr_mem_kind kind = HMR_MEM_HOST;
  const int detected = hmr_detect_memory_type(device, 4096, &iface, &kind);
  if (detected == 0) {
    wrong |= kDeviceDetected;
  } else {
    if (detected != -code) wrong |= kDeviceWrongError;
    if (std::strstr(hmr_last_error(), "forked") == nullptr) wrong |= kNoReason;
  }
  hmr_mr* mr = nullptr;
  if (hmr_mr_reg(domain, device, 4096, kAccess, 0, 0, 0, &mr, nullptr) == 0) {
    wrong |= kDeviceRegistered;
    hmr_mr_close(mr);
  }

  if (hmr_detect_memory_type(host, kHostLen, &iface, &kind) != 0) {
    wrong |= kHostDetectFailed;
  } else if (iface != HMR_HMEM_SYSTEM || kind != HMR_MEM_HOST) {
    wrong |= kHostNotSystem;
  }
  mr = nullptr;
  if (hmr_mr_reg(domain, host, kHostLen, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
    wrong |= kHostRegFailed;
  } else {
    hmr_mr_close(mr);
  }
  return wrong;
}

void* map_host() {
  void* host = mmap(nullptr, kHostLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(host, MAP_FAILED);
  if (host == MAP_FAILED) return nullptr;
  std::memset(host, 1, kHostLen);
  return host;
}


// ROCr in a forked child answers UNKNOWN for every address (libhsakmt refuses the child), and
// libhsakmt maps its memory MADV_DONTFORK, so nothing is mapped at the parent's VRAM or system
// pool memory there.  Before hmr asked the kernel, UNKNOWN meant host memory.
TEST(ForkedChild, TheParentsRocrMemoryIsRefusedAndHostMemoryStillRegisters) {
  const hmr::testing::FakeLibrary rocr("fake ROCr runtime", HMR_FAKE_HSA_PATH);
  const auto alloc = rocr.function<fake_hsa_alloc_fn>("fake_hsa_alloc");
  const auto free_memory = rocr.function<fake_hsa_free_fn>("fake_hsa_free");
  hmr_test::DomainPtr domain = open_domain("peer_direct=1");
  ASSERT_NE(domain, nullptr);
  void* vram = nullptr;
  void* system_pool = nullptr;
  ASSERT_EQ(alloc(0, kAlloc, &vram), 0);      // the application's hsa_amd_memory_pool_allocate
  ASSERT_EQ(alloc(-1, kAlloc, &system_pool), 0);
  void* host = map_host();
  ASSERT_NE(host, nullptr);
  expect_type(vram, HMR_HMEM_ROCR, HMR_MEM_DEVICE_ONLY);
  expect_type(system_pool, HMR_HMEM_ROCR, HMR_MEM_MANAGED);
  expect_type(host, HMR_HMEM_SYSTEM, HMR_MEM_HOST);

  for (void* parents : {vram, system_pool}) {
    const int wrong = hmr_test::run_forked([&] {
      int found = check_in_child(domain.get(), "peer_direct=1", parents, host, HMR_EFAULT);
      if (msync(parents, 4096, MS_ASYNC) == 0) found |= kDeviceStillMapped;
      return found;
    });
    ASSERT_GE(wrong, 0) << "the child could not be forked, or died of a signal";
    EXPECT_EQ(wrong, 0) << (parents == vram ? "VRAM: " : "system pool: ") << describe(wrong);
  }
  // The parent's runtime still answers.
  expect_type(vram, HMR_HMEM_ROCR, HMR_MEM_DEVICE_ONLY);
  EXPECT_EQ(free_memory(vram), 0);
  EXPECT_EQ(free_memory(system_pool), 0);
  munmap(host, kHostLen);
}

// Level Zero in a forked child answers from the parent's allocations as they were at fork()
// (the Intel driver keeps them in process memory and handles no fork), so the parent's device
// memory is still DEVICE there.  Before hmr checked for a child, it was registered (exported
// from buffer handles the parent can free and reuse).  Runs in a fresh process that loads the
// fake loader (below).
TEST(ForkedChild, TheParentsLevelZeroDeviceMemoryIsRefusedAndHostMemoryStillRegisters) {
  // FI_HMEM=system,ze: only the runtime under test.  Otherwise hmr also loads the host's real
  // ROCr (Debian's libhsa-runtime64, no GPU here), whose dynamic TLS LeakSanitizer's exit-time
  // scan of this process read as a bogus range and crashed on (ASan lane, "Tracer caught
  // signal 11"; the range printed was 0x357-0x800001459) in some builds of this binary.
  const int status = hmr_test::run_self(
      {"--gtest_filter=ForkedChild.LevelZeroParentProcess", "--gtest_brief=1"},
      {std::string("HMR_ZE_LIBRARY=") + HMR_FAKE_ZE_PATH, std::string(kZeParent) + "=1",
       "FI_HMEM=system,ze"});
  EXPECT_EQ(status, 0) << "the Level Zero process's checks failed (its output is above)";
}

TEST(ForkedChild, LevelZeroParentProcess) {
  if (std::getenv(kZeParent) == nullptr) GTEST_SKIP() << "runs in its own process only";
  const hmr::testing::FakeLibrary ze("fake Level Zero loader", HMR_FAKE_ZE_PATH);
  const auto alloc = ze.function<fake_ze_alloc_fn>("fake_ze_alloc");
  hmr_test::DomainPtr domain = open_domain("peer_direct=1");
  ASSERT_NE(domain, nullptr);
  void* device = nullptr;
  ASSERT_EQ(alloc(0, 0, kAlloc, FAKE_ZE_MEM_DEVICE, &device), 0);  // the application's
  void* host = map_host();
  ASSERT_NE(host, nullptr);
  expect_type(device, HMR_HMEM_ZE, HMR_MEM_DEVICE_ONLY);
  expect_type(host, HMR_HMEM_SYSTEM, HMR_MEM_HOST);

  const int wrong = hmr_test::run_forked(
      [&] { return check_in_child(domain.get(), "peer_direct=1", device, host, HMR_EOPNOTSUPP); });
  ASSERT_GE(wrong, 0) << "the child could not be forked, or died of a signal";
  EXPECT_EQ(wrong, 0) << describe(wrong);
  // The parent's driver still answers.
  expect_type(device, HMR_HMEM_ZE, HMR_MEM_DEVICE_ONLY);
  munmap(host, kHostLen);
}

}  // namespace
}  // namespace hmr_hmem_test
