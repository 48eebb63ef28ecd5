#include "nccl_socket_reference.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "abi/nccl_net_v11.h"

namespace hmr::nccl::test {
namespace {

// The internal ncclNet_t is the newest plugin ABI NCCL speaks.  2.28 speaks v11 (NCCL's
// src/include/net.h: `typedef ncclNet_v11_t ncclNet_t`); another minor version may have moved
// on, so it is refused rather than called through a table of the wrong shape.
constexpr int kV11Major = 2;
constexpr int kV11Minor = 28;

// The file mapped read-only for as long as its symbol table is read.
class MappedFile {
 public:
  explicit MappedFile(const char* path) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const unsigned char*>(p);
        size_ = static_cast<size_t>(st.st_size);
      }
    }
    close(fd);
  }
  ~MappedFile() {
    if (data_ != nullptr) munmap(const_cast<unsigned char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  // `count` objects of T at `offset`, or nullptr where they would reach past the end.
  template <typename T>
  const T* at(uint64_t offset, uint64_t count = 1) const {
    if (data_ == nullptr || offset > size_ || count > (size_ - offset) / sizeof(T)) return nullptr;
    return reinterpret_cast<const T*>(data_ + offset);
  }
  size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// `name`'s value and size in the file's .symtab (local symbols included), or nullopt.
std::optional<Elf64_Sym> find_symbol(const MappedFile& file, const char* name, std::string* why) {
  const auto* header = file.at<Elf64_Ehdr>(0);
  if (header == nullptr || std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 ||
      header->e_ident[EI_CLASS] != ELFCLASS64 || header->e_shentsize != sizeof(Elf64_Shdr)) {
    *why = "not a 64-bit ELF file";
    return std::nullopt;
  }
  const auto* sections = file.at<Elf64_Shdr>(header->e_shoff, header->e_shnum);
  if (sections == nullptr) {
    *why = "its section headers are truncated";
    return std::nullopt;
  }
  const size_t name_length = std::strlen(name);
  for (unsigned i = 0; i < header->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_SYMTAB || sections[i].sh_link >= header->e_shnum) continue;
    const Elf64_Shdr& strings = sections[sections[i].sh_link];
    const auto* names = file.at<char>(strings.sh_offset, strings.sh_size);
    const auto* symbols = file.at<Elf64_Sym>(sections[i].sh_offset, sections[i].sh_size / sizeof(Elf64_Sym));
    if (names == nullptr || symbols == nullptr) continue;
    for (uint64_t s = 0; s < sections[i].sh_size / sizeof(Elf64_Sym); ++s) {
      const uint64_t at = symbols[s].st_name;
      if (at + name_length + 1 > strings.sh_size) continue;
      if (std::memcmp(names + at, name, name_length + 1) == 0) return symbols[s];
    }
  }
  *why = std::string("no symbol table entry for ") + name + " (a stripped library?)";
  return std::nullopt;
}

// The one CUDA call of NCCL's socket transport, and a stand-in for it where there is no driver.
//
// ncclNetSocketConnect and ncclNetSocketAccept (NCCL 2.28.9, src/transport/net_socket.cc) ask
// `cudaGetDevice(&comm->cudaDev)` under CUDACHECK, and use the answer only to name their helper
// threads ("NCCL Sock..." + cudaDev).  libnccl.so links the CUDA runtime statically; without a
// driver that call fails ("CUDA driver version is insufficient"), and a fake libcuda.so.1
// cannot satisfy it, because the static runtime first asks the driver for private export
// tables (cuGetExportTable) that are documented nowhere.  So where no libcuda.so.1 can be
// loaded, the runtime's `cudaGetDevice` inside libnccl (a local symbol of its .symtab) is
// overwritten with "device 0 is current, cudaSuccess": what the driver would answer on a
// machine with one GPU, as the GPU runs do.  Nothing else in the transport touches CUDA (the
// same file: its only other CUDA mention is a comment), so the bytes moved are the real
// transport's.  This is a fake of the driver's answer, confined to this test process.
bool stand_in_for_cuda_get_device(uintptr_t load_address, const MappedFile& file, std::string* why) {
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); driver != nullptr) {
    dlclose(driver);
    return true;  // a real driver answers
  }
#if defined(__x86_64__)
  std::string reason;
  const std::optional<Elf64_Sym> symbol = find_symbol(file, "cudaGetDevice", &reason);
  if (!symbol || ELF64_ST_TYPE(symbol->st_info) != STT_FUNC) {
    *why = "no driver, and no cudaGetDevice in libnccl's symbol table to stand in for (" + reason + ")";
    return false;
  }
  // int cudaGetDevice(int* device): *device = 0; return cudaSuccess (0).
  static constexpr unsigned char kDeviceZero[] = {
      0xc7, 0x07, 0x00, 0x00, 0x00, 0x00,  // mov dword ptr [rdi], 0
      0x31, 0xc0,                          // xor eax, eax
      0xc3,                                // ret
  };
  if (symbol->st_size < sizeof kDeviceZero) {
    *why = "libnccl's cudaGetDevice is too short to stand in for";
    return false;
  }
  auto* code = reinterpret_cast<unsigned char*>(load_address + symbol->st_value);
  const uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(code) & ~(page_size - 1);
  const size_t span = reinterpret_cast<uintptr_t>(code) + sizeof kDeviceZero - first;
  auto* pages = reinterpret_cast<void*>(first);
  if (mprotect(pages, span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
    *why = std::string("no driver, and libnccl's code cannot be made writable: ") + std::strerror(errno);
    return false;
  }
  std::memcpy(code, kDeviceZero, sizeof kDeviceZero);
  __builtin___clear_cache(reinterpret_cast<char*>(code), reinterpret_cast<char*>(code) + sizeof kDeviceZero);
  mprotect(pages, span, PROT_READ | PROT_EXEC);
  return true;
#else
  (void)load_address;
  (void)file;
  *why = "no driver, and the stand-in for cudaGetDevice is written for x86-64 only";
  return false;
#endif
}

}  // namespace

std::string nccl_library_path() {
  if (const char* path = std::getenv("HMR_NCCL_LIBRARY"); path != nullptr && *path != '\0') return path;
#ifdef HMR_NCCL_LIBRARY_PATH
  return HMR_NCCL_LIBRARY_PATH;
#else
  return "libnccl.so.2";
#endif
}

std::unique_ptr<Net> open_nccl_socket_transport(std::string* why) {
  const std::string path = nccl_library_path();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: see the header
  if (handle == nullptr) {
    const char* error = dlerror();
    *why = "dlopen(" + path + "): " + (error != nullptr ? error : "unknown");
    return nullptr;
  }
  using GetVersion = int (*)(int*);
  auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "ncclGetVersion"));
  int version = 0;
  if (get_version == nullptr || get_version(&version) != 0) {
    *why = path + ": no ncclGetVersion";
    return nullptr;
  }
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
  if (version / 10000 != kV11Major || version / 100 % 100 != kV11Minor) {
    *why = path + " is NCCL " + std::to_string(version) + "; its internal ncclNet_t is known to be v11 only in " +
           std::to_string(kV11Major) + "." + std::to_string(kV11Minor);
    return nullptr;
  }
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    *why = path + ": dlinfo failed";
    return nullptr;
  }
  MappedFile file(map->l_name);
  std::string reason;
  const std::optional<Elf64_Sym> symbol = find_symbol(file, "ncclNetSocket", &reason);
  if (!symbol) {
    *why = std::string(map->l_name) + ": " + reason;
    return nullptr;
  }
  if (ELF64_ST_TYPE(symbol->st_info) != STT_OBJECT || symbol->st_size != sizeof(ncclNet_v11_t)) {
    *why = std::string(map->l_name) + ": ncclNetSocket is not a " + std::to_string(sizeof(ncclNet_v11_t)) +
           "-byte object (" + std::to_string(symbol->st_size) + " bytes)";
    return nullptr;
  }
  const auto* table = reinterpret_cast<const ncclNet_v11_t*>(map->l_addr + symbol->st_value);
  if (table->name == nullptr || std::strcmp(table->name, "Socket") != 0) {
    *why = std::string(map->l_name) + ": ncclNetSocket's name is not \"Socket\"";
    return nullptr;
  }
  if (!stand_in_for_cuda_get_device(map->l_addr, file, why)) return nullptr;
  return wrap_v11_table(table, why);
}

}  // namespace hmr::nccl::test
