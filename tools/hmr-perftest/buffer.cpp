#include "buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "options.h"

namespace hmr::perftest {
namespace {

uint8_t pattern_byte(size_t i) { return static_cast<uint8_t>(i * 31 + 7); }

hmr_hmem_iface iface_named(const std::string& name) {
  if (name == "cuda") return HMR_HMEM_CUDA;
  if (name == "rocr") return HMR_HMEM_ROCR;
  if (name == "ze") return HMR_HMEM_ZE;
  if (name == "neuron") return HMR_HMEM_NEURON;
  if (name == "synapseai") return HMR_HMEM_SYNAPSEAI;
  return HMR_HMEM_SYSTEM;
}

}  // namespace

std::optional<Buffer> Buffer::allocate(const std::string& memory, size_t size, std::string* why) {
  std::optional<MemorySpec> spec = parse_memory(memory);
  if (!spec) {
    *why = "bad memory '" + memory + "'";
    return std::nullopt;
  }
  if (spec->iface != "host") {
    // Device memory through hmr's own allocator: the tool needs no vendor SDK.
    const hmr_hmem_iface iface = iface_named(spec->iface);
    void* device = nullptr;
    const int rc = hmr_mem_alloc(iface, static_cast<uint64_t>(spec->device), size,
                                 HMR_MEM_DEVICE_ONLY, &device);
    if (rc != 0) {
      *why = "--mem " + memory + ": hmr_mem_alloc of " + std::to_string(size) +
             " bytes: " + hmr_strerror(rc) + " (" + hmr_last_error() + ")";
      return std::nullopt;
    }
    return Buffer(static_cast<uint8_t*>(device), size, iface);
  }
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    *why = "mmap of " + std::to_string(size) + " bytes: " + std::strerror(errno);
    return std::nullopt;
  }
  std::memset(data, 0, size);  // every page present before anything is timed
  return Buffer(static_cast<uint8_t*>(data), size, HMR_HMEM_SYSTEM);
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(other.size_), iface_(other.iface_) {}

Buffer::~Buffer() {
  if (data_ == nullptr) return;
  if (host()) {
    ::munmap(data_, size_);
  } else {
    (void)hmr_mem_free(iface_, data_);
  }
}

void Buffer::fill_pattern(size_t len) {
  for (size_t i = 0; i < len; ++i) data_[i] = pattern_byte(i);
}

bool Buffer::matches_pattern(size_t len) const {
  for (size_t i = 0; i < len; ++i) {
    if (data_[i] != pattern_byte(i)) return false;
  }
  return true;
}

uint64_t Buffer::checksum(size_t len) const {
  uint64_t sum = 0xcbf29ce484222325ULL;  // FNV-1a
  for (size_t i = 0; i < len; ++i) sum = (sum ^ data_[i]) * 0x100000001b3ULL;
  return sum;
}

}  // namespace hmr::perftest
