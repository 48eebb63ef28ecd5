// FakeLibrary: a fake vendor library (tests/fakes/fake_*.c) as its tests reach it.
//
// It is opened at the same path the iface opens through its HMR_<VENDOR>_LIBRARY override, so
// dlopen returns the one object both use and the tests see the iface's calls in its state.  The
// handle is never closed: the fake's state must outlive every iface.  A fake that cannot be
// loaded, or lacks an entry point a test needs, aborts the test binary, since every test of that
// iface depends on it.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace hmr::testing {

class FakeLibrary {
 public:
  // `description` names the fake in failure messages ("fake ROCr runtime").
  FakeLibrary(const char* description, const char* path)
      : description_(description), path_(path), handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) {
      std::fprintf(stderr, "cannot load the %s %s: %s\n", description_, path_, dlerror());
      std::abort();
    }
  }

  // The entry point `name` (a test-only control function or a vendor call), as type Fn.
  template <typename Fn>
  Fn function(const char* name) const {
    void* address = dlsym(handle_, name);
    if (address == nullptr) {
      std::fprintf(stderr, "%s %s lacks %s\n", description_, path_, name);
      std::abort();
    }
    return reinterpret_cast<Fn>(address);
  }

  const char* path() const { return path_; }

 private:
  const char* description_;
  const char* path_;
  void* handle_;
};

}  // namespace hmr::testing
