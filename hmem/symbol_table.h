// The one dlopen helper every vendor iface uses to reach its runtime.
//
// Vendor runtimes are never linked: hmr must build and run on a machine without them, and a
// missing runtime must read as "iface unavailable, here is why", never as a crash or a link
// failure.  Each vendor declares its symbols once, in an X-macro list, marking each required or
// optional; load() resolves them all up front so a missing required symbol fails at init, with
// its name, instead of as a null call later.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "util/status.h"

namespace hmr::hmem {

enum class SymbolNeed { required, optional };

struct SymbolSpec {
  const char* name;  // the exact name to dlsym (e.g. "cuMemGetAddressRange_v2")
  SymbolNeed need;
  // When set, the symbol is looked up at this version (dlvsym), e.g. "IBVERBS_1.1": libraries
  // that keep several ABIs of one name under symbol versions must give the one hmr declares.
  const char* version = nullptr;
};

// "HMR_<VENDOR>_LIBRARY", the variable that overrides where a vendor's runtime is loaded from.
std::string library_override_variable(const char* vendor);

// The override when set and non-empty, otherwise the vendor's soname (searched the usual
// dlopen way).
std::string resolve_library_path(const char* vendor, const char* default_soname);

// A loaded runtime and the addresses of its symbols, in the order of the specs it was loaded
// with.  Owns the dlopen handle: moving transfers it, destruction dlcloses it once.
class SymbolTable {
 public:
  // Opens the library with RTLD_NOW | RTLD_LOCAL: NOW so an unresolvable library fails here
  // rather than at the first call; LOCAL so a vendor's symbols never interpose on anyone else's.
  // Fails with HMR_ENOSYS and a reason naming the path tried and dlerror(), or the path and the
  // first missing required symbol.  Optional symbols that are absent resolve to null.
  static Result<SymbolTable> load(const char* vendor, const char* default_soname,
                                  std::span<const SymbolSpec> symbols);

  SymbolTable(SymbolTable&& other) noexcept;
  SymbolTable& operator=(SymbolTable&& other) noexcept;
  SymbolTable(const SymbolTable&) = delete;
  SymbolTable& operator=(const SymbolTable&) = delete;
  ~SymbolTable();

  // The address of symbols[index]; null only for an optional symbol the library lacks.
  void* address(size_t index) const { return addresses_[index]; }
  size_t size() const { return addresses_.size(); }
  // The path (or soname) that was opened, for reasons and diagnostics.
  const std::string& path() const { return path_; }

 private:
  SymbolTable(void* handle, std::string path, std::vector<void*> addresses);
  void close();

  void* handle_ = nullptr;
  std::string path_;
  std::vector<void*> addresses_;
};

}  // namespace hmr::hmem
