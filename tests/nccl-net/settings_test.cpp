// The plugin's environment variables (plugins/nccl-net/net/settings.h): defaults and what is
// refused.  Each test sets the variables it reads for its own scope.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "net/settings.h"
#include "../scoped_env.h"

namespace hmr::nccl {
namespace {

using hmr_test::ScopedEnv;

// The connect deadline the plugin reads from the environment now, in ms; -1 with the reason
// in *why when it refuses the environment.
int connect_timeout_read(std::string* why) {
  const std::optional<Settings> settings = read_settings(why);
  return settings ? settings->connect_timeout_ms : -1;
}

// NCCL calls connect until it returns a comm, and its own transports set no deadline: a
// listener answers only when its rank reaches the connection (runtime connect: its first
// collective).  A default deadline failed every neighbour of a rank that was 30 s late.
TEST(PluginSettings, ConnectWaitsWithoutADeadlineByDefault) {
  const ScopedEnv unset("HMR_NCCL_CONNECT_TIMEOUT", nullptr);
  std::string why;
  EXPECT_EQ(connect_timeout_read(&why), 0) << why;
}

TEST(PluginSettings, ConnectTimeoutOfZeroMeansNoDeadline) {
  const ScopedEnv zero("HMR_NCCL_CONNECT_TIMEOUT", "0");
  std::string why;
  EXPECT_EQ(connect_timeout_read(&why), 0) << why;
}

TEST(PluginSettings, ConnectTimeoutInSecondsWithFractions) {
  const ScopedEnv half("HMR_NCCL_CONNECT_TIMEOUT", "1.5");
  std::string why;
  EXPECT_EQ(connect_timeout_read(&why), 1500) << why;
}

TEST(PluginSettings, WriteTimeoutOfZeroIsRefusedWithTheVariableNamed) {
  const ScopedEnv zero("HMR_NCCL_WRITE_TIMEOUT", "0");
  std::string why;
  EXPECT_FALSE(read_settings(&why));
  EXPECT_NE(why.find("HMR_NCCL_WRITE_TIMEOUT"), std::string::npos) << why;
}

TEST(PluginSettings, NegativeConnectTimeoutIsRefused) {
  const ScopedEnv negative("HMR_NCCL_CONNECT_TIMEOUT", "-1");
  std::string why;
  EXPECT_EQ(connect_timeout_read(&why), -1);
  EXPECT_NE(why.find("no deadline"), std::string::npos) << why;
}

}  // namespace
}  // namespace hmr::nccl
