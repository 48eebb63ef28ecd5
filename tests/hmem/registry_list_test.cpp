// FI_HMEM parsing (hmem/iface_list.h): which interfaces a process enables, in which order
// detection asks them, and a clear error for anything else.
#include "hmem/iface_list.h"

#include <gtest/gtest.h>

#include <vector>

namespace hmr::hmem {
namespace {

std::vector<int> enabled_ifaces(const IfaceSelection& selection) {
  std::vector<int> enabled;
  for (int iface = 0; iface < HMR_HMEM_IFACE_COUNT; ++iface) {
    if (selection.is_enabled(iface)) enabled.push_back(iface);
  }
  return enabled;
}

const std::vector<int> kEveryIface = {HMR_HMEM_SYSTEM, HMR_HMEM_CUDA,   HMR_HMEM_ROCR,
                                      HMR_HMEM_ZE,     HMR_HMEM_NEURON, HMR_HMEM_SYNAPSEAI};
const std::vector<int> kDefaultOrder = {HMR_HMEM_CUDA, HMR_HMEM_ROCR, HMR_HMEM_ZE,
                                        HMR_HMEM_NEURON, HMR_HMEM_SYNAPSEAI};

TEST(IfaceList, UnsetOrBlankEnablesEveryIfaceInTheDefaultOrder) {
  for (const char* text : {static_cast<const char*>(nullptr), "", "   "}) {
    Result<IfaceSelection> selection = parse_iface_list(text);
    ASSERT_TRUE(selection.ok()) << selection.status().reason();
    EXPECT_EQ(enabled_ifaces(*selection), kEveryIface);
    EXPECT_EQ(selection->detection_order, kDefaultOrder);
  }
}

TEST(IfaceList, AListEnablesThoseAndSystemAndDetectsInTheListedOrder) {
  Result<IfaceSelection> selection = parse_iface_list("ze,cuda");
  ASSERT_TRUE(selection.ok()) << selection.status().reason();
  EXPECT_EQ(enabled_ifaces(*selection),
            (std::vector<int>{HMR_HMEM_SYSTEM, HMR_HMEM_CUDA, HMR_HMEM_ZE}));
  EXPECT_EQ(selection->detection_order, (std::vector<int>{HMR_HMEM_ZE, HMR_HMEM_CUDA}));
  EXPECT_EQ(selection->text, "ze,cuda");
}

TEST(IfaceList, SemicolonsCaseAndSpacesAreAccepted) {
  Result<IfaceSelection> selection = parse_iface_list(" CUDA ; Rocr,, ");
  ASSERT_TRUE(selection.ok()) << selection.status().reason();
  EXPECT_EQ(selection->detection_order, (std::vector<int>{HMR_HMEM_CUDA, HMR_HMEM_ROCR}));
}

TEST(IfaceList, RepeatedNamesCountOnce) {
  Result<IfaceSelection> selection = parse_iface_list("cuda,ze,cuda");
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->detection_order, (std::vector<int>{HMR_HMEM_CUDA, HMR_HMEM_ZE}));
}

TEST(IfaceList, SystemAloneDisablesEveryDeviceIface) {
  Result<IfaceSelection> selection = parse_iface_list("system");
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(enabled_ifaces(*selection), (std::vector<int>{HMR_HMEM_SYSTEM}));
  EXPECT_TRUE(selection->detection_order.empty());
}

TEST(IfaceList, CaretExcludesTheListedIfaces) {
  Result<IfaceSelection> selection = parse_iface_list("^rocr,ze");
  ASSERT_TRUE(selection.ok()) << selection.status().reason();
  EXPECT_EQ(enabled_ifaces(*selection), (std::vector<int>{HMR_HMEM_SYSTEM, HMR_HMEM_CUDA,
                                                          HMR_HMEM_NEURON, HMR_HMEM_SYNAPSEAI}));
  EXPECT_EQ(selection->detection_order,
            (std::vector<int>{HMR_HMEM_CUDA, HMR_HMEM_NEURON, HMR_HMEM_SYNAPSEAI}));
}

TEST(IfaceList, BadValuesAreErrorsNamingTheVariableAndTheValue) {
  for (const char* text : {"gpu", "cuda,nvidia", "^", "^ ,", "^system", "^cuda,system", "cuda^"}) {
    SCOPED_TRACE(text);
    Result<IfaceSelection> selection = parse_iface_list(text);
    ASSERT_FALSE(selection.ok());
    EXPECT_EQ(selection.status().code(), HMR_EINVAL);
    EXPECT_NE(selection.status().reason().find("FI_HMEM='"), std::string::npos)
        << selection.status().reason();
  }
  Result<IfaceSelection> unknown = parse_iface_list("cuda,nvidia");
  EXPECT_NE(unknown.status().reason().find("'nvidia'"), std::string::npos);
  EXPECT_NE(unknown.status().reason().find("known: system, cuda"), std::string::npos);
}

TEST(IfaceList, NamesMapToIfaces) {
  EXPECT_EQ(iface_from_name("synapseai"), HMR_HMEM_SYNAPSEAI);
  EXPECT_EQ(iface_from_name("ZE"), HMR_HMEM_ZE);
  EXPECT_EQ(iface_from_name("z"), -1);
  EXPECT_EQ(iface_from_name("cudaa"), -1);
}

}  // namespace
}  // namespace hmr::hmem
