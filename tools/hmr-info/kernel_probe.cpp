#include "kernel_probe.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "util/memlock_limit.h"

namespace hmr::info {
namespace {

bool directory_exists(const char* path) {
  struct stat status {};
  return stat(path, &status) == 0 && S_ISDIR(status.st_mode);
}

JsonValue limit_json(rlim_t limit) {
  if (limit == RLIM_INFINITY) return JsonValue("unlimited");
  return JsonValue(static_cast<uint64_t>(limit));
}

std::string limit_text(rlim_t limit) {
  if (limit == RLIM_INFINITY) return "unlimited";
  char text[48];
  if (limit >= (1u << 20)) {
    std::snprintf(text, sizeof text, "%llu MiB", static_cast<unsigned long long>(limit >> 20));
  } else {
    std::snprintf(text, sizeof text, "%llu KiB", static_cast<unsigned long long>(limit >> 10));
  }
  return text;
}

}  // namespace

KernelVersion kernel_version() {
  KernelVersion version;
  struct utsname names {};
  if (uname(&names) != 0) return version;
  version.release = names.release;
  if (std::sscanf(names.release, "%d.%d", &version.major, &version.minor) != 2) {
    version.major = version.minor = 0;
  }
  return version;
}

JsonValue kernel_json() {
  JsonValue kernel = JsonValue::object();
  struct utsname names {};
  if (uname(&names) != 0) {
    kernel.set("reason", std::string("uname failed: ") + std::strerror(errno));
    return kernel;
  }
  kernel.set("release", names.release);
  kernel.set("version", names.version);
  kernel.set("machine", names.machine);
  return kernel;
}

JsonValue rdma_modules_json() {
  // A module built into the kernel may have no /sys/module entry; the uverbs device class
  // exists whenever ib_uverbs is in, built in or not.
  const bool ib_core = directory_exists("/sys/module/ib_core");
  const bool uverbs_module = directory_exists("/sys/module/ib_uverbs");
  const bool uverbs_class = directory_exists("/sys/class/infiniband_verbs");
  JsonValue modules = JsonValue::object();
  modules.set("ib_core", ib_core);
  modules.set("ib_uverbs", uverbs_module || uverbs_class);
  std::string evidence;
  evidence += ib_core ? "/sys/module/ib_core exists" : "no /sys/module/ib_core";
  evidence += uverbs_module ? ", /sys/module/ib_uverbs exists" : ", no /sys/module/ib_uverbs";
  evidence += uverbs_class ? ", /sys/class/infiniband_verbs exists"
                           : ", no /sys/class/infiniband_verbs";
  modules.set("evidence", evidence);
  return modules;
}

JsonValue infiniband_sysfs_json() {
  constexpr const char* kPath = "/sys/class/infiniband";
  JsonValue sysfs = JsonValue::object();
  sysfs.set("path", kPath);
  JsonValue& entries = sysfs.set("entries", JsonValue::array());
  DIR* directory = opendir(kPath);
  if (directory == nullptr) {
    const int err = errno;
    sysfs.set("reason", err == ENOENT
                            ? std::string(kPath) + " does not exist: the kernel has registered "
                                                   "no RDMA device (no RDMA driver, or none bound)"
                            : std::string("cannot list ") + kPath + ": " + std::strerror(err));
    return sysfs;
  }
  std::vector<std::string> names;
  while (const dirent* entry = readdir(directory)) {
    if (entry->d_name[0] != '.') names.emplace_back(entry->d_name);
  }
  closedir(directory);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) entries.push(name);
  sysfs.set("reason", names.empty() ? std::string(kPath) + " is empty: no RDMA device is bound"
                                    : std::to_string(names.size()) + " RDMA device(s) registered");
  return sysfs;
}

JsonValue memlock_json() {
  JsonValue memlock = JsonValue::object();
  rlimit limit {};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    memlock.set("reason", std::string("getrlimit(RLIMIT_MEMLOCK) failed: ") +
                              std::strerror(errno));
    return memlock;
  }
  const bool privileged = hmr::has_cap_ipc_lock();
  memlock.set("soft", limit_json(limit.rlim_cur));
  memlock.set("hard", limit_json(limit.rlim_max));
  memlock.set("cap_ipc_lock", privileged);
  std::string reason;
  if (privileged) {
    reason = "this process has CAP_IPC_LOCK, so pinned registrations ignore the limit";
  } else if (limit.rlim_cur == RLIM_INFINITY) {
    reason = "unlimited: registrations may pin as much memory as they need";
  } else {
    reason = "RDMA registrations pin memory: this process may pin at most " +
             limit_text(limit.rlim_cur) +
             " (raise it with ulimit -l, limits.conf memlock or LimitMEMLOCK=)";
  }
  memlock.set("reason", reason);
  return memlock;
}

}  // namespace hmr::info
