// Device probing: peer-direct hints from a sysfs tree of the test's own, the dma-buf probe on
// each device, providers without the extended verbs, and the real libibverbs of this machine.
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hmem/peer_direct.h"
#include "nic/verbs/device_probe.h"
#include "tests/nic/verbs_test_fixture.h"

namespace hmr::testing {
namespace {

namespace fs = std::filesystem;

// A directory that mirrors the sysfs layout the hints are read from, removed at scope exit.
class FakeSysfs {
 public:
  FakeSysfs() {
    char pattern[] = "/tmp/hmr-sysfs-XXXXXX";
    const char* made = mkdtemp(pattern);
    if (made != nullptr) root_ = made;
  }
  ~FakeSysfs() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  void write(const std::string& relative, const std::string& contents) const {
    const fs::path path = fs::path(root_) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << contents;
  }
  void make_directory(const std::string& relative) const {
    fs::create_directories(fs::path(root_) / relative);
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

constexpr const char* kPeermem = "sys/module/nvidia_peermem/version";
constexpr const char* kNvMem = "sys/kernel/mm/memory_peers/nv_mem/version";
constexpr const char* kNvMemNc = "sys/kernel/mm/memory_peers/nv_mem_nc/version";

TEST(PeerDirect, NoClientSaysWhatWasLookedFor) {
  FakeSysfs sysfs;
  ASSERT_FALSE(sysfs.root().empty());
  const hmem::PeerDirectReport report = hmem::probe_peer_direct(sysfs.root());
  EXPECT_FALSE(report.available);
  EXPECT_TRUE(report.clients.empty());
  for (const char* path : {kPeermem, kNvMem, kNvMemNc}) {
    EXPECT_TRUE(contains(report.reason, path)) << report.reason;
  }
  EXPECT_TRUE(contains(report.reason, "modprobe nvidia-peermem")) << report.reason;
}

TEST(PeerDirect, EachClientIsReportedWithItsVersion) {
  FakeSysfs sysfs;
  sysfs.write(kNvMem, "1.3-0\n");
  hmem::PeerDirectReport report = hmem::probe_peer_direct(sysfs.root());
  ASSERT_TRUE(report.available);
  ASSERT_EQ(report.clients.size(), 1u);
  EXPECT_EQ(report.clients[0].name, "nv_mem");
  EXPECT_EQ(report.clients[0].version, "1.3-0");
  EXPECT_TRUE(contains(report.reason, "nv_peer_mem client nv_mem loaded (version 1.3-0"))
      << report.reason;

  sysfs.write(kPeermem, "  550.54.15 \n");
  sysfs.write(kNvMemNc, "1.3-0");
  report = hmem::probe_peer_direct(sysfs.root() + "/");
  ASSERT_EQ(report.clients.size(), 3u);
  EXPECT_EQ(report.clients[0].name, "nvidia_peermem");
  EXPECT_EQ(report.clients[0].version, "550.54.15");
  EXPECT_EQ(report.clients[2].name, "nv_mem_nc");
  EXPECT_TRUE(contains(report.reason, "nvidia-peermem module loaded")) << report.reason;
}

TEST(PeerDirect, AnUnreadableHintIsNamed) {
  FakeSysfs sysfs;
  sysfs.make_directory(kPeermem);  // exists, but reading it fails (EISDIR)
  const hmem::PeerDirectReport report = hmem::probe_peer_direct(sysfs.root());
  EXPECT_FALSE(report.available);
  EXPECT_TRUE(contains(report.reason, "cannot be read")) << report.reason;
}

using VerbsProbeTest = VerbsTest;

TEST_F(VerbsProbeTest, PeerDirectHintsReachTheCapabilities) {
  FakeSysfs sysfs;
  sysfs.write(kPeermem, "550.54.15\n");
  open("", nullptr, verbs::VerbsEnvironment{sysfs.root()});
  EXPECT_TRUE(nic_->capabilities().peer_direct);
  EXPECT_TRUE(contains(verbs_nic().probe().peer_direct.reason, "550.54.15"));
  // With a peer-memory client, CUDA memory may be registered by address.
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  nic::RegistrationRequest request = host_request(segment, HMR_REMOTE_READ);
  request.iface = HMR_HMEM_CUDA;
  Result<nic::Registration> registered = nic_->register_memory(request);
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsProbeTest, DmabufIsProbedPerDevice) {
  Result<std::shared_ptr<const verbs::IbverbsLibrary>> library = verbs::IbverbsLibrary::load();
  ASSERT_TRUE(library.ok()) << library.status().reason();
  Result<std::vector<verbs::DeviceProbe>> probes =
      verbs::probe_all_devices(*library, no_peer_memory().sysfs_root);
  ASSERT_TRUE(probes.ok()) << probes.status().reason();
  ASSERT_EQ(probes->size(), 2u);
  const verbs::DeviceProbe& mlx = (*probes)[0];
  const verbs::DeviceProbe& efa = (*probes)[1];
  EXPECT_EQ(mlx.name, "fake_mlx5_0");
  EXPECT_TRUE(mlx.dmabuf.supported);
  EXPECT_TRUE(contains(mlx.dmabuf.reason, "EBADF")) << mlx.dmabuf.reason;
  EXPECT_TRUE(mlx.on_demand_paging.supported);
  EXPECT_TRUE(contains(mlx.on_demand_paging.reason, "send|recv|write|read|atomic"))
      << mlx.on_demand_paging.reason;
  EXPECT_TRUE(mlx.window_type1.supported);
  EXPECT_TRUE(mlx.window_type2.supported);
  EXPECT_EQ(mlx.max_mr_size, 1ull << 46);
  EXPECT_EQ(efa.name, "fake_efa_0");
  EXPECT_FALSE(efa.dmabuf.supported);
  EXPECT_FALSE(efa.on_demand_paging.supported);
  EXPECT_FALSE(efa.window_type1.supported);
  EXPECT_FALSE(efa.atomics);
  // One fd -1 probe per device, and everything opened for probing is closed again.
  EXPECT_EQ(fake().call_count("ibv_reg_dmabuf_mr"), 2);
  EXPECT_EQ(fake().live("contexts"), 0);
  EXPECT_EQ(fake().live("pds"), 0);
}

TEST_F(VerbsProbeTest, ADeviceThatCannotBeOpenedIsReportedNotFatal) {
  Result<std::shared_ptr<const verbs::IbverbsLibrary>> library = verbs::IbverbsLibrary::load();
  ASSERT_TRUE(library.ok());
  fake().set_failure("ibv_open_device#2", EACCES);
  Result<std::vector<verbs::DeviceProbe>> probes = verbs::probe_all_devices(*library, "");
  ASSERT_TRUE(probes.ok());
  ASSERT_EQ(probes->size(), 2u);
  EXPECT_TRUE((*probes)[0].dmabuf.supported);
  EXPECT_EQ((*probes)[1].name, "fake_efa_0");
  EXPECT_FALSE((*probes)[1].dmabuf.supported);
  EXPECT_TRUE(contains((*probes)[1].dmabuf.reason, "device not probed"))
      << (*probes)[1].dmabuf.reason;
}

TEST_F(VerbsProbeTest, UnexpectedDmabufAnswersAreUnsupported) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.dmabuf_errno = EIO; });
  open();
  EXPECT_FALSE(nic_->capabilities().dmabuf_import);
  EXPECT_TRUE(contains(verbs_nic().probe().dmabuf.reason, "unexpectedly"))
      << verbs_nic().probe().dmabuf.reason;
}

TEST_F(VerbsProbeTest, ProvidersWithoutQueryDeviceExFallBack) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.query_device_ex = 0; });
  open();
  const verbs::DeviceProbe& probe = verbs_nic().probe();
  EXPECT_FALSE(probe.extended_query);
  EXPECT_EQ(probe.max_mr_size, 1ull << 46);  // from ibv_query_device
  EXPECT_EQ(fake().call_count("ibv_query_device"), 1);
  EXPECT_FALSE(probe.on_demand_paging.supported);
  EXPECT_TRUE(contains(probe.on_demand_paging.reason, "ibv_query_device_ex"))
      << probe.on_demand_paging.reason;
}

TEST_F(VerbsProbeTest, QueryDeviceExNotSupportedFallsBackToo) {
  fake().set_failure("query_device_ex", EOPNOTSUPP);
  open();
  EXPECT_FALSE(verbs_nic().probe().extended_query);
  EXPECT_EQ(fake().call_count("ibv_query_device"), 1);
}

// The machine's own libibverbs, as a user without an override gets it.  The expectation is
// computed independently: whatever ibv_get_device_list says here, the adapter must agree.
TEST(VerbsSystemLibrary, AgreesWithTheMachinesLibibverbs) {
  // Once a fake libibverbs.so.1 is loaded, the soname names it for the rest of the process;
  // ctest runs this test alone (hmr_verbs_system_library) so it sees the machine's library.
  if (void* loaded = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD); loaded != nullptr) {
    link_map* map = nullptr;
    const bool fake = dlinfo(loaded, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr &&
                      contains(map->l_name, "/fakes/ibverbs");
    dlclose(loaded);
    if (fake) GTEST_SKIP() << "a fake libibverbs is loaded in this process: " << map->l_name;
  }
  unsetenv("HMR_IBVERBS_LIBRARY");
  Result<std::unique_ptr<nic::Nic>> opened = verbs::VerbsNic::open("", nullptr);
  void* handle = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), HMR_ENOSYS);
    EXPECT_TRUE(contains(opened.status().reason(), "libibverbs.so.1"));
    return;
  }
  using GetList = void** (*)(int*);
  using FreeList = void (*)(void**);
  auto get_list =
      reinterpret_cast<GetList>(dlvsym(handle, "ibv_get_device_list", "IBVERBS_1.1"));
  auto free_list =
      reinterpret_cast<FreeList>(dlvsym(handle, "ibv_free_device_list", "IBVERBS_1.1"));
  ASSERT_NE(get_list, nullptr);
  int count = 0;
  errno = 0;
  void** list = get_list(&count);
  const int err = errno;
  if (list != nullptr) free_list(list);
  dlclose(handle);
  if (list == nullptr) {
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), HMR_ENODEV);
    const std::string expected =
        std::string("no RDMA devices: ibv_get_device_list failed: ") + std::strerror(err);
    EXPECT_TRUE(contains(opened.status().reason(), expected)) << opened.status().reason();
  } else if (count == 0) {
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), HMR_ENODEV);
  } else {
    GTEST_SKIP() << "this machine has " << count << " RDMA device(s); opened: "
                 << (opened.ok() ? "yes" : opened.status().reason());
  }
}

}  // namespace
}  // namespace hmr::testing
