// The libfabric runtime as hmr uses it: loaded on the first ofi domain, never before.
#pragma once

#include <cstdint>
#include <string>

#include "hmem/symbol_table.h"
#include "nic/ofi/ofi_symbols.h"
#include "util/status.h"

namespace hmr::nic::ofi {

// HMR_OFI_LIBRARY overrides where libfabric is loaded from.
inline constexpr const char* kOfiVendor = "OFI";
inline constexpr const char* kOfiDefaultLibrary = "libfabric.so.1";

// The API version of the headers hmr was compiled with.
inline constexpr uint32_t kHeadersApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
// fi_mr_attr.iface and .device arrived in 1.10.
inline constexpr uint32_t kOldestApiVersion = FI_VERSION(1, 10);

struct OfiLibrary {
  hmem::SymbolTable table;
  OfiSymbols fn;
  uint32_t runtime_version = 0;  // fi_version() of the loaded library
  // What hmr passes to fi_getinfo: the older of headers and runtime.  A runtime answers
  // -FI_ENOSYS to a newer version than its own (1.17 does to 1.18), and hmr's structs follow
  // its headers, so it never asks for more than they describe.
  uint32_t api_version = 0;

  // "1.17", for reasons.
  std::string version_text() const;
  // fi_strerror text and the code: "Function not implemented (-38)".
  std::string describe(int fi_return) const;
};

// The library at HMR_OFI_LIBRARY, else libfabric.so.1.  Loaded once per path and kept for the
// life of the process: unloading would run libfabric's destructor under an application that
// may hold domains of the same library, and loading again would pay its start-up again.
// HMR_ENOSYS with the path and dlerror() when it cannot be loaded.
Result<const OfiLibrary*> load_ofi_library();

}  // namespace hmr::nic::ofi
