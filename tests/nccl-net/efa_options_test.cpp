// The EFA endpoint options (plugins/nccl-net/fabric/efa_endpoint_options.h): which providers
// get them, what is set, and what a provider's answer does.  No EFA device here, so the
// endpoint is a stand-in whose setopt records the calls: fi_setopt reaches a provider only
// through the endpoint's operation table, which this fills as a provider does.
#include <gtest/gtest.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <string>
#include <vector>

#include "fabric/efa_endpoint_options.h"

namespace hmr::nccl {
namespace {

struct SetoptCall {
  int level;
  int name;
  bool value;
  size_t length;
};
std::vector<SetoptCall> g_calls;
int g_answer_for_shm = 0;  // what setopt answers for FI_OPT_SHARED_MEMORY_PERMITTED

int recording_setopt(fid_t, int level, int name, const void* value, size_t length) {
  g_calls.push_back({level, name, *static_cast<const bool*>(value), length});
  return name == kOptSharedMemoryPermitted ? g_answer_for_shm : 0;
}

const char* strerror_stub(int) { return "stub error"; }

struct StandInEndpoint {
  fi_ops_ep ops{};
  fid_ep ep{};
  StandInEndpoint() {
    ops.size = sizeof ops;
    ops.setopt = recording_setopt;
    ep.fid.fclass = FI_CLASS_EP;
    ep.ops = &ops;
  }
};

TEST(EfaEndpointOptions, OnlyEfaProvidersGetThem) {
  EXPECT_TRUE(is_efa_provider("efa"));
  EXPECT_TRUE(is_efa_provider("efa-direct"));
  EXPECT_FALSE(is_efa_provider("tcp"));
  EXPECT_FALSE(is_efa_provider("tcp;ofi_rxm"));
  EXPECT_FALSE(is_efa_provider("shm"));
  EXPECT_FALSE(is_efa_provider("verbs;ofi_rxm"));
  EXPECT_FALSE(is_efa_provider(nullptr));
}

TEST(EfaEndpointOptions, BothAreSetToFalseAndAnUnknownOneIsTolerated) {
  Libfabric libfabric{};
  libfabric.strerror = strerror_stub;
  for (const int answer : {0, -FI_ENOPROTOOPT, -FI_EOPNOTSUPP}) {
    SCOPED_TRACE(answer);
    g_calls.clear();
    g_answer_for_shm = answer;
    StandInEndpoint stand_in;
    std::string notes, why;
    EXPECT_TRUE(apply_efa_endpoint_options(libfabric, &stand_in.ep, &notes, &why)) << why;
    ASSERT_EQ(g_calls.size(), 2u);
    EXPECT_EQ(g_calls[0].level, FI_OPT_ENDPOINT);
    EXPECT_EQ(g_calls[0].name, 10);  // FI_OPT_CUDA_API_PERMITTED in libfabric >= 1.18
    EXPECT_EQ(g_calls[1].name, 11);  // FI_OPT_SHARED_MEMORY_PERMITTED
    for (const SetoptCall& call : g_calls) {
      EXPECT_FALSE(call.value);
      EXPECT_EQ(call.length, sizeof(bool));
    }
    EXPECT_EQ(notes.find("FI_OPT_SHARED_MEMORY_PERMITTED") != std::string::npos, answer != 0)
        << notes;
  }
}

TEST(EfaEndpointOptions, ARefusedValueFailsTheEndpointWithTheOptionNamed) {
  Libfabric libfabric{};
  libfabric.strerror = strerror_stub;
  g_calls.clear();
  g_answer_for_shm = -FI_EINVAL;
  StandInEndpoint stand_in;
  std::string why;
  EXPECT_FALSE(apply_efa_endpoint_options(libfabric, &stand_in.ep, nullptr, &why));
  EXPECT_NE(why.find("FI_OPT_SHARED_MEMORY_PERMITTED"), std::string::npos) << why;
}

}  // namespace
}  // namespace hmr::nccl
