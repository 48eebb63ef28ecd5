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
#include <mutex>
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
  // `count` objects of T at `offset`, or nullptr where they would reach past the end or would
  // be misaligned (the mapping is page-aligned, so the offset decides).
  template <typename T>
  const T* at(uint64_t offset, uint64_t count = 1) const {
    if (data_ == nullptr || offset > size_ || count > (size_ - offset) / sizeof(T) ||
        offset % alignof(T) != 0) {
      return nullptr;
    }
    return reinterpret_cast<const T*>(data_ + offset);
  }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// The defined symbol `name` of ELF type `type` in the file's .symtab (local symbols included),
// or nullopt and `why`.
std::optional<Elf64_Sym> find_symbol(const MappedFile& file, const char* name, unsigned type,
                                     std::string* why) {
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
    if (sections[i].sh_type != SHT_SYMTAB || sections[i].sh_link >= header->e_shnum ||
        sections[sections[i].sh_link].sh_type != SHT_STRTAB) {
      continue;
    }
    const Elf64_Shdr& strings = sections[sections[i].sh_link];
    const uint64_t count = sections[i].sh_size / sizeof(Elf64_Sym);
    const auto* names = file.at<char>(strings.sh_offset, strings.sh_size);
    const auto* symbols = file.at<Elf64_Sym>(sections[i].sh_offset, count);
    if (names == nullptr || symbols == nullptr) continue;
    for (uint64_t s = 0; s < count; ++s) {
      const Elf64_Sym& symbol = symbols[s];
      if (symbol.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(symbol.st_info) != type) continue;
      const uint64_t at = symbol.st_name;
      if (at > strings.sh_size || name_length + 1 > strings.sh_size - at) continue;
      if (std::memcmp(names + at, name, name_length + 1) == 0) return symbol;
    }
  }
  *why = std::string("no symbol table entry for ") + name + " (a stripped library?)";
  return std::nullopt;
}

// The protection of the loaded segment of `map`'s object that holds [address, address + length)
// whole, or -1 where none does (a symbol table that does not describe the mapped file).
int segment_protection(const link_map* map, uintptr_t address, size_t length) {
  struct Search {
    const link_map* map;
    uintptr_t address;
    size_t length;
    int protection = -1;
  } search{map, address, length};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_addr != s->map->l_addr || info->dlpi_name == nullptr ||
            std::strcmp(info->dlpi_name, s->map->l_name) != 0) {
          return 0;
        }
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          if (segment.p_type != PT_LOAD) continue;
          const uintptr_t start = info->dlpi_addr + segment.p_vaddr;
          if (s->address < start || s->address - start > segment.p_memsz ||
              s->length > segment.p_memsz - (s->address - start)) {
            continue;
          }
          s->protection = ((segment.p_flags & PF_R) ? PROT_READ : 0) |
                          ((segment.p_flags & PF_W) ? PROT_WRITE : 0) |
                          ((segment.p_flags & PF_X) ? PROT_EXEC : 0);
          return 1;
        }
        return 1;
      },
      &search);
  return search.protection;
}

// The one CUDA call of NCCL's socket transport, and a stand-in for it where no driver answers.
//
// ncclNetSocketConnect and ncclNetSocketAccept (NCCL 2.28.9, src/transport/net_socket.cc) ask
// `cudaGetDevice(&comm->cudaDev)` under CUDACHECK, and use the answer only to name their helper
// threads ("NCCL Sock..." + cudaDev); NCCL's logger (src/debug.cc) asks it too, for the device
// it prints in each line.  libnccl.so links the CUDA runtime statically; without a working
// driver the call fails ("CUDA driver version is insufficient"), and a fake libcuda.so.1
// cannot satisfy it, because the static runtime first asks the driver for private export
// tables (cuGetExportTable) that are documented nowhere.  So libnccl's own `cudaGetDevice` (a
// local symbol of its .symtab) is called once, and only where it fails is it overwritten with
// "device 0 is current, cudaSuccess": what the driver answers on a machine with one GPU, as
// the GPU runs do.  Nothing else in the transport touches CUDA, so the bytes moved are the
// real transport's.  This is a fake of the driver's answer, confined to this test process.
bool stand_in_for_cuda_get_device(const link_map* map, const MappedFile& file, std::string* why) {
  std::string reason;
  const std::optional<Elf64_Sym> symbol = find_symbol(file, "cudaGetDevice", STT_FUNC, &reason);
  if (!symbol) {
    *why = "no cudaGetDevice in libnccl's symbol table to ask or stand in for (" + reason + ")";
    return false;
  }
  static constexpr unsigned char kDeviceZero[] = {
      // int cudaGetDevice(int* device): *device = 0; return cudaSuccess (0).  x86-64.
      0xc7, 0x07, 0x00, 0x00, 0x00, 0x00,  // mov dword ptr [rdi], 0
      0x31, 0xc0,                          // xor eax, eax
      0xc3,                                // ret
  };
  const uintptr_t address = map->l_addr + symbol->st_value;
  const int protection = segment_protection(map, address, sizeof kDeviceZero);
  if (protection < 0 || (protection & PROT_EXEC) == 0 || symbol->st_size < sizeof kDeviceZero) {
    *why = "libnccl's symbol table does not describe the cudaGetDevice it has loaded";
    return false;
  }
  // Once per process: a second caller finds the driver answering, or the stand-in in place.
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  int device = -1;
  if (reinterpret_cast<int (*)(int*)>(address)(&device) == 0) return true;  // a driver answers
#if defined(__x86_64__)
  auto* code = reinterpret_cast<unsigned char*>(address);
  const uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = address & ~(page_size - 1);
  const size_t span = address + sizeof kDeviceZero - first;  // (mprotect rounds up to pages)
  auto* pages = reinterpret_cast<void*>(first);
  if (mprotect(pages, span, protection | PROT_WRITE) != 0) {
    *why = std::string("no driver, and libnccl's code cannot be made writable: ") + std::strerror(errno);
    return false;
  }
  std::memcpy(code, kDeviceZero, sizeof kDeviceZero);
  __builtin___clear_cache(reinterpret_cast<char*>(code), reinterpret_cast<char*>(code) + sizeof kDeviceZero);
  if (mprotect(pages, span, protection) != 0) {
    *why = std::string("libnccl's code could not be made read-only again: ") + std::strerror(errno);
    return false;
  }
  return true;
#else
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
  // (PluginLibrary never dlcloses: the library stays loaded, as the header says.)
  const std::unique_ptr<PluginLibrary> library = PluginLibrary::open(path, why);
  if (library == nullptr) return nullptr;
  void* handle = library->handle();
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
  const std::optional<Elf64_Sym> symbol = find_symbol(file, "ncclNetSocket", STT_OBJECT, &reason);
  if (!symbol) {
    *why = std::string(map->l_name) + ": " + reason;
    return nullptr;
  }
  const uintptr_t address = map->l_addr + symbol->st_value;
  if (symbol->st_size != sizeof(ncclNet_v11_t) || segment_protection(map, address, sizeof(ncclNet_v11_t)) < 0) {
    *why = std::string(map->l_name) + ": ncclNetSocket is not a loaded " + std::to_string(sizeof(ncclNet_v11_t)) +
           "-byte object (" + std::to_string(symbol->st_size) + " bytes)";
    return nullptr;
  }
  const auto* table = reinterpret_cast<const ncclNet_v11_t*>(address);
  if (table->name == nullptr || std::strcmp(table->name, "Socket") != 0) {
    *why = std::string(map->l_name) + ": ncclNetSocket's name is not \"Socket\"";
    return nullptr;
  }
  if (!stand_in_for_cuda_get_device(map, file, why)) return nullptr;
  return wrap_v11_table(table, why);
}

}  // namespace hmr::nccl::test
