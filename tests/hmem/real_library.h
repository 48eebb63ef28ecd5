// For tests of an iface against the real vendor library, where one is installed.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace hmr::testing {

// Why a test cannot use the real library `soname`, or "" when it can.  Clears the iface's
// override variable first, so the iface opens what a user would get.  glibc hands a bare soname
// to whatever object of that soname is already loaded, so in a process that loaded the fake
// first the "real" library would be the fake (recognised by its control entry point
// `fake_marker`): ctest runs these tests again in a process of their own
// (hmr_vendor_real_runtimes).
inline std::string real_library_unavailable(const char* override_variable, const char* soname,
                                            const char* fake_marker) {
  unsetenv(override_variable);
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return std::string("not installed: ") + (error != nullptr ? error : "dlopen failed");
  }
  const bool fake = dlsym(handle, fake_marker) != nullptr;
  dlclose(handle);
  return fake ? "this process loaded the fake under the same soname first" : "";
}

}  // namespace hmr::testing
