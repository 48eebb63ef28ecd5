// The plugin's environment variables (plugins/nccl-net/net/settings.h): defaults and what is
// refused.  Each test sets the variables it reads and unsets them after.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "net/settings.h"

namespace hmr::nccl {
namespace {

class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedVariable() { unsetenv(name_); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
};

// NCCL calls connect until it returns a comm, and its own transports set no deadline: a
// listener answers only when its rank reaches the connection (runtime connect: its first
// collective).  A default deadline failed every neighbour of a rank that was 30 s late.
TEST(PluginSettings, ConnectWaitsWithoutADeadlineByDefault) {
  unsetenv("HMR_NCCL_CONNECT_TIMEOUT");
  std::string why;
  const auto settings = read_settings(&why);
  ASSERT_TRUE(settings) << why;
  EXPECT_EQ(settings->connect_timeout_ms, 0);
}

TEST(PluginSettings, ConnectTimeoutOfZeroMeansNoDeadline) {
  const ScopedVariable zero("HMR_NCCL_CONNECT_TIMEOUT", "0");
  std::string why;
  const auto settings = read_settings(&why);
  ASSERT_TRUE(settings) << why;
  EXPECT_EQ(settings->connect_timeout_ms, 0);
}

TEST(PluginSettings, ConnectTimeoutInSecondsWithFractions) {
  const ScopedVariable half("HMR_NCCL_CONNECT_TIMEOUT", "1.5");
  std::string why;
  const auto settings = read_settings(&why);
  ASSERT_TRUE(settings) << why;
  EXPECT_EQ(settings->connect_timeout_ms, 1500);
}

TEST(PluginSettings, WriteTimeoutOfZeroIsRefusedWithTheVariableNamed) {
  const ScopedVariable zero("HMR_NCCL_WRITE_TIMEOUT", "0");
  std::string why;
  EXPECT_FALSE(read_settings(&why));
  EXPECT_NE(why.find("HMR_NCCL_WRITE_TIMEOUT"), std::string::npos) << why;
}

TEST(PluginSettings, NegativeConnectTimeoutIsRefused) {
  const ScopedVariable negative("HMR_NCCL_CONNECT_TIMEOUT", "-1");
  std::string why;
  EXPECT_FALSE(read_settings(&why));
  EXPECT_NE(why.find("no deadline"), std::string::npos) << why;
}

}  // namespace
}  // namespace hmr::nccl
