// The verbs calls of the adapter's UMR queue (nic/verbs/umr_queue.*: what fills indirect keys)
// made to fail through the public C ABI, against the fake libibverbs and libmlx5
// (fake_ibverbs_set_failure; "name#n" fails only the nth call from now): ibv_create_cq,
// ibv_query_port, ibv_modify_qp at each transition, ibv_poll_cq, ibv_destroy_qp and
// ibv_destroy_cq.  Each failure is an error code with a reason naming the verb and its errno,
// never a crash and never an object left behind; creation fails on four threads at once (the
// first indirect keys of a domain race to create the queue).  The verbs the rest of the adapter
// makes are refused in verbs_nic_test.cpp, verbs_ops_test.cpp, verbs_memory_ops_test.cpp,
// verbs_probe_test.cpp, verbs_domain_test.cpp and verbs_indirect_key_test.cpp.
#include <hmr/hmr.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/memory_ops_support.h"
#include "tests/nic/verbs_test_fixture.h"
#include "tests/threads_started_together.h"

namespace hmr::testing {
namespace {

using hmr_memops_test::contains;
using hmr_memops_test::MrPtr;

constexpr int kThreads = hmr_test::kThreadsStartedTogether;
using hmr_test::on_threads;
constexpr int kGeneralError = 21;  // IBV_WC_GENERAL_ERR (rdma-core verbs.h)

class VerbsCallFailures : public VerbsDomainTest {
 protected:
  void SetUp() override {
    VerbsDomainTest::SetUp();
    ASSERT_EQ(open_domain(kFakeConnectX, nullptr, kVerbsBasicMode), 0) << hmr_last_error();
    for (Pieces& pieces : pieces_) {
      pieces.a = reg(pieces.first.data(), kTestPage, kRemoteAccess);
      pieces.b = reg(pieces.second.data(), kTestPage, kRemoteAccess);
      ASSERT_TRUE(pieces.a && pieces.b);
    }
  }
  void TearDown() override {
    for (Pieces& pieces : pieces_) {
      pieces.a.reset();
      pieces.b.reset();
    }
    VerbsDomainTest::TearDown();
  }

  // Two registered pages, for an indirect key over parts of both.
  struct Pieces {
    std::vector<char> first = std::vector<char>(kTestPage);
    std::vector<char> second = std::vector<char>(kTestPage);
    MrPtr a, b;
  };
  int indirect(int i, hmr_mr** out) {
    Pieces& pieces = pieces_[static_cast<size_t>(i)];
    const hmr_mr_segment segments[2] = {{pieces.a.get(), pieces.first.data() + 100, 200},
                                        {pieces.b.get(), pieces.second.data(), 300}};
    return hmr_mr_reg_indirect(domain_, segments, 2, kRemoteAccess, out);
  }
  // Empty when an indirect key on pieces i fails with -code and a reason holding every part.
  std::string unless_refused(int i, int code, std::vector<std::string> parts) {
    hmr_mr* key = nullptr;
    const int rc = indirect(i, &key);
    if (rc == 0) {
      hmr_mr_close(key);
      return "an indirect key was made";
    }
    const std::string reason = hmr_last_error();
    if (rc != -code) return "rc " + std::to_string(rc) + ": " + reason;
    for (const std::string& part : parts) {
      if (!contains(reason, part)) return "the reason lacks '" + part + "': " + reason;
    }
    return {};
  }
  void expect_nothing_of_the_queue_left() {
    EXPECT_EQ(fake().live("cqs"), 0);
    EXPECT_EQ(fake().live("umr_qps"), 0);
    EXPECT_EQ(fake().live("mkeys"), 0);
  }
  // Makes a key on pieces 0 and closes it: the queue exists from then on.
  void make_the_queue() {
    hmr_mr* key = nullptr;
    ASSERT_EQ(indirect(0, &key), 0) << hmr_last_error();
    ASSERT_EQ(hmr_mr_close(key), 0);
  }

  Pieces pieces_[kThreads];
  const std::vector<std::string> no_failures_ = std::vector<std::string>(kThreads);
};

// ---- destroying the queue at close -----------------------------------------------------------

// ibv_destroy_qp refused when the domain closes: the close fails with the verb and its errno.
// Before the fix the queue's destructor only logged that, and the close reported the PD's
// dealloc, which then failed because the QP was still on it, as the application's fault:
// "objects you made on it through nic_handle ... destroy them before hmr_domain_close".
TEST_F(VerbsCallFailures, AUmrQpTheDeviceWillNotDestroyIsTheCloseReason) {
  make_the_queue();
  for (Pieces& pieces : pieces_) {
    pieces.a.reset();
    pieces.b.reset();
  }
  fake().set_failure("ibv_destroy_qp", EIO);
  EXPECT_EQ(hmr_domain_close(domain_), -HMR_EIO);
  domain_ = nullptr;
  fake().set_failure("ibv_destroy_qp", 0);
  const std::string reason = hmr_last_error();
  EXPECT_TRUE(contains(reason, "ibv_destroy_qp")) << reason;
  EXPECT_TRUE(contains(reason, std::strerror(EIO))) << reason;
  EXPECT_FALSE(contains(reason, "nic_handle")) << reason;  // not the application's objects
  EXPECT_TRUE(contains(reason, "closed all the same")) << reason;
  // The context's close destroyed the QP, its CQ and the PD.
  expect_nothing_of_the_queue_left();
  expected_destroyed_by_close_ = fake().live("destroyed_by_close");
  EXPECT_EQ(expected_destroyed_by_close_, 3);
}

// ibv_destroy_cq refused (the QP went): the close names that verb instead.
TEST_F(VerbsCallFailures, AUmrCqTheDeviceWillNotDestroyIsTheCloseReason) {
  make_the_queue();
  for (Pieces& pieces : pieces_) {
    pieces.a.reset();
    pieces.b.reset();
  }
  fake().set_failure("ibv_destroy_cq", EBUSY);
  EXPECT_EQ(hmr_domain_close(domain_), -HMR_EBUSY);
  domain_ = nullptr;
  fake().set_failure("ibv_destroy_cq", 0);
  const std::string reason = hmr_last_error();
  EXPECT_TRUE(contains(reason, "ibv_destroy_cq")) << reason;
  EXPECT_TRUE(contains(reason, std::strerror(EBUSY))) << reason;
  expect_nothing_of_the_queue_left();
  expected_destroyed_by_close_ = fake().live("destroyed_by_close");
  EXPECT_EQ(expected_destroyed_by_close_, 1);  // the CQ (the PD was free to go)
}

// ---- creating the queue ----------------------------------------------------------------------

// ibv_create_cq and ibv_query_port refused while four threads make their first keys: each key
// names the verb and its errno, nothing of the queue is left; the next keys build it.
TEST_F(VerbsCallFailures, RefusedQueueCreationOnEveryThreadLeavesNothing) {
  struct Refusal {
    const char* verb;
    int err;
    int code;
  };
  for (const Refusal& refusal : {Refusal{"ibv_create_cq", ENOMEM, HMR_ENOMEM},
                                 Refusal{"ibv_query_port", EIO, HMR_EIO}}) {
    SCOPED_TRACE(refusal.verb);
    fake().set_failure(refusal.verb, refusal.err);
    std::vector<std::string> failures = on_threads([&](int i) {
      return unless_refused(i, refusal.code, {refusal.verb, std::strerror(refusal.err)});
    });
    fake().set_failure(refusal.verb, 0);
    EXPECT_EQ(failures, no_failures_);
    expect_nothing_of_the_queue_left();
  }
  make_the_queue();
}

// ibv_modify_qp refused at each transition of the queue's loopback connection (INIT, RTR,
// RTS: the 1st, 2nd, 3rd call from now): the key names the verb and the state, and nothing
// of the queue is left; on four threads, only the thread that met the refusal fails.
TEST_F(VerbsCallFailures, EachRefusedTransitionNamesItsState) {
  const char* states[] = {"INIT", "RTR", "RTS"};
  for (int nth = 1; nth <= 3; ++nth) {
    SCOPED_TRACE(states[nth - 1]);
    fake().set_failure(("ibv_modify_qp#" + std::to_string(nth)).c_str(), EINVAL);
    EXPECT_EQ(unless_refused(0, HMR_EINVAL, {"ibv_modify_qp", states[nth - 1]}), "");
    expect_nothing_of_the_queue_left();
  }
  fake().set_failure("ibv_modify_qp#2", EIO);
  std::atomic<int> refused{0};
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    hmr_mr* key = nullptr;
    if (indirect(i, &key) == 0) return hmr_mr_close(key) == 0 ? "" : "close failed";
    refused.fetch_add(1);
    return contains(hmr_last_error(), "ibv_modify_qp") ? "" : hmr_last_error();
  });
  EXPECT_EQ(failures, no_failures_);
  EXPECT_EQ(refused.load(), 1);
}

// ---- using the queue ---------------------------------------------------------------------------

// ibv_poll_cq refused while a key waits for its UMR: the key names the verb (it said "polling
// the UMR queue's CQ" before), no mkey is left, and the next key reconnects the queue first
// (RESET, INIT, RTR, RTS).
TEST_F(VerbsCallFailures, ARefusedPollFailsTheKeyAndTheQueueReconnects) {
  make_the_queue();
  fake().set_failure("poll_cq", EIO);
  EXPECT_EQ(unless_refused(0, HMR_EIO, {"ibv_poll_cq"}), "");
  fake().set_failure("poll_cq", 0);
  EXPECT_EQ(fake().live("mkeys"), 0);
  const int transitions = fake().call_count("ibv_modify_qp");
  hmr_mr* key = nullptr;
  ASSERT_EQ(indirect(1, &key), 0) << hmr_last_error();
  EXPECT_EQ(fake().call_count("ibv_modify_qp"), transitions + 4);
  EXPECT_EQ(hmr_mr_close(key), 0);
}

// ibv_modify_qp refused while the queue reconnects after a UMR completed in error: the key
// names the RESET; the next key reconnects again and works.
TEST_F(VerbsCallFailures, ARefusedReconnectionIsRetriedByTheNextKey) {
  make_the_queue();
  fake().set_failure("umr:completion", kGeneralError);
  EXPECT_EQ(unless_refused(0, HMR_EIO, {"IBV_WC_GENERAL_ERR (21)"}), "");
  fake().set_failure("umr:completion", 0);
  fake().set_failure("ibv_modify_qp#1", EIO);
  EXPECT_EQ(unless_refused(1, HMR_EIO, {"ibv_modify_qp", "RESET", std::strerror(EIO)}), "");
  EXPECT_EQ(fake().live("mkeys"), 0);
  hmr_mr* key = nullptr;
  ASSERT_EQ(indirect(2, &key), 0) << hmr_last_error();
  EXPECT_EQ(hmr_mr_close(key), 0);
}

}  // namespace
}  // namespace hmr::testing
