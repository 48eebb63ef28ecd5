// A connection NCCL starts and stops asking for.  NCCL calls connect() again and again until
// it returns a send comm; a communicator aborted while connecting (a peer that never
// accepts, ncclCommAbort on a timeout) never calls it again for that handle, and finalizes its
// context.  The plugin kept the half-made send comm (an endpoint, its sockets and buffers)
// until the last context of the process went: a job that aborts and re-creates
// communicators (elastic training's restarts) leaked one per abandoned connection.  Now the
// context's finalize closes what it started.
//
// Through the plugin's own entry points (net/net_api.h), in one process over libfabric's tcp
// provider: a second context keeps the devices open, as another communicator does.
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <atomic>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "net/net_api.h"
#include "tests/hmem/fd_checks.h"

namespace hmr::nccl {
namespace {

std::mutex messages_lock;
std::vector<std::string> messages;

void capture(ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
void capture(ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt, ...) {
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> hold(messages_lock);
  messages.emplace_back(line);
}

bool logged(const std::string& text) {
  std::lock_guard<std::mutex> hold(messages_lock);
  for (const std::string& m : messages) {
    if (m.find(text) != std::string::npos) return true;
  }
  return false;
}

class AbandonedConnect : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("HMR_NCCL_PROVIDER", "tcp", 1);
    ASSERT_EQ(api::init_context(&keeper_, 1, nullptr, capture), ncclSuccess);
    int ndev = 0;
    ASSERT_EQ(api::devices(&ndev), ncclSuccess);
    ASSERT_GT(ndev, 0);
    // A listener nobody accepts on: every connect to it stays in progress.
    ASSERT_EQ(api::listen(keeper_, 0, handle_, &listen_comm_), ncclSuccess);
  }
  void TearDown() override {
    if (listen_comm_ != nullptr) {
      EXPECT_EQ(api::close_listen(listen_comm_), ncclSuccess);
    }
    if (keeper_ != nullptr) {
      EXPECT_EQ(api::finalize(keeper_), ncclSuccess);
    }
  }

  // A context (communicator) that starts a connection, calls connect() a few times as NCCL
  // does, and is finalized with the connection still in progress.  The handle is NCCL's copy
  // for that communicator.
  void abandon_one_connection(uint64_t comm_id, char* handle) {
    void* ctx = nullptr;
    ASSERT_EQ(api::init_context(&ctx, comm_id, nullptr, capture), ncclSuccess);
    void* send_comm = nullptr;
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(api::connect(ctx, 0, handle, &send_comm, nullptr), ncclSuccess);
      ASSERT_EQ(send_comm, nullptr) << "connected to a listener that never accepted";
    }
    ASSERT_EQ(api::finalize(ctx), ncclSuccess);
  }

  void* keeper_ = nullptr;
  void* listen_comm_ = nullptr;
  char handle_[NCCL_NET_HANDLE_MAXSIZE] = {};
};

TEST_F(AbandonedConnect, AContextsFinalizeClosesTheConnectionsItNeverFinished) {
  // The first round may open what the device keeps for good (the provider's lazily made
  // progress objects); later rounds must leave nothing behind.
  char first[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(first, handle_, sizeof first);
  abandon_one_connection(2, first);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_TRUE(logged("1 connection(s) never finished")) << "finalize said nothing of the connection";
  const int after_first = hmr::testing::open_fd_count();
  for (uint64_t round = 0; round < 4; ++round) {
    char copy[NCCL_NET_HANDLE_MAXSIZE];
    std::memcpy(copy, handle_, sizeof copy);
    abandon_one_connection(3 + round, copy);
    ASSERT_FALSE(HasFatalFailure());
  }
  EXPECT_EQ(hmr::testing::open_fd_count(), after_first)
      << "abandoned connections kept their endpoints after their contexts were finalized";
  // The finalized context's handle names nothing any more, for any context.
  void* send_comm = nullptr;
  EXPECT_EQ(api::connect(keeper_, 0, first, &send_comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(send_comm, nullptr);
}

TEST_F(AbandonedConnect, AConnectionInProgressIsNotContinuedByAnotherContext) {
  void* other = nullptr;
  ASSERT_EQ(api::init_context(&other, 9, nullptr, capture), ncclSuccess);
  char copy[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(copy, handle_, sizeof copy);
  void* send_comm = nullptr;
  ASSERT_EQ(api::connect(other, 0, copy, &send_comm, nullptr), ncclSuccess);
  ASSERT_EQ(send_comm, nullptr);
  EXPECT_EQ(api::connect(keeper_, 0, copy, &send_comm, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(logged("started by another context"));
  EXPECT_EQ(api::finalize(other), ncclSuccess);
}

// Two communicators finalized at once, the other one with connections it never finished,
// this one the last: the devices close once every abandoned connection is closed, and none
// is kept open for a comm that was on its way out (before, the last finalize could find the
// other's comms still open and keep the device, its endpoints and domain, for good).
TEST_F(AbandonedConnect, TheLastFinalizeBesideAnotherClosesTheDevices) {
  {
    std::lock_guard<std::mutex> hold(messages_lock);
    messages.clear();
  }
  // (32 connections each: closing them takes long enough that, without the fix, the other
  // finalize came in between in most runs.)
  for (int round = 0; round < 10; ++round) {
    void* other = nullptr;
    ASSERT_EQ(api::init_context(&other, 100 + round, nullptr, capture), ncclSuccess);
    std::vector<std::array<char, NCCL_NET_HANDLE_MAXSIZE>> handles(32);
    for (auto& handle : handles) {
      std::memcpy(handle.data(), handle_, handle.size());
      void* send_comm = nullptr;
      ASSERT_EQ(api::connect(other, 0, handle.data(), &send_comm, nullptr), ncclSuccess);
      ASSERT_EQ(send_comm, nullptr);
    }
    ASSERT_EQ(api::close_listen(listen_comm_), ncclSuccess);
    listen_comm_ = nullptr;
    std::atomic<int> ready{0};
    std::thread a([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      EXPECT_EQ(api::finalize(other), ncclSuccess);
    });
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    EXPECT_EQ(api::finalize(keeper_), ncclSuccess);
    a.join();
    keeper_ = nullptr;
    EXPECT_FALSE(logged("kept open")) << "round " << round << ": a device was kept open";
    // The next round, as the fixture starts.
    ASSERT_EQ(api::init_context(&keeper_, 1, nullptr, capture), ncclSuccess);
    ASSERT_EQ(api::listen(keeper_, 0, handle_, &listen_comm_), ncclSuccess);
  }
}

// NCCL closes a listener only once its accept returned a comm: a communicator aborted while
// connecting, or whose accept failed, leaves its listeners open.  Each is a port on its
// device's shared endpoint, which it would keep open (with every peer address the endpoint
// keeps) for good, and the devices with it: the context's finalize closes them.
TEST_F(AbandonedConnect, AContextsFinalizeClosesTheListenersNcclLeftOpen) {
  {
    std::lock_guard<std::mutex> hold(messages_lock);
    messages.clear();
  }
  void* other = nullptr;
  ASSERT_EQ(api::init_context(&other, 50, nullptr, capture), ncclSuccess);
  std::array<void*, 3> left{};
  for (void*& listener : left) {
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    ASSERT_EQ(api::listen(other, 0, handle, &listener), ncclSuccess);
  }
  ASSERT_EQ(api::close_listen(listen_comm_), ncclSuccess);  // (the keeper's own, as NCCL would)
  listen_comm_ = nullptr;
  EXPECT_EQ(api::finalize(other), ncclSuccess);
  EXPECT_TRUE(logged("3 listener(s) left open were closed")) << "finalize said nothing of them";
  EXPECT_EQ(api::close_listen(left[0]), ncclInvalidUsage) << "a listener finalize closed is still open";
  EXPECT_EQ(api::finalize(keeper_), ncclSuccess);
  keeper_ = nullptr;
  EXPECT_FALSE(logged("kept open")) << "a listener left open kept its device open";
  // As the fixture starts, for TearDown.
  ASSERT_EQ(api::init_context(&keeper_, 1, nullptr, capture), ncclSuccess);
  ASSERT_EQ(api::listen(keeper_, 0, handle_, &listen_comm_), ncclSuccess);
}

}  // namespace
}  // namespace hmr::nccl
