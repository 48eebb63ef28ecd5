#include "hmem/symbol_table.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <utility>

namespace hmr::hmem {

std::string library_override_variable(const char* vendor) {
  std::string name = "HMR_";
  for (const char* c = vendor; *c != '\0'; ++c) {
    name += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  }
  name += "_LIBRARY";
  return name;
}

std::string resolve_library_path(const char* vendor, const char* default_soname) {
  const char* override_path = std::getenv(library_override_variable(vendor).c_str());
  if (override_path != nullptr && override_path[0] != '\0') return override_path;
  return default_soname;
}

Result<SymbolTable> SymbolTable::load(const char* vendor, const char* default_soname,
                                      std::span<const SymbolSpec> symbols) {
  std::string path = resolve_library_path(vendor, default_soname);
  dlerror();  // clear a stale message so the one we report is ours
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return make_error(HMR_ENOSYS, "cannot load the %s runtime '%s' (%s); set %s to its path",
                      vendor, path.c_str(), why != nullptr ? why : "no dlerror",
                      library_override_variable(vendor).c_str());
  }
  // From here the handle has an owner, so every early return closes it.
  SymbolTable table(handle, std::move(path), {});
  table.addresses_.reserve(symbols.size());
  for (const SymbolSpec& symbol : symbols) {
    dlerror();
    void* address = symbol.version != nullptr ? dlvsym(handle, symbol.name, symbol.version)
                                              : dlsym(handle, symbol.name);
    if (address == nullptr && symbol.need == SymbolNeed::required) {
      const char* why = dlerror();
      return make_error(HMR_ENOSYS,
                        "the %s runtime '%s' lacks required symbol %s%s%s (%s): the driver is "
                        "too old or this is not the %s runtime",
                        vendor, table.path_.c_str(), symbol.name,
                        symbol.version != nullptr ? "@" : "",
                        symbol.version != nullptr ? symbol.version : "",
                        why != nullptr ? why : "resolved to null", vendor);
    }
    table.addresses_.push_back(address);
  }
  return table;
}

SymbolTable::SymbolTable(void* handle, std::string path, std::vector<void*> addresses)
    : handle_(handle), path_(std::move(path)), addresses_(std::move(addresses)) {}

SymbolTable::SymbolTable(SymbolTable&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      path_(std::move(other.path_)),
      addresses_(std::move(other.addresses_)) {}

SymbolTable& SymbolTable::operator=(SymbolTable&& other) noexcept {
  if (this != &other) {
    close();
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
    addresses_ = std::move(other.addresses_);
  }
  return *this;
}

SymbolTable::~SymbolTable() { close(); }

void SymbolTable::close() {
  if (handle_ != nullptr) dlclose(handle_);
  handle_ = nullptr;
  addresses_.clear();  // no address outlives the handle it came from
}

}  // namespace hmr::hmem
