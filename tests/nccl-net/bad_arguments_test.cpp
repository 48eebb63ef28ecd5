// Every entry point of the plugin's tables given what NCCL never passes but a caller with a bug
// might: NULL outputs, devices that do not exist, foreign or closed contexts, comms and
// requests, counts out of range.  Each is an error code with a logged reason, never a crash
// and never an answer that leaves the caller waiting.  (The house standard for public
// functions; comms, handles and memory handles are in net_harness_test.cpp's BadInput.)
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "rank.h"

namespace hmr::nccl::test {
namespace {

constexpr auto kBudget = std::chrono::seconds(60);

// The v11 table itself, for the arguments the wrapper cannot pass (a NULL properties struct,
// a context that is not one).
const ncclNet_v11_t& raw_v11() {
  return *static_cast<const ncclNet_v11_t*>(dlsym(plugin_library_or_abort().handle(), "ncclNetPlugin_v11"));
}

// One message over a loopback link, tested until both requests are done; the requests are
// returned (done, so never to be tested again).
bool move_one_message(Rank& rank, Link& link, void* recv_mh, void* send_mh, HostBuffer& buffer,
                      void** recv_request, void** send_request, Failures* f) {
  void* data[1] = {buffer.data()};
  size_t sizes[1] = {4096};
  int tags[1] = {7};
  void* mhs[1] = {recv_mh};
  *recv_request = *send_request = nullptr;
  while (*recv_request == nullptr && !rank.expired()) {
    if (!f->check(rank.net().irecv(link.recv, 1, data, sizes, tags, mhs, recv_request) == ncclSuccess,
                  "irecv failed")) {
      return false;
    }
  }
  while (*send_request == nullptr && !rank.expired()) {
    if (!f->check(rank.net().isend(link.send, buffer.data() + 4096, 64, 7, send_mh, send_request) ==
                      ncclSuccess,
                  "isend failed")) {
      return false;
    }
  }
  bool recv_done = false, send_done = false;
  while (!(recv_done && send_done) && !rank.expired()) {
    int done = 0;
    if (!recv_done) {
      if (!f->check(rank.net().test(*recv_request, &done, nullptr) == ncclSuccess, "test of the receive")) return false;
      recv_done = done != 0;
    }
    if (!send_done) {
      if (!f->check(rank.net().test(*send_request, &done, nullptr) == ncclSuccess, "test of the send")) return false;
      send_done = done != 0;
    }
  }
  return f->check(recv_done && send_done, "the message did not move before the deadline");
}

TEST(BadArguments, DevicesPropertiesListenAndConnect) {
  Failures f;
  Rank rank(plugin_table_or_abort(11), 0, kBudget);
  ASSERT_TRUE(rank.start(plugin_library_or_abort(), &f)) << f.text();
  int ndev = 0;
  ASSERT_EQ(rank.net().devices(&ndev), ncclSuccess);
  size_t mark = log_mark();
  EXPECT_EQ(rank.net().devices(nullptr), ncclInvalidArgument);
  EXPECT_TRUE(warned_since(mark, "ndev is NULL")) << warnings_since(mark);

  Properties props;
  for (int dev : {-1, ndev, 1 << 30}) {
    mark = log_mark();
    EXPECT_EQ(rank.net().properties(dev, &props), ncclInvalidArgument) << dev;
    EXPECT_TRUE(warned_since(mark, "does not exist")) << warnings_since(mark);
  }
  mark = log_mark();
  EXPECT_EQ(raw_v11().getProperties(0, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(warned_since(mark, "props is NULL")) << warnings_since(mark);

  alignas(8) unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* comm = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(rank.net().listen(ndev, handle, &comm), ncclInvalidArgument);
  EXPECT_EQ(rank.net().listen(-1, handle, &comm), ncclInvalidArgument);
  EXPECT_EQ(comm, reinterpret_cast<void*>(0x1)) << "an output written on failure";
  EXPECT_EQ(rank.net().listen(0, nullptr, &comm), ncclInvalidArgument);
  EXPECT_EQ(rank.net().listen(0, handle, nullptr), ncclInvalidArgument);
  EXPECT_EQ(rank.net().connect(ndev, handle, &comm), ncclInvalidArgument);
  EXPECT_EQ(rank.net().connect(0, nullptr, &comm), ncclInvalidArgument);
  EXPECT_EQ(rank.net().connect(0, handle, nullptr), ncclInvalidArgument);
  // An all-zero handle is no listener's.
  mark = log_mark();
  EXPECT_EQ(rank.net().connect(0, handle, &comm), ncclInvalidArgument);
  EXPECT_TRUE(warned_since(mark, "connect")) << warnings_since(mark);
  EXPECT_EQ(raw_v11().accept(nullptr, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(rank.net().accept(nullptr, &comm), ncclInvalidUsage);
  EXPECT_EQ(rank.net().finalize(), ncclSuccess);
  EXPECT_TRUE(f.ok()) << f.text();
}

TEST(BadArguments, ContextsThatAreNotOne) {
  const ncclNet_v11_t& net = raw_v11();
  EXPECT_EQ(net.init(nullptr, 1, nullptr, capture_log, nullptr), ncclInvalidArgument);
  void* ctx = nullptr;
  ASSERT_EQ(net.init(&ctx, 1, nullptr, capture_log, nullptr), ncclSuccess);
  int not_a_context = 0;
  size_t mark = log_mark();
  EXPECT_EQ(net.setNetAttr(&not_a_context, nullptr), ncclInvalidUsage);
  EXPECT_TRUE(warned_since(mark, "setNetAttr")) << warnings_since(mark);
  alignas(8) unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* comm = nullptr;
  EXPECT_EQ(net.listen(&not_a_context, 0, handle, &comm), ncclInvalidUsage);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(net.finalize(&not_a_context), ncclInvalidUsage);
  EXPECT_EQ(net.finalize(ctx), ncclSuccess);
  // Finalized: the context is gone, and a second finalize says so.
  mark = log_mark();
  EXPECT_EQ(net.finalize(ctx), ncclInvalidUsage);
  EXPECT_TRUE(warned_since(mark, "finalize")) << warnings_since(mark);
}

TEST(BadArguments, FlushesOutOfRangeAndOnForeignComms) {
  Failures f;
  Rank rank(plugin_table_or_abort(11), 0, kBudget);
  ASSERT_TRUE(rank.start(plugin_library_or_abort(), &f)) << f.text();
  Link link;
  ASSERT_TRUE(rank.connect_both(nullptr, &link, &f)) << f.text();
  HostBuffer buffer(8192);
  void* mh = nullptr;
  ASSERT_EQ(rank.net().reg_mr(link.recv, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  void* data[9];
  int sizes[9];
  void* mhs[9];
  for (int i = 0; i < 9; ++i) {
    data[i] = buffer.data();
    sizes[i] = 64;
    mhs[i] = mh;
  }
  void* request = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(rank.net().iflush(link.recv, 1, data, sizes, mhs, nullptr), ncclInvalidArgument);
  EXPECT_EQ(rank.net().iflush(link.recv, 0, data, sizes, mhs, &request), ncclInvalidArgument);
  EXPECT_EQ(rank.net().iflush(link.recv, 9, data, sizes, mhs, &request), ncclInvalidArgument);
  EXPECT_EQ(rank.net().iflush(link.recv, -1, data, sizes, mhs, &request), ncclInvalidArgument);
  EXPECT_EQ(rank.net().iflush(link.recv, 1, nullptr, sizes, mhs, &request), ncclInvalidArgument);
  EXPECT_EQ(rank.net().iflush(link.send, 1, data, sizes, mhs, &request), ncclInvalidUsage);
  int foreign = 0;
  EXPECT_EQ(rank.net().iflush(&foreign, 1, data, sizes, mhs, &request), ncclInvalidUsage);
  EXPECT_EQ(request, nullptr) << "a refused iflush must not hand out a request";
  // A dma-buf registration of an fd that is none.
  void* dmabuf_mh = reinterpret_cast<void*>(0x1);
  EXPECT_NE(rank.net().reg_mr_dmabuf(link.recv, buffer.data(), 4096, NCCL_PTR_DMABUF, 0, -1, &dmabuf_mh),
            ncclSuccess);
  EXPECT_EQ(dmabuf_mh, nullptr);
  EXPECT_EQ(rank.net().dereg_mr(link.recv, mh), ncclSuccess);
  rank.close(&link, &f);
  EXPECT_EQ(rank.net().finalize(), ncclSuccess);
  EXPECT_TRUE(f.ok()) << f.text();
}

// test() is handed a bare pointer.  One already reported done, one of a comm since closed, or
// one that never was a request is refused with a reason, and nothing is read through it
// (before, a completed request answered "not done" forever, and a closed comm's request was
// read from freed memory).
TEST(BadArguments, TestOfARequestThatIsDoneClosedOrForeign) {
  Failures f;
  Rank rank(plugin_table_or_abort(11), 0, kBudget);
  ASSERT_TRUE(rank.start(plugin_library_or_abort(), &f)) << f.text();
  Link link;
  ASSERT_TRUE(rank.connect_both(nullptr, &link, &f)) << f.text();
  HostBuffer buffer(8192);
  void* recv_mh = nullptr;
  void* send_mh = nullptr;
  ASSERT_EQ(rank.net().reg_mr(link.recv, buffer.data(), 4096, NCCL_PTR_HOST, &recv_mh), ncclSuccess);
  ASSERT_EQ(rank.net().reg_mr(link.send, buffer.data() + 4096, 4096, NCCL_PTR_HOST, &send_mh), ncclSuccess);
  void* recv_request = nullptr;
  void* send_request = nullptr;
  ASSERT_TRUE(move_one_message(rank, link, recv_mh, send_mh, buffer, &recv_request, &send_request, &f))
      << f.text();

  int done = 7;
  size_t mark = log_mark();
  EXPECT_EQ(rank.net().test(send_request, &done, nullptr), ncclInvalidUsage);
  EXPECT_EQ(rank.net().test(recv_request, &done, nullptr), ncclInvalidUsage);
  EXPECT_TRUE(warned_since(mark, "already completed")) << warnings_since(mark);

  alignas(64) unsigned char not_a_request[1024] = {};
  mark = log_mark();
  EXPECT_EQ(rank.net().test(not_a_request, &done, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(warned_since(mark, "not a request")) << warnings_since(mark);
  // Inside a request slot, not at its start.
  EXPECT_EQ(rank.net().test(static_cast<unsigned char*>(recv_request) + 1, &done, nullptr),
            ncclInvalidArgument);

  EXPECT_EQ(rank.net().dereg_mr(link.recv, recv_mh), ncclSuccess);
  EXPECT_EQ(rank.net().dereg_mr(link.send, send_mh), ncclSuccess);
  rank.close(&link, &f);
  mark = log_mark();
  EXPECT_EQ(rank.net().test(recv_request, &done, nullptr), ncclInvalidArgument);
  EXPECT_EQ(rank.net().test(send_request, &done, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(warned_since(mark, "comm is closed")) << warnings_since(mark);
  EXPECT_EQ(done, 7) << "done written by a refused test";
  EXPECT_EQ(rank.net().finalize(), ncclSuccess);
  EXPECT_TRUE(f.ok()) << f.text();
}

// ncclNet_v8 passes message sizes as int: a negative one is refused with its own reason before
// it is widened (as size_t it would read as 16 EiB and fail later, or be taken for a size).
TEST(BadArguments, NegativeSizesOfTheIntTableAreRefused) {
  Failures f;
  Rank rank(plugin_table_or_abort(8), 0, kBudget);
  ASSERT_TRUE(rank.start(plugin_library_or_abort(), &f)) << f.text();
  Link link;
  ASSERT_TRUE(rank.connect_both(nullptr, &link, &f)) << f.text();
  HostBuffer buffer(8192);
  void* send_mh = nullptr;
  void* recv_mh = nullptr;
  ASSERT_EQ(rank.net().reg_mr(link.send, buffer.data(), 4096, NCCL_PTR_HOST, &send_mh), ncclSuccess);
  ASSERT_EQ(rank.net().reg_mr(link.recv, buffer.data() + 4096, 4096, NCCL_PTR_HOST, &recv_mh),
            ncclSuccess);
  void* request = nullptr;
  size_t mark = log_mark();
  // The wrapper narrows to int as NCCL's own int would be: -1.
  EXPECT_EQ(rank.net().isend(link.send, buffer.data(), static_cast<size_t>(-1), 3, send_mh, &request),
            ncclInvalidArgument);
  EXPECT_TRUE(warned_since(mark, "isend of -1 bytes")) << warnings_since(mark);
  EXPECT_EQ(request, nullptr);
  void* data[2] = {buffer.data() + 4096, buffer.data() + 4096};
  size_t sizes[2] = {64, static_cast<size_t>(-5)};
  int tags[2] = {3, 4};
  void* mhs[2] = {recv_mh, recv_mh};
  mark = log_mark();
  EXPECT_EQ(rank.net().irecv(link.recv, 2, data, sizes, tags, mhs, &request), ncclInvalidArgument);
  EXPECT_TRUE(warned_since(mark, "irecv buffer 1 of -5 bytes")) << warnings_since(mark);
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(rank.net().dereg_mr(link.send, send_mh), ncclSuccess);
  EXPECT_EQ(rank.net().dereg_mr(link.recv, recv_mh), ncclSuccess);
  rank.close(&link, &f);
  EXPECT_EQ(rank.net().finalize(), ncclSuccess);
  EXPECT_TRUE(f.ok()) << f.text();
}

}  // namespace
}  // namespace hmr::nccl::test
