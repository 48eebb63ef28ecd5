// Bad arguments to every public function of the device-memory API (hmr_mem_query,
// hmr_detect_memory_type, hmr_mem_alloc, hmr_mem_free, hmr_mem_invalidate, hmr_mr_query,
// hmr_mr_sync, hmr_domain_attr.flags and the device-memory environment): each fails with a
// negative code and a reason, and writes none of its outputs.
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"
#include "tests/hmem_api/raw_enum_calls.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::MrPtr;

// Reads and writes an enum variable's bits without forming an out-of-range enum value in C++.
template <typename Enum>
void store_bits(Enum& field, int value) {
  static_assert(sizeof(Enum) == sizeof(int));
  std::memcpy(&field, &value, sizeof value);
}
template <typename Enum>
int bits_of(const Enum& field) {
  int value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

hmr_mem_attr fresh_attr() {
  hmr_mem_attr attr;
  std::memset(&attr, 0x7b, sizeof attr);  // a pattern no successful call leaves
  attr.size = sizeof attr;
  attr.field_mask = 0;
  return attr;
}

void expect_untouched(const hmr_mem_attr& attr) {
  hmr_mem_attr expected = fresh_attr();
  expected.size = attr.size;
  expected.field_mask = attr.field_mask;
  EXPECT_EQ(std::memcmp(&attr, &expected, sizeof attr), 0) << "an output was written";
}

TEST(HmemBadArgs, MemQuery) {
  std::vector<char> host(4096);
  hmr_mem_attr attr = fresh_attr();
  EXPECT_HMR_ERROR(hmr_mem_query(host.data(), host.size(), nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_query(nullptr, 1, &attr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_query(host.data(), 0, &attr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_query(reinterpret_cast<void*>(UINTPTR_MAX - 10), 100, &attr),
                   HMR_EINVAL);
  expect_untouched(attr);
  attr.field_mask = 1ULL << 40;
  EXPECT_HMR_ERROR(hmr_mem_query(host.data(), host.size(), &attr), HMR_EBADFLAGS);
  expect_untouched(attr);
  attr.field_mask = 0;
  attr.size = sizeof(size_t);
  EXPECT_HMR_ERROR(hmr_mem_query(host.data(), host.size(), &attr), HMR_EINVAL);

  // A range that runs out of its device allocation is not one allocation.
  FakeAllocation device(0, 8192);
  attr = fresh_attr();
  EXPECT_HMR_ERROR(hmr_mem_query(static_cast<char*>(device.get()) + 4096, 8192, &attr),
                   HMR_EINVAL);
  expect_untouched(attr);
}

TEST(HmemBadArgs, DetectMemoryType) {
  std::vector<char> host(64);
  hmr_hmem_iface iface;
  hmr_mem_kind kind;
  store_bits(iface, 77);
  store_bits(kind, 77);
  EXPECT_HMR_ERROR(hmr_detect_memory_type(host.data(), 64, nullptr, &kind), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_detect_memory_type(host.data(), 64, &iface, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_detect_memory_type(nullptr, 64, &iface, &kind), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_detect_memory_type(host.data(), 0, &iface, &kind), HMR_EINVAL);
  EXPECT_EQ(bits_of(iface), 77);
  EXPECT_EQ(bits_of(kind), 77);
}

TEST(HmemBadArgs, MemAlloc) {
  void* const untouched = reinterpret_cast<void*>(0x1);
  void* ptr = untouched;
  EXPECT_HMR_ERROR(hmr_mem_alloc(HMR_HMEM_CUDA, 0, 4096, HMR_MEM_DEVICE_ONLY, nullptr),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_alloc(HMR_HMEM_CUDA, 0, 0, HMR_MEM_DEVICE_ONLY, &ptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(raw_mem_alloc(9, 0, 4096, HMR_MEM_HOST, &ptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(raw_mem_alloc(HMR_HMEM_CUDA, 0, 4096, -1, &ptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(raw_mem_alloc(HMR_HMEM_CUDA, 0, 4096, 4, &ptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_alloc(HMR_HMEM_SYSTEM, 1, 4096, HMR_MEM_HOST, &ptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_alloc(HMR_HMEM_SYSTEM, 0, 4096, HMR_MEM_DEVICE_ONLY, &ptr),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_alloc(HMR_HMEM_CUDA, static_cast<uint64_t>(-1), 4096,
                                 HMR_MEM_DEVICE_ONLY, &ptr),
                   HMR_EINVAL);
  EXPECT_LT(hmr_mem_alloc(HMR_HMEM_CUDA, 7, 4096, HMR_MEM_DEVICE_ONLY, &ptr), 0)
      << "the fake has two devices";
  EXPECT_STRNE(hmr_last_error(), "");
  EXPECT_EQ(ptr, untouched);
}

TEST(HmemBadArgs, MemFree) {
  std::vector<char> host(4096);
  EXPECT_HMR_ERROR(hmr_mem_free(HMR_HMEM_CUDA, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(raw_mem_free(-3, host.data()), HMR_EINVAL);
  // Not memory of that iface: refused, nothing freed.
  EXPECT_HMR_ERROR(hmr_mem_free(HMR_HMEM_SYSTEM, host.data()), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_free(HMR_HMEM_CUDA, host.data()), HMR_ENOENT);
}

TEST(HmemBadArgs, MemInvalidate) {
  std::vector<char> host(4096);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr mr = register_ok(domain.get(), host.data(), host.size());
  ASSERT_TRUE(mr);
  EXPECT_HMR_ERROR(hmr_mem_invalidate(reinterpret_cast<hmr_domain*>(mr.get()), host.data(), 1),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_invalidate(domain.get(), nullptr, 1), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_invalidate(nullptr, host.data(), 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_invalidate(nullptr, reinterpret_cast<void*>(UINTPTR_MAX - 1), 100),
                   HMR_EINVAL);
}

TEST(HmemBadArgs, MrQuery) {
  std::vector<char> host(4096);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr mr = register_ok(domain.get(), host.data(), host.size());
  ASSERT_TRUE(mr);
  hmr_mr_info info;
  std::memset(&info, 0x7b, sizeof info);
  info.size = sizeof info;
  const hmr_mr_info before = info;
  EXPECT_HMR_ERROR(hmr_mr_query(nullptr, &info), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_query(reinterpret_cast<hmr_mr*>(domain.get()), &info), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_query(mr.get(), nullptr), HMR_EINVAL);
  info.size = 4;
  EXPECT_HMR_ERROR(hmr_mr_query(mr.get(), &info), HMR_EINVAL);
  info.size = sizeof info;
  EXPECT_EQ(std::memcmp(&info, &before, sizeof info), 0);
}

TEST(HmemBadArgs, MrQueryOfAPendingMrIsAgain) {
  std::vector<char> host(4096);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  hmr_eq* eq = nullptr;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, &eq));
  hmr_test::EqPtr queue(eq);
  ASSERT_HMR_OK(hmr_domain_bind(domain.get(), hmr_eq_fid(eq), HMR_REG_MR));
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(register_attr(domain.get(), host.data(), host.size(), HMR_HMEM_SYSTEM, 0, 0, &mr));
  MrPtr owned(mr);
  hmr_mr_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  const int rc = hmr_mr_query(mr, &info);
  // The worker may already have finished; before it has, the answer is "not yet".
  if (rc != 0) {
    EXPECT_EQ(rc, -HMR_EAGAIN) << hmr_last_error();
  }
  owned.reset();
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(HmemBadArgs, MrSync) {
  std::vector<char> host(4096);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr mr = register_ok(domain.get(), host.data(), host.size());
  ASSERT_TRUE(mr);
  EXPECT_HMR_ERROR(hmr_mr_sync(nullptr, 0, 0, HMR_SYNC_TO_DEVICE), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_sync(mr.get(), 0, 0, 0), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_sync(mr.get(), 0, 0, HMR_SYNC_TO_DEVICE | HMR_SYNC_FROM_DEVICE),
                   HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_sync(mr.get(), 0, 0, 1ULL << 9), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_sync(mr.get(), 4097, 0, HMR_SYNC_TO_DEVICE), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_sync(mr.get(), 4000, 97, HMR_SYNC_FROM_DEVICE), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_sync(mr.get(), UINT64_MAX, 2, HMR_SYNC_FROM_DEVICE), HMR_EINVAL);
  EXPECT_EQ(hmr_mr_sync(mr.get(), 4000, 96, HMR_SYNC_FROM_DEVICE), 0) << hmr_last_error();
}

TEST(HmemBadArgs, DomainFlags) {
  hmr_domain_attr attr = hmr_test::domain_attr(kSharingMode);
  attr.flags = HMR_DOMAIN_ALLOW_HMEM_COPY | (1ULL << 7);
  hmr_domain* const untouched = reinterpret_cast<hmr_domain*>(0x1);
  hmr_domain* domain = untouched;
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EBADFLAGS);
  EXPECT_EQ(domain, untouched);
  attr.flags = HMR_DOMAIN_ALLOW_HMEM_COPY;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &domain));
  EXPECT_EQ(attr.flags, HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

TEST(HmemBadArgs, SimDevicePathOptionsAreZeroOrOne) {
  for (const char* options : {"dmabuf=2", "peer_direct=yes", "dmabuf=", "peer_direct=-1"}) {
    SCOPED_TRACE(options);
    hmr_domain_attr attr = hmr_test::domain_attr(kSharingMode, options);
    hmr_domain* domain = nullptr;
    EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);
    EXPECT_EQ(domain, nullptr);
  }
}

// A caller's dma-buf of 4096 bytes as the sim NIC imports one (a temporary file's fd), and the
// attributes that register it declared as `iface` memory.
class CallersDmabuf {
 public:
  CallersDmabuf() : file_(tmpfile()) {
    EXPECT_NE(file_, nullptr);
    if (file_ != nullptr) {
      EXPECT_EQ(ftruncate(fileno(file_), 4096), 0);
    }
    dmabuf_ = {file_ != nullptr ? fileno(file_) : -1, 0, 4096, backing_.data()};
  }
  ~CallersDmabuf() {
    if (file_ != nullptr) fclose(file_);
  }
  CallersDmabuf(const CallersDmabuf&) = delete;
  CallersDmabuf& operator=(const CallersDmabuf&) = delete;
  hmr_mr_attr attr(hmr_hmem_iface iface) const {
    hmr_mr_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.dmabuf = &dmabuf_;
    attr.access = kAccess;
    attr.iface = iface;
    return attr;
  }

 private:
  std::vector<char> backing_ = std::vector<char>(4096);
  FILE* file_;
  hmr_mr_dmabuf dmabuf_{};
};

// FI_HMEM is read once per process: a test of a value of it runs `child_test` in a fresh one,
// this binary again with FI_HMEM=`fi_hmem`, and expects it to pass.
void expect_child_passes(const char* child_test, const char* fi_hmem) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("FI_HMEM", fi_hmem, 1);
    setenv("HMR_HMEM_TEST_CHILD", "1", 1);
    const std::string filter = std::string("--gtest_filter=HmemBadArgs.") + child_test;
    execl("/proc/self/exe", "hmr_hmem_api_tests", filter.c_str(), "--gtest_brief=1",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (its output is above)";
}

TEST(HmemBadArgs, ANicWithoutDmabufImportRefusesACallersDmabuf) {
  auto domain = open_domain("dmabuf=0");
  ASSERT_TRUE(domain);
  const CallersDmabuf dmabuf;
  const hmr_mr_attr attr = dmabuf.attr(HMR_HMEM_SYSTEM);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_regattr(domain.get(), &attr, HMR_MR_DMABUF, &mr), HMR_EOPNOTSUPP);
  EXPECT_EQ(mr, nullptr);
}

TEST(HmemBadArgs, DeviceEnvironmentValuesThatAreNotBooleansFailTheOpen) {
  for (const char* name : {"FI_HMEM_CUDA_USE_DMABUF", "FI_HMEM_ZE_USE_DMABUF",
                           "FI_MR_CUDA_CACHE_MONITOR_ENABLED", "FI_MR_ROCR_CACHE_MONITOR_ENABLED"}) {
    SCOPED_TRACE(name);
    ScopedEnv bad(name, "maybe");
    hmr_domain_attr attr = hmr_test::domain_attr(kSharingMode);
    hmr_domain* domain = nullptr;
    EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);
    EXPECT_NE(std::string(hmr_last_error()).find(name), std::string::npos) << hmr_last_error();
    EXPECT_EQ(domain, nullptr);
  }
}

// A bad value, in a fresh process: the test below.
TEST(HmemBadArgs, BadFiHmemFailsDomainOpenNamingTheValue) {
  expect_child_passes("BadFiHmemChild", "cuda,gpu");
}

TEST(HmemBadArgs, BadFiHmemChild) {
  if (std::getenv("HMR_HMEM_TEST_CHILD") == nullptr) GTEST_SKIP() << "runs in a child only";
  hmr_domain_attr attr = hmr_test::domain_attr(kSharingMode);
  hmr_domain* domain = nullptr;
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);
  EXPECT_NE(std::string(hmr_last_error()).find("FI_HMEM='cuda,gpu'"), std::string::npos)
      << hmr_last_error();
  std::vector<char> host(64);
  hmr_hmem_iface iface = HMR_HMEM_SYSTEM;
  hmr_mem_kind kind = HMR_MEM_HOST;
  EXPECT_HMR_ERROR(hmr_detect_memory_type(host.data(), 64, &iface, &kind), HMR_EINVAL);
}

// FI_HMEM=^rocr is the caller's word that no ROCr memory is here: a dma-buf declared as ROCr
// memory is refused with HMR_ENOSYS, as other memory declared so is (it was registered, a
// review found).  In a fresh process: FI_HMEM is read once.
TEST(HmemBadArgs, ADmabufOfADisabledIfaceIsRefused) {
  expect_child_passes("ADmabufOfADisabledIfaceChild", "^rocr");
}

TEST(HmemBadArgs, ADmabufOfADisabledIfaceChild) {
  if (std::getenv("HMR_HMEM_TEST_CHILD") == nullptr) GTEST_SKIP() << "runs in a child only";
  auto domain = open_domain("dmabuf=1");
  ASSERT_TRUE(domain);
  const CallersDmabuf dmabuf;
  const hmr_mr_attr rocr = dmabuf.attr(HMR_HMEM_ROCR);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_regattr(domain.get(), &rocr, HMR_MR_DMABUF, &mr), HMR_ENOSYS);
  EXPECT_NE(std::string(hmr_last_error()).find("FI_HMEM='^rocr'"), std::string::npos)
      << hmr_last_error();
  const hmr_mr_attr cuda = dmabuf.attr(HMR_HMEM_CUDA);  // enabled: no runtime asked
  ASSERT_EQ(hmr_mr_regattr(domain.get(), &cuda, HMR_MR_DMABUF, &mr), 0) << hmr_last_error();
  EXPECT_EQ(hmr_mr_close(mr), 0);
}

}  // namespace
}  // namespace hmr_hmem_test
