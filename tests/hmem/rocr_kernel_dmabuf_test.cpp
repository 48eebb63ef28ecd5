// Whether the kernel is trusted with ROCm dma-buf, from stand-in config and kallsyms files.
#include "rocr/rocr_kernel_dmabuf.h"

#include <gtest/gtest.h>

#include "tests/hmem/rocr_temp_file.h"

namespace hmr::rocr {
namespace {

using hmr::testing::TempFile;

constexpr const char* kNoFile = "/nonexistent/hmr/file";

hmem::Capability verdict(const std::string& config, const std::string& kallsyms) {
  return kernel_dmabuf_capability(KernelConfigSources{config, kallsyms});
}

bool mentions(const hmem::Capability& capability, const char* text) {
  return capability.reason.find(text) != std::string::npos;
}

TEST(RocrKernelDmabuf, ConfigWithBothOptionsIsTrusted) {
  TempFile config("both", "CONFIG_A=y\nCONFIG_PCI_P2PDMA=y\nCONFIG_DMABUF_MOVE_NOTIFY=y\n");
  const hmem::Capability capability = verdict(config.path(), kNoFile);
  EXPECT_TRUE(capability.supported) << capability.reason;
  EXPECT_TRUE(capability.reason.empty());
}

TEST(RocrKernelDmabuf, ConfigDecidesEvenWhenKallsymsLooksGood) {
  TempFile config("none", "# CONFIG_PCI_P2PDMA is not set\nCONFIG_DMABUF_MOVE_NOTIFY=m\n");
  TempFile kallsyms("kallsyms-p2p", "ffffffff81000000 T pci_p2pdma_add_resource\n");
  const hmem::Capability capability = verdict(config.path(), kallsyms.path());
  EXPECT_FALSE(capability.supported);
  EXPECT_TRUE(mentions(capability, config.path().c_str()));
  EXPECT_TRUE(mentions(capability, "CONFIG_DMABUF_MOVE_NOTIFY=y and CONFIG_PCI_P2PDMA=y"))
      << capability.reason;
  EXPECT_TRUE(mentions(capability, "wrong bytes"));
}

TEST(RocrKernelDmabuf, EachMissingOptionIsNamed) {
  TempFile no_p2p("no-p2p", "CONFIG_DMABUF_MOVE_NOTIFY=y\nCONFIG_PCI_P2PDMA_EXTRA=y\n");
  const hmem::Capability without_p2p = verdict(no_p2p.path(), kNoFile);
  EXPECT_FALSE(without_p2p.supported);
  EXPECT_TRUE(mentions(without_p2p, "lacks CONFIG_PCI_P2PDMA=y")) << without_p2p.reason;
  EXPECT_FALSE(mentions(without_p2p, "CONFIG_DMABUF_MOVE_NOTIFY=y"));

  TempFile no_move("no-move", "CONFIG_PCI_P2PDMA=y\n");
  const hmem::Capability without_move = verdict(no_move.path(), kNoFile);
  EXPECT_FALSE(without_move.supported);
  EXPECT_TRUE(mentions(without_move, "lacks CONFIG_DMABUF_MOVE_NOTIFY=y")) << without_move.reason;
}

TEST(RocrKernelDmabuf, KallsymsWithoutP2pdmaSaysItIsOff) {
  // dma_buf_move_notify and dma_pci_p2pdma_supported are in every kernel: no evidence.
  TempFile kallsyms("kallsyms-plain",
                    "ffffffff81da3060 T dma_buf_move_notify\n"
                    "ffffffff8140e940 T dma_pci_p2pdma_supported\n"
                    "ffffffffc0001000 t helper_pci_p2pdma_add_resource\t[some_module]\n");
  const hmem::Capability capability = verdict(kNoFile, kallsyms.path());
  EXPECT_FALSE(capability.supported);
  EXPECT_TRUE(mentions(capability, "CONFIG_PCI_P2PDMA is off")) << capability.reason;
}

TEST(RocrKernelDmabuf, KallsymsCannotConfirmMoveNotify) {
  TempFile kallsyms("kallsyms-p2p",
                    "ffffffff81da3060 T dma_buf_move_notify\n"
                    "ffffffff81500000 T pci_p2pdma_add_resource\n");
  const hmem::Capability capability = verdict(kNoFile, kallsyms.path());
  EXPECT_FALSE(capability.supported);
  EXPECT_TRUE(mentions(capability, "CONFIG_PCI_P2PDMA is on")) << capability.reason;
  EXPECT_TRUE(mentions(capability, "CONFIG_DMABUF_MOVE_NOTIFY cannot be confirmed"));
  EXPECT_TRUE(mentions(capability, kNoFile));
}

TEST(RocrKernelDmabuf, NothingReadableIsNo) {
  const hmem::Capability capability = verdict(kNoFile, "/nonexistent/hmr/kallsyms");
  EXPECT_FALSE(capability.supported);
  EXPECT_TRUE(mentions(capability, "cannot read the kernel configuration")) << capability.reason;
}

TEST(RocrKernelDmabuf, DefaultSourcesNameThisKernel) {
  const KernelConfigSources sources = default_kernel_config_sources();
  EXPECT_EQ(sources.config_path.rfind("/boot/config-", 0), 0u);
  EXPECT_GT(sources.config_path.size(), std::string("/boot/config-").size());
  EXPECT_EQ(sources.kallsyms_path, "/proc/kallsyms");
  // Whatever this machine's answer, a "no" says why.
  const hmem::Capability capability = kernel_dmabuf_capability(sources);
  EXPECT_TRUE(capability.supported || !capability.reason.empty());
}

}  // namespace
}  // namespace hmr::rocr
