#include "libfabric.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace hmr::nccl {
namespace {

struct Loaded {
  Libfabric table{};
  std::string error;  // why it could not be loaded; empty on success
};

template <typename Function>
bool resolve(void* library, const char* name, Function* out, std::string* error) {
  *out = reinterpret_cast<Function>(dlsym(library, name));
  if (*out == nullptr && error->empty()) *error = std::string("libfabric has no symbol ") + name;
  return *out != nullptr;
}

Loaded load() {
  Loaded loaded;
  const char* override_path = std::getenv("HMR_OFI_LIBRARY");
  const char* path = override_path != nullptr && *override_path != '\0' ? override_path
                                                                          : "libfabric.so.1";
  // Never unloaded: providers keep threads and atexit handlers that must outlive every user.
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    loaded.error = std::string("cannot load ") + path + ": " + (reason ? reason : "unknown");
    return loaded;
  }
  Libfabric& t = loaded.table;
  resolve(library, "fi_getinfo", &t.getinfo, &loaded.error);
  resolve(library, "fi_freeinfo", &t.freeinfo, &loaded.error);
  resolve(library, "fi_dupinfo", &t.dupinfo, &loaded.error);
  resolve(library, "fi_fabric", &t.fabric, &loaded.error);
  resolve(library, "fi_strerror", &t.strerror, &loaded.error);
  resolve(library, "fi_version", &t.version, &loaded.error);
  return loaded;
}

}  // namespace

uint32_t Libfabric::api_version() const {
  return std::min<uint32_t>(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), version());
}

std::string Libfabric::describe(int64_t error) const {
  const int code = static_cast<int>(error < 0 ? -error : error);
  return std::string(strerror(code)) + " (" + std::to_string(-code) + ")";
}

const Libfabric* load_libfabric(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) {
    if (why != nullptr) *why = loaded.error;
    return nullptr;
  }
  return &loaded.table;
}

}  // namespace hmr::nccl
