// hmr_md_query_op through the C ABI: which memory operations each NIC offers (all of them on
// the sim NIC, none on a callback NIC), the reason it writes when one is missing (bounded by
// reason_size, NUL-terminated, optional), and its bad arguments.  The contract is hmr.h
// ("memory operations").
#include <cstdint>
#include <cstring>
#include <string>

#include "memory_ops_raw_enum_calls.h"
#include "memory_ops_support.h"

namespace hmr_memops_test {
namespace {

constexpr hmr_md_op kAllOps[] = {HMR_MD_OP_REREG,        HMR_MD_OP_MEMORY_WINDOWS,
                                 HMR_MD_OP_ODP,          HMR_MD_OP_IMPLICIT_ODP,
                                 HMR_MD_OP_ADVISE,       HMR_MD_OP_INDIRECT};
static_assert(sizeof kAllOps / sizeof kAllOps[0] == HMR_MD_OP_COUNT);

// A sim RAW-key domain lacks memory windows: the one "no" the sim NIC has.
DomainPtr open_raw_key_domain() {
  return open_domain(kVirtProvKey | HMR_MR_RAW, "require=RAW;key_size=16");
}

TEST(MdQueryOp, SimVirtAddrDomainHasEveryOperation) {
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  for (const hmr_md_op op : kAllOps) {
    EXPECT_EQ(hmr_md_query_op(domain.get(), op, nullptr, 0), 1)
        << "op " << static_cast<int>(op) << ": " << hmr_last_error();
  }
}

TEST(MdQueryOp, CallbackNicHasNone) {
  hmr_nic_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  callbacks.size = sizeof callbacks;
  callbacks.key_size = 4;
  callbacks.reg_va = [](void*, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
    mr->key = 1;
    return 0;
  };
  callbacks.dereg = [](void*, const hmr_nic_mr*, char*, size_t) { return 0; };
  hmr_domain_attr attr = callback_domain_attr(callbacks, kVirtProvKey);
  hmr_domain* raw_domain = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw_domain));
  DomainPtr domain(raw_domain);
  for (const hmr_md_op op : kAllOps) expect_unavailable(domain.get(), op);
  expect_alloc_window_refused(domain.get(), HMR_MW_TYPE_1, HMR_ENOSYS);
}

TEST(MdQueryOp, ReasonIsBoundedAndOptional) {
  DomainPtr domain = open_raw_key_domain();
  ASSERT_TRUE(domain);
  const OpAnswer full = query_op(domain.get(), HMR_MD_OP_MEMORY_WINDOWS);
  ASSERT_EQ(full.rc, 0);
  ASSERT_GT(full.reason.size(), 8u) << "the test needs a reason longer than 8 bytes";

  char reason[32];
  std::memset(reason, 'Z', sizeof reason);
  EXPECT_EQ(hmr_md_query_op(domain.get(), HMR_MD_OP_MEMORY_WINDOWS, reason, 8), 0);
  EXPECT_EQ(std::strlen(reason), 7u);
  EXPECT_EQ(std::string(reason), full.reason.substr(0, 7));
  for (size_t i = 8; i < sizeof reason; ++i) ASSERT_EQ(reason[i], 'Z') << "wrote past reason_size";

  std::memset(reason, 'Z', sizeof reason);
  EXPECT_EQ(hmr_md_query_op(domain.get(), HMR_MD_OP_MEMORY_WINDOWS, reason, 0), 0);
  EXPECT_EQ(reason[0], 'Z') << "wrote with reason_size 0";
  EXPECT_EQ(hmr_md_query_op(domain.get(), HMR_MD_OP_MEMORY_WINDOWS, nullptr, 0), 0);
  EXPECT_EQ(hmr_md_query_op(domain.get(), HMR_MD_OP_MEMORY_WINDOWS, nullptr, 64), 0);
  // An available operation answers 1 without a buffer as well.
  EXPECT_EQ(hmr_md_query_op(domain.get(), HMR_MD_OP_REREG, nullptr, 0), 1);
}

TEST(MdQueryOp, BadArguments) {
  DomainAndMr handles(open_domain(kVirtProvKey), kPage, kRemote);
  ASSERT_TRUE(handles);
  hmr_domain* const domain = handles.domain.get();
  char reason[16];
  std::memset(reason, 'Z', sizeof reason);

  EXPECT_HMR_ERROR(hmr_md_query_op(nullptr, HMR_MD_OP_REREG, reason, sizeof reason), HMR_EINVAL);
  EXPECT_HMR_ERROR(
      hmr_md_query_op(as<hmr_domain>(handles.mr.get()), HMR_MD_OP_REREG, reason, sizeof reason),
      HMR_EINVAL);
  for (const int op : {HMR_MD_OP_COUNT, HMR_MD_OP_COUNT + 1, -1, 1 << 30}) {
    SCOPED_TRACE("op " + std::to_string(op));
    EXPECT_HMR_ERROR(raw_md_query_op(domain, op, reason, sizeof reason), HMR_EINVAL);
  }
  EXPECT_EQ(reason[0], 'Z') << "reason written on failure";
}

}  // namespace
}  // namespace hmr_memops_test
