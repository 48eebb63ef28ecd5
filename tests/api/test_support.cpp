#include "test_support.h"

#include <linux/capability.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

extern char** environ;

namespace hmr_test {

hmr_domain* open_sim_domain(uint64_t app_mode, const char* nic_options,
                            hmr_domain_attr* attr_out) {
  hmr_domain_attr attr = domain_attr(app_mode, nic_options);
  hmr_domain* domain = nullptr;
  const int rc = hmr_domain_open(&attr, &domain);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  if (attr_out != nullptr) *attr_out = attr;
  return domain;
}

MrPtr reg(hmr_domain* domain, const void* buf, size_t len, uint64_t access, uint64_t key,
          uint64_t flags) {
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg(domain, buf, len, access, 0, key, flags, &mr, nullptr);
  EXPECT_EQ(rc, 0) << "hmr_mr_reg(key " << key << "): " << hmr_last_error();
  if (rc != 0) return MrPtr();
  EXPECT_NE(mr, nullptr);
  return MrPtr(mr);
}

EpPtr open_ep(hmr_domain* domain) {
  hmr_ep* ep = nullptr;
  const int rc = hmr_ep_open(domain, nullptr, &ep);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  return EpPtr(rc == 0 ? ep : nullptr);
}

CntrPtr open_cntr(hmr_domain* domain) {
  hmr_cntr* cntr = nullptr;
  const int rc = hmr_cntr_open(domain, nullptr, &cntr);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  return CntrPtr(rc == 0 ? cntr : nullptr);
}

Link connect(hmr_domain* initiator_domain, hmr_domain* target_domain) {
  Link link;
  link.target = open_ep(target_domain);
  link.initiator = open_ep(initiator_domain);
  if (link.target && link.initiator) {
    EXPECT_EQ(hmr_ep_connect(link.initiator.get(), link.target.get()), 0) << hmr_last_error();
  }
  return link;
}

Pages::Pages(size_t bytes) : bytes_(bytes) {
  address_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (address_ == MAP_FAILED) address_ = nullptr;
  EXPECT_NE(address_, nullptr);
}

Pages::~Pages() { unmap(); }

void Pages::unmap() {
  if (address_ != nullptr) munmap(address_, bytes_);
  address_ = nullptr;
}

hmr_domain_stats domain_stats(hmr_domain* domain) {
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
  return stats;
}

bool drop_cap_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[0].effective &= ~(1u << CAP_IPC_LOCK);
  data[0].permitted &= ~(1u << CAP_IPC_LOCK);
  return syscall(SYS_capset, &header, data) == 0;
}

bool set_memlock(uint64_t bytes) {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return false;
  limit.rlim_cur = bytes;
  return setrlimit(RLIMIT_MEMLOCK, &limit) == 0;
}

int run_self(const std::vector<std::string>& arguments, const std::vector<std::string>& environment) {
  std::vector<std::string> argv_storage{"/proc/self/exe"};
  argv_storage.insert(argv_storage.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& argument : argv_storage) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage(environment);
  for (char** variable = environ; *variable != nullptr; ++variable) env_storage.emplace_back(*variable);
  std::vector<char*> envp;
  for (std::string& variable : env_storage) envp.push_back(variable.data());
  envp.push_back(nullptr);
  pid_t child = -1;
  if (posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0) {
    return -1;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int run_forked(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    alarm(20);
    _exit(body());
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace hmr_test
