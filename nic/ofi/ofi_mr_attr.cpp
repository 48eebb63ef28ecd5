#include "nic/ofi/ofi_mr_attr.h"

#include <cstddef>

namespace hmr::nic::ofi {

static_assert(offsetof(MrAttr, newer_members) == sizeof(fi_mr_attr),
              "the zeros a newer provider reads as fi_mr_attr's appended members must follow it");

// hmr's constants are libfabric's numbers: access, flags and ifaces pass through unchanged.
static_assert(HMR_READ == FI_READ && HMR_WRITE == FI_WRITE && HMR_SEND == FI_SEND);
static_assert(HMR_RECV == FI_RECV && HMR_REMOTE_READ == FI_REMOTE_READ);
static_assert(HMR_REMOTE_WRITE == FI_REMOTE_WRITE && HMR_COLLECTIVE == FI_COLLECTIVE);
static_assert(HMR_HMEM_DEVICE_ONLY == FI_HMEM_DEVICE_ONLY);
static_assert(HMR_HMEM_HOST_ALLOC == FI_HMEM_HOST_ALLOC && HMR_RMA_PMEM == FI_RMA_PMEM);
static_assert(HMR_RMA_EVENT == FI_RMA_EVENT);
static_assert(static_cast<int>(HMR_HMEM_SYSTEM) == FI_HMEM_SYSTEM &&
              static_cast<int>(HMR_HMEM_CUDA) == FI_HMEM_CUDA &&
              static_cast<int>(HMR_HMEM_ROCR) == FI_HMEM_ROCR &&
              static_cast<int>(HMR_HMEM_ZE) == FI_HMEM_ZE &&
              static_cast<int>(HMR_HMEM_NEURON) == FI_HMEM_NEURON &&
              static_cast<int>(HMR_HMEM_SYNAPSEAI) == FI_HMEM_SYNAPSEAI);
#if HMR_OFI_HAS_DMABUF
static_assert(HMR_MR_DMABUF == FI_MR_DMABUF);
#endif
#if defined(FI_AUTH_KEY)
static_assert(HMR_AUTH_KEY == FI_AUTH_KEY);
#endif

namespace {

constexpr uint64_t kPassedFlags = HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC | HMR_RMA_PMEM;

std::string version_name(uint32_t version) {
  return std::to_string(FI_MAJOR(version)) + "." + std::to_string(FI_MINOR(version));
}

Status needs_newer(const char* what, uint32_t needed, uint32_t api_version,
                   const std::string& who) {
  const uint32_t headers = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  return make_error(HMR_ENOSYS,
                    "%s cannot pass %s: it needs libfabric %s, and this hmr was built with "
                    "libfabric %s headers and speaks API %s to the runtime",
                    who.c_str(), what, version_name(needed).c_str(),
                    version_name(headers).c_str(), version_name(api_version).c_str());
}

Status fill_memory(const RegistrationRequest& request, uint32_t api_version,
                   const std::string& who, MrAttr& out) {
  if (request.dmabuf == nullptr) {
    out.attr.mr_iov = request.segments.data();
    out.attr.iov_count = request.segments.size();
    return ok_status();
  }
#if HMR_OFI_HAS_DMABUF
  if (api_version >= FI_VERSION(1, 20)) {
    out.dmabuf.fd = request.dmabuf->fd;
    out.dmabuf.offset = request.dmabuf->offset;
    out.dmabuf.len = request.dmabuf->len;
    // libfabric's base_addr is the address of the dma-buf's byte 0 (its util code and EFA
    // take base_addr + offset for the range: ofi_mr_get_iov_from_dmabuf); hmr's is the
    // address of the range's own first byte (hmr.h), what peers are told.
    out.dmabuf.base_addr = reinterpret_cast<void*>(
        reinterpret_cast<uintptr_t>(request.dmabuf->base_addr) - request.dmabuf->offset);
    out.attr.dmabuf = &out.dmabuf;
    out.attr.iov_count = 1;
    out.flags |= FI_MR_DMABUF;
    return ok_status();
  }
#endif
  return needs_newer("a dma-buf (FI_MR_DMABUF)", FI_VERSION(1, 20), api_version, who);
}

Status fill_hmem_extras(const RegistrationRequest& request, uint32_t api_version,
                        const std::string& who, [[maybe_unused]] MrAttr& out) {
  if (request.hmem_data != nullptr) {
#if HMR_OFI_HAS_HMEM_DATA
    if (api_version >= FI_VERSION(1, 19)) {
      out.attr.hmem_data = request.hmem_data;
    } else
#endif
    {
      return needs_newer("hmem_data", FI_VERSION(1, 19), api_version, who);
    }
  }
  if (request.page_size != 0) {
#if HMR_OFI_HAS_PAGE_SIZE
    if (api_version >= FI_VERSION(1, 22)) {
      out.attr.page_size = request.page_size;
    } else
#endif
    {
      return needs_newer("page_size", FI_VERSION(1, 22), api_version, who);
    }
  }
  return ok_status();
}

}  // namespace

uint64_t chosen_key(uint64_t count, size_t key_size) {
  if (key_size >= sizeof(uint64_t)) return count == 0 ? 1 : count;
  const uint64_t keys = (uint64_t{1} << (8 * key_size)) - 1;  // 1 .. 2^bits - 1
  return 1 + (count == 0 ? 0 : count - 1) % keys;
}

uint64_t chosen_key_stride(int attempt, size_t key_size) {
  const uint64_t keys =
      key_size >= sizeof(uint64_t) ? ~uint64_t{0} : (uint64_t{1} << (8 * key_size)) - 1;
  const uint64_t most = keys / 128 > 0 ? keys / 128 : 1;
  const int doubling = attempt - 1;
  if (doubling >= 63) return most;
  const uint64_t stride = uint64_t{1} << doubling;
  return stride < most ? stride : most;
}

Status build_mr_attr(const RegistrationRequest& request, uint64_t key, uint32_t api_version,
                     const std::string& who, MrAttr& out) {
  if (request.flags & HMR_RMA_EVENT) {
    return make_error(HMR_EOPNOTSUPP,
                      "%s: HMR_RMA_EVENT needs libfabric counters bound to the MR, and hmr "
                      "counters are not libfabric counters; register without it",
                      who.c_str());
  }
  if (request.flags & HMR_AUTH_KEY) {
    return make_error(HMR_EOPNOTSUPP, "%s: the ofi adapter does not pass HMR_AUTH_KEY",
                      who.c_str());
  }
  HMR_RETURN_IF_ERROR(fill_memory(request, api_version, who, out));
  HMR_RETURN_IF_ERROR(fill_hmem_extras(request, api_version, who, out));
  out.attr.access = request.access;
  out.attr.offset = 0;
  out.attr.requested_key = key;
  out.attr.iface = static_cast<fi_hmem_iface>(request.iface);
  out.attr.device.reserved = request.device;
  out.flags |= request.flags & kPassedFlags;
  return ok_status();
}

}  // namespace hmr::nic::ofi
