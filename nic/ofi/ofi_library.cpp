#include "nic/ofi/ofi_library.h"

#include <map>
#include <memory>
#include <mutex>

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
  auto found = loaded->find(path);
  if (found != loaded->end()) return found->second.get();

  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load(kOfiVendor, kOfiDefaultLibrary, ofi_symbol_specs());
  if (!table.ok()) {
    return Status(table.status().code(),
                  "the ofi NIC adapter needs libfabric: " + table.status().reason());
  }
  auto library = std::make_unique<OfiLibrary>(OfiLibrary{std::move(*table), {}, 0, 0});
  bind_ofi_symbols(library->table, library->fn);
  library->runtime_version = library->fn.fi_version();
  library->api_version =
      library->runtime_version < kHeadersApiVersion ? library->runtime_version : kHeadersApiVersion;
  if (library->api_version < kOldestApiVersion) {
    // Older providers ignore fi_mr_attr.iface, so device memory would pass for host memory.
    return make_error(HMR_ENOSYS,
                      "libfabric %s at '%s' is too old: the ofi NIC adapter needs 1.10 or newer",
                      library->version_text().c_str(), library->table.path().c_str());
  }
  const OfiLibrary* result = library.get();
  loaded->emplace(path, std::move(library));
  return result;
}

}  // namespace hmr::nic::ofi
