// A fixture for tests of the verbs adapter against the fake libibverbs: points
// HMR_IBVERBS_LIBRARY at the fake (and HMR_MLX5_LIBRARY at the fake libmlx5), resets it, and at
// the end checks that nothing the adapter opened is left behind (contexts, PDs, MRs, windows,
// QPs, CQs, mkeys, device lists, fds).
#pragma once

#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "nic/verbs/verbs_nic.h"
#include "tests/api/test_support.h"
#include "tests/nic/fake_ibverbs_library.h"

namespace hmr::testing {

// What the C-ABI tests of the verbs NIC ask for: a basic-mode domain on the fake ConnectX-like
// device (relaxed ordering off, so recorded access flags hold only what a test asked for) or on
// the fake EFA-like one, and remote access to pages.
inline constexpr uint64_t kVerbsBasicMode =
    HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY;
inline constexpr uint64_t kRemoteAccess = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
inline constexpr size_t kTestPage = 4096;
inline constexpr const char* kFakeConnectX = "device=fake_mlx5_0;relaxed_ordering=off";
inline constexpr const char* kFakeEfa = "device=fake_efa_0;relaxed_ordering=off";

// A sysfs without peer-memory clients, so results do not depend on the machine's.
inline verbs::VerbsEnvironment no_peer_memory() { return {"/nonexistent-hmr-test-sysfs"}; }

class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    use(fake_ibverbs());
    fds_before_ = open_fd_count();
  }
  void TearDown() override {
    if (nic_ != nullptr) {
      const Status closed = nic_->close_native();
      EXPECT_TRUE(closed.ok()) << closed.reason();
    }
    nic_.reset();
    app_.reset();
    for (const char* kind : {"contexts", "pds", "mrs", "mws", "qps", "device_lists", "cqs",
                             "umr_qps", "mkeys"}) {
      EXPECT_EQ(fake_->live(kind), 0) << kind << " left behind";
    }
    // A context's close destroys what is left on it, as the kernel does: what it found is a
    // leak all the same.
    EXPECT_EQ(fake_->live("destroyed_by_close"), expected_destroyed_by_close_)
        << "objects left on a PD until its device closed";
    EXPECT_EQ(open_fd_count(), fds_before_) << "an fd leaked";
    unsetenv("HMR_IBVERBS_LIBRARY");
    unsetenv("HMR_MLX5_LIBRARY");
  }

  // Makes `fake` the library the adapter loads, in its default state.
  void use(const FakeIbverbs& fake) {
    fake_ = &fake;
    setenv("HMR_IBVERBS_LIBRARY", fake.path, 1);
    setenv("HMR_MLX5_LIBRARY", HMR_FAKE_MLX5_PATH, 1);
    fake.reset();
  }
  const FakeIbverbs& fake() const { return *fake_; }

  Result<std::unique_ptr<nic::Nic>> try_open(
      const char* options, void* handle = nullptr,
      const verbs::VerbsEnvironment& environment = no_peer_memory()) {
    return verbs::VerbsNic::open(options, handle, environment);
  }
  // Opens the adapter into nic_; the test fails (and stops) when it cannot.
  void open(const char* options = "", void* handle = nullptr,
            const verbs::VerbsEnvironment& environment = no_peer_memory()) {
    Result<std::unique_ptr<nic::Nic>> opened = try_open(options, handle, environment);
    ASSERT_TRUE(opened.ok()) << opened.status().reason();
    nic_ = std::move(*opened);
  }
  // A PD the test (as the application) allocates on device `index`, freed after nic_.
  verbs::ibv_pd* app_pd(int index = 0) {
    app_ = std::make_unique<AppPd>(*fake_, index);
    return app_->pd();
  }
  verbs::VerbsNic& verbs_nic() { return static_cast<verbs::VerbsNic&>(*nic_); }

  // A memfd standing for an exported dma-buf of `size` bytes (the fake looks the fd up and
  // checks the range against its size), closed with the object.
  struct FakeDmabuf {
    explicit FakeDmabuf(size_t size) : fd(memfd_create("hmr-verbs-test", MFD_CLOEXEC)) {
      if (fd >= 0 && ftruncate(fd, static_cast<off_t>(size)) != 0) {
        close(fd);
        fd = -1;
      }
    }
    ~FakeDmabuf() {
      if (fd >= 0) close(fd);
    }
    FakeDmabuf(const FakeDmabuf&) = delete;
    FakeDmabuf& operator=(const FakeDmabuf&) = delete;
    int fd;
  };
  // A registration of `dmabuf` ([offset, +len) of the fd, CUDA memory at base 0x7000000).
  static nic::RegistrationRequest device_request(const hmr_mr_dmabuf& dmabuf, uint64_t access) {
    nic::RegistrationRequest request;
    request.dmabuf = &dmabuf;
    request.access = access;
    request.flags = HMR_MR_DMABUF;
    request.iface = HMR_HMEM_CUDA;
    return request;
  }
  static constexpr uintptr_t kDeviceBase = 0x7000000;

  static nic::RegistrationRequest host_request(const iovec& segment, uint64_t access) {
    nic::RegistrationRequest request;
    request.segments = {&segment, 1};
    request.access = access;
    return request;
  }
  static const hmr_verbs_desc& desc_of(const nic::Registration& registration) {
    return *static_cast<const hmr_verbs_desc*>(registration.desc);
  }
  static const verbs::ibv_mr* chunk_of(const nic::Registration& registration, size_t index) {
    return reinterpret_cast<const verbs::ibv_mr*>(desc_of(registration).chunks[index]);
  }
  // The registrations the fake made since reset.
  std::vector<fake_ibverbs_registration> registrations() const {
    std::vector<fake_ibverbs_registration> records(256);
    const int count = fake_->registrations(records.data(), static_cast<int>(records.size()));
    records.resize(static_cast<size_t>(count) < records.size() ? static_cast<size_t>(count)
                                                               : records.size());
    return records;
  }

  const FakeIbverbs* fake_ = nullptr;
  int expected_destroyed_by_close_ = 0;  // (a test that leaves objects on purpose says how many)
  std::unique_ptr<AppPd> app_;
  std::unique_ptr<nic::Nic> nic_;
  int fds_before_ = 0;
};

// The same through the public C ABI: a verbs domain over the fake, with caching off so every
// hmr_mr_reg reaches the fake, closed before the adapter's leftovers are checked.
class VerbsDomainTest : public VerbsTest {
 protected:
  void TearDown() override {
    if (domain_ != nullptr) {
      EXPECT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
    }
    VerbsTest::TearDown();
  }
  // hmr_domain_open's return code; attr_ holds what it wrote back.
  int open_domain(const char* options, void* handle, uint64_t mode) {
    attr_ = hmr_domain_attr{};
    attr_.size = sizeof attr_;
    attr_.nic = "verbs";
    attr_.nic_options = options;
    attr_.nic_handle = handle;
    attr_.mr_mode = mode;
    attr_.cache_monitor = "disabled";
    return hmr_domain_open(&attr_, &domain_);
  }
  // A verbs domain with the default cache monitor, in `mode`.  The monitor and hmr's
  // deferred-deregistration thread keep their fds for the life of the process once started,
  // so a first domain starts them and the fd count is taken again before the second opens.
  // False (and the caller skips) when no monitor can start here.
  bool open_cached_domain(uint64_t mode) {
    attr_ = hmr_domain_attr{};
    attr_.size = sizeof attr_;
    attr_.nic = "verbs";
    attr_.mr_mode = mode;
    EXPECT_EQ(hmr_domain_open(&attr_, &domain_), 0) << hmr_last_error();
    EXPECT_EQ(hmr_domain_close(domain_), 0);
    domain_ = nullptr;
    fds_before_ = open_fd_count();
    attr_.cache_monitor = nullptr;
    attr_.nic_handle = nullptr;  // it came back as the PD of the closed domain
    EXPECT_EQ(hmr_domain_open(&attr_, &domain_), 0) << hmr_last_error();
    return domain_ != nullptr && std::string(attr_.cache_monitor) != "disabled";
  }
  // hmr_mr_reg in domain_; the test fails (and the pointer is null) when it cannot.
  hmr_test::MrPtr reg(const void* buf, size_t len, uint64_t access, uint64_t flags = 0) {
    hmr_mr* mr = nullptr;
    const int rc = hmr_mr_reg(domain_, buf, len, access, 0, 0, flags, &mr, nullptr);
    EXPECT_EQ(rc, 0) << hmr_last_error();
    return hmr_test::MrPtr(rc == 0 ? mr : nullptr);
  }
  // The first verbs MR behind an MR's descriptor (struct hmr_verbs_desc).
  static const verbs::ibv_mr* ibv_mr_of(hmr_mr* mr) {
    const auto* desc = static_cast<const hmr_verbs_desc*>(hmr_mr_desc(mr));
    return desc == nullptr ? nullptr : reinterpret_cast<const verbs::ibv_mr*>(desc->mr);
  }

  hmr_domain_attr attr_{};
  hmr_domain* domain_ = nullptr;
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace hmr::testing
