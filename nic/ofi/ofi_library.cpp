#include "nic/ofi/ofi_library.h"

#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>

namespace hmr::nic::ofi {

std::string OfiLibrary::version_text() const {
  return std::to_string(FI_MAJOR(runtime_version)) + "." +
         std::to_string(FI_MINOR(runtime_version));
}

std::string OfiLibrary::describe(int fi_return) const {
  const int positive = fi_return < 0 ? -fi_return : fi_return;
  return std::string(fn.fi_strerror(positive)) + " (" + std::to_string(fi_return) + ")";
}

Result<const OfiLibrary*> load_ofi_library() {
  // One load per path, serialised: two domains opened at once must not both load.  dlopen
  // runs libfabric's constructors, which never call back into hmr, so the lock cannot nest.
  static std::mutex mutex;
  // Deliberately never destroyed (see the header): a heap map that static destruction skips.
  static auto* loaded = new std::map<std::string, std::unique_ptr<OfiLibrary>>();

  const std::string path = hmem::resolve_library_path(kOfiVendor, kOfiDefaultLibrary);
  std::lock_guard<std::mutex> lock(mutex);
  // The map's node is made before libfabric is loaded, and the library's record is allocated
  // before the table moves into it: once loaded, nothing may fail for want of memory, since
  // unloading it again runs its destructor, which leaks what its providers made at start-up
  // (LeakSanitizer saw psm2's and libibverbs'), and the next domain pays that start-up again.
  auto [slot, inserted] = loaded->try_emplace(path);
  if (!inserted && slot->second) return slot->second.get();
  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load(kOfiVendor, kOfiDefaultLibrary, ofi_symbol_specs());
  if (!table.ok()) {
    loaded->erase(slot);
    return Status(table.status().code(),
                  "the ofi NIC adapter needs libfabric: " + table.status().reason());
  }
  std::unique_ptr<OfiLibrary> library;
  try {
    library.reset(new OfiLibrary{std::move(*table), {}, 0, 0});  // (allocated, then moved into)
  } catch (const std::bad_alloc&) {
    loaded->erase(slot);
    static std::optional<hmem::SymbolTable> kept;  // (a later failure replaces it: still loaded)
    kept.emplace(std::move(*table));
    throw;
  }
  bind_ofi_symbols(library->table, library->fn);
  library->runtime_version = library->fn.fi_version();
  library->api_version =
      library->runtime_version < kHeadersApiVersion ? library->runtime_version : kHeadersApiVersion;
  if (library->api_version < kOldestApiVersion) {
    loaded->erase(slot);
    // Older providers ignore fi_mr_attr.iface, so device memory would pass for host memory.
    return make_error(HMR_ENOSYS,
                      "libfabric %s at '%s' is too old: the ofi NIC adapter needs 1.10 or newer",
                      library->version_text().c_str(), library->table.path().c_str());
  }
  const OfiLibrary* result = library.get();
  slot->second = std::move(library);
  return result;
}

}  // namespace hmr::nic::ofi
