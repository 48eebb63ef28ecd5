#include "nic/ofi/ofi_nic.h"

#include <atomic>
#include <cstdio>

#include "hmem/hmem_registry.h"
#include "nic/mr_mode_names.h"
#include "nic/ofi/ofi_error.h"
#include "nic/ofi/ofi_mr_attr.h"
#include "nic/ofi/ofi_options.h"

namespace hmr::nic::ofi {

// hmr's mr_mode bits are libfabric's: the provider's requirements pass through unchanged.
static_assert(HMR_MR_LOCAL == FI_MR_LOCAL && HMR_MR_RAW == FI_MR_RAW);
static_assert(HMR_MR_VIRT_ADDR == FI_MR_VIRT_ADDR && HMR_MR_ALLOCATED == FI_MR_ALLOCATED);
static_assert(HMR_MR_PROV_KEY == FI_MR_PROV_KEY && HMR_MR_MMU_NOTIFY == FI_MR_MMU_NOTIFY);
static_assert(HMR_MR_RMA_EVENT == FI_MR_RMA_EVENT && HMR_MR_ENDPOINT == FI_MR_ENDPOINT);
static_assert(HMR_MR_HMEM == FI_MR_HMEM && HMR_MR_COLLECTIVE == FI_MR_COLLECTIVE);
static_assert(HMR_MR_BASIC == FI_MR_BASIC && HMR_MR_SCALABLE == FI_MR_SCALABLE);

namespace {

using ull = unsigned long long;

// A key another user of the same libfabric domain already holds makes the provider answer
// -FI_ENOKEY; hmr then tries further on, this many times at most.
constexpr int kKeyAttempts = 64;

// Keys hmr chooses when the provider takes requested keys and the application lets hmr
// choose (hmr's PROV_KEY is in force).  One counter for the process, so hmr domains that wrap
// the same libfabric domain never collide with each other; collisions with keys the
// application registered itself are skipped by registering again further on.
std::atomic<uint64_t> next_chosen_key{1};

std::string describe_memory(const RegistrationRequest& request) {
  char text[96];
  if (request.dmabuf != nullptr) {
    std::snprintf(text, sizeof text, "dma-buf fd %d [+%llu, %zu bytes)", request.dmabuf->fd,
                  static_cast<ull>(request.dmabuf->offset), request.dmabuf->len);
  } else if (!request.segments.empty()) {
    std::snprintf(text, sizeof text, "[%p, +%zu) in %zu segment(s)",
                  request.segments[0].iov_base, request.segments[0].iov_len,
                  request.segments.size());
  } else {
    std::snprintf(text, sizeof text, "no memory");
  }
  return text;
}

// Providers that register through a kernel RDMA driver pin host pages (and so count against
// RLIMIT_MEMLOCK): verbs, efa, psm2/psm3, opx, cxi, usnic, and ucx (through UCX's verbs).  tcp, udp, sockets and shm keep a
// key table in the process and pin nothing.  The core provider is the part of prov_name
// before the utility one ("verbs;ofi_rxm").
bool provider_pins_memory(const char* prov_name) {
  const std::string name(prov_name != nullptr ? prov_name : "");
  const std::string core = name.substr(0, name.find(';'));
  for (const char* pinning : {"verbs", "efa", "psm2", "psm3", "opx", "cxi", "usnic", "ucx"}) {
    if (core == pinning) return true;
  }
  return false;
}

}  // namespace

OfiNic::OfiNic(const OfiLibrary& library, std::unique_ptr<OfiDomain> domain)
    : library_(library), domain_(std::move(domain)) {}

Result<std::unique_ptr<Nic>> OfiNic::open(const char* options, void* handle) {
  Result<OfiOptions> parsed = parse_ofi_options(options);
  if (!parsed.ok()) return parsed.status();
  Result<const OfiLibrary*> library = load_ofi_library();
  if (!library.ok()) return library.status();
  Result<std::unique_ptr<OfiDomain>> domain = OfiDomain::open(**library, *parsed, handle);
  if (!domain.ok()) return domain.status();
  std::unique_ptr<OfiNic> nic(new OfiNic(**library, std::move(*domain)));
  HMR_RETURN_IF_ERROR(nic->describe());
  return std::unique_ptr<Nic>(std::move(nic));
}

Status OfiNic::describe() {
  const fi_info& info = domain_->info();
  const uint64_t mode = domain_->mr_mode() & ~(FI_MR_BASIC | FI_MR_SCALABLE);
  const std::string& who = domain_->who();
  if ((mode & ~nic::kKnownModeBits) != 0) {
    return make_error(HMR_EOPNOTSUPP, "%s requires mr_mode bits %#llx that hmr does not know",
                      who.c_str(), static_cast<ull>(mode & ~nic::kKnownModeBits));
  }
  if (mode & FI_MR_ENDPOINT) {
    return make_error(HMR_EOPNOTSUPP,
                      "%s requires FI_MR_ENDPOINT: its MRs must be bound to libfabric endpoints "
                      "and enabled, and hmr endpoints are not libfabric endpoints; the ofi "
                      "adapter does not support such providers yet",
                      who.c_str());
  }
  provider_keys_ = (mode & FI_MR_PROV_KEY) != 0;
  virt_addr_ = (mode & FI_MR_VIRT_ADDR) != 0;
  raw_keys_ = (mode & FI_MR_RAW) != 0;
  size_t key_size = info.domain_attr->mr_key_size;
  if (raw_keys_ && (key_size == 0 || key_size > KeyBytes::kMaxSize)) {
    return make_error(HMR_ENOSYS, "%s has %zu-byte raw keys; hmr holds raw keys of up to %zu "
                      "bytes", who.c_str(), key_size, KeyBytes::kMaxSize);
  }
  if (!raw_keys_ && (key_size == 0 || key_size > sizeof(uint64_t))) key_size = sizeof(uint64_t);

  capabilities_.name = "ofi:" + std::string(info.fabric_attr->prov_name);
  capabilities_.required_mr_mode = mode;
  // The domain's addressing is fixed (VIRT_ADDR is required or impossible), but keys are
  // hmr's to choose when the provider takes requested ones: see register_memory.
  capabilities_.optional_mr_mode = provider_keys_ ? 0 : HMR_MR_PROV_KEY;
  capabilities_.key_size = key_size;
  const size_t iov_limit = info.domain_attr->mr_iov_limit;
  capabilities_.iov_limit = iov_limit != 0 ? iov_limit : 1;
  // fi_domain(3)'s mr_cnt is "the optimal number of memory regions", a fixed hardware maximum
  // or a figure the provider derived: a bound hmr enforces (refusing past it) only where it is
  // the device's, on the providers that register through a kernel driver.  A software
  // provider's (sockets: 65535) is no limit: libfabric registers past it (found by a review:
  // hmr refused the 65536th MR).
  capabilities_.mr_cnt = provider_pins_memory(info.fabric_attr->prov_name)
                             ? info.domain_attr->mr_cnt : 0;
  const bool hmem = (info.caps & FI_HMEM) != 0;
  capabilities_.peer_direct = hmem;
  capabilities_.dmabuf_import =
      HMR_OFI_HAS_DMABUF && hmem && library_.api_version >= FI_VERSION(1, 20);
  capabilities_.pins_host_memory = provider_pins_memory(info.fabric_attr->prov_name);
  capabilities_.persistent_memory = (info.caps & FI_RMA_PMEM) != 0;
  capabilities_.auth_keys = false;  // fi_mr_attr.auth_key is not passed (yet)
  capabilities_.rma = false;        // bytes move through the application's own endpoints
  capabilities_.serialized_by_application = domain_->serialized_by_application();
  // libfabric's fi_mr has none of verbs' memory operations: say so per operation.
  const std::string& name = capabilities_.name;
  nic::MemoryOperations& ops = capabilities_.operations;
  ops.rereg = nic::unsupported(name, "cannot re-register: libfabric's fi_mr has no rereg (close "
                                     "the MR and register again)");
  ops.memory_windows = nic::unsupported(name, "has no memory windows: libfabric has none");
  ops.odp = nic::unsupported(name, "has no on-demand-paging registrations: libfabric 1.17's "
                                   "fi_mr_regattr has no ODP flag");
  ops.implicit_odp = ops.odp;
  ops.advise = nic::unsupported(name, "has no prefetch advice: libfabric has no fi_mr advise");
  ops.indirect = nic::unsupported(name, "has no indirect keys: libfabric has no fi_mr over "
                                        "other MRs");
  return ok_status();
}

Status OfiNic::check_device_memory(const RegistrationRequest& request) const {
  if (request.iface == HMR_HMEM_SYSTEM || (domain_->info().caps & FI_HMEM)) {
    return ok_status();  // the provider decides, and says so through fi_mr_regattr
  }
  const char* iface = hmem::iface_name(request.iface);
  int offers = provider_offers_hmem_.load(std::memory_order_relaxed);
  if (offers < 0) {
    offers = domain_->provider_offers_hmem() ? 1 : 0;
    provider_offers_hmem_.store(offers, std::memory_order_relaxed);
  }
  if (offers == 0) {
    return make_error(HMR_ENOSYS,
                      "%s cannot register %s memory: the provider offers no FI_HMEM capability, "
                      "so device memory is not supported by this libfabric build",
                      domain_->who().c_str(), iface);
  }
  return make_error(HMR_EOPNOTSUPP,
                    "%s cannot register %s memory on this domain: it was opened without "
                    "FI_HMEM.  Open it with FI_HMEM (nic_options hmem=1; for your own domain, "
                    "add FI_HMEM to its caps and say hmem=1)",
                    domain_->who().c_str(), iface);
}

Result<Registration> OfiNic::register_memory(const RegistrationRequest& request) {
  if (request.iface != HMR_HMEM_SYSTEM && (request.flags & HMR_HMEM_HOST_ALLOC) != 0 &&
      (domain_->info().caps & FI_HMEM) == 0) {
    // A runtime's pinned host memory (cuMemHostAlloc, hipHostMalloc, zeMemAllocHost) is host
    // memory the CPU maps: a provider that takes no device memory registers it as such, as
    // NCCL's host buffers (cuMemHostAlloc'd, regMr'd as NCCL_PTR_HOST) reach fi_mr_regattr
    // with FI_HMEM_SYSTEM in aws-ofi-nccl.  With FI_HMEM the provider hears the iface and
    // FI_HMEM_HOST_ALLOC instead, as libfabric's own cuda_is_addr_valid reports them.
    RegistrationRequest as_host = request;
    as_host.iface = HMR_HMEM_SYSTEM;
    as_host.device = 0;
    as_host.flags &= ~static_cast<uint64_t>(HMR_HMEM_HOST_ALLOC);
    return register_memory(as_host);
  }
  HMR_RETURN_IF_ERROR(check_device_memory(request));
  // What libfabric would take and ignore: no window can ever be bound (libfabric has none),
  // and a provider without FI_RMA_PMEM gives no persistent-memory write semantics.
  if (request.access & HMR_MW_BIND) {
    return make_error(HMR_ENOSYS, "%s has no memory windows (libfabric has none), so "
                      "HMR_MW_BIND access means nothing here: register without it",
                      domain_->who().c_str());
  }
  if ((request.flags & HMR_RMA_PMEM) && !capabilities_.persistent_memory) {
    return make_error(HMR_EOPNOTSUPP, "%s does not support FI_RMA_PMEM: HMR_RMA_PMEM "
                      "registrations would not get persistent-memory write semantics",
                      domain_->who().c_str());
  }
  MrAttr attr;
  HMR_RETURN_IF_ERROR(build_mr_attr(request, request.requested_key.value_or(0),
                                    library_.api_version, domain_->who(), attr));
  // hmr chooses the key when the provider takes requested keys and the application let hmr
  // choose (hmr's PROV_KEY is in force), so MRs stay shareable through the cache.
  const bool choose_key = !request.requested_key && !provider_keys_;
  fid_mr* mr = nullptr;
  int rc = 0;
  // After each collision the next key is taken further away (chosen_key_stride), so a block
  // of keys the application uses is passed in a few attempts.
  int attempt = 1;
  for (;; ++attempt) {
    if (choose_key) {
      attr.attr.requested_key =
          chosen_key(next_chosen_key.fetch_add(chosen_key_stride(attempt, capabilities_.key_size),
                                               std::memory_order_relaxed),
                     capabilities_.key_size);
    }
    rc = fi_mr_regattr(domain_->domain(), &attr.attr, attr.flags, &mr);
    if (!(choose_key && rc == -FI_ENOKEY && attempt < kKeyAttempts)) break;
  }
  if (choose_key && rc == -FI_ENOKEY) {
    // Out of keys as far as hmr looked: a shortage of a NIC resource, which idle cached
    // registrations (each holding a key) may relieve (registration/nic_pressure.h), not the
    // caller's "requested key in use" (it requested none).
    return make_error(HMR_ENOSPC, "%s: fi_mr_regattr of %s: the %d keys hmr chose in turn "
                      "(%zu-byte keys, the last %#llx) are all in use on the libfabric domain",
                      domain_->who().c_str(), describe_memory(request).c_str(), attempt,
                      capabilities_.key_size, static_cast<ull>(attr.attr.requested_key));
  }
  if (rc != 0) return failure(request, attr.attr.requested_key, rc);
  return describe_registration(request, mr);
}

Status OfiNic::failure(const RegistrationRequest& request, uint64_t key, int rc) const {
  const char* iface = hmem::iface_name(request.iface);
  if (request.iface != HMR_HMEM_SYSTEM && (rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP)) {
    return make_error(HMR_ENOSYS,
                      "%s was built without %s support: fi_mr_regattr of %s memory (device "
                      "%llu) returned %s; %s memory is not supported by this libfabric build",
                      domain_->who().c_str(), iface, iface, static_cast<ull>(request.device),
                      library_.describe(rc).c_str(), iface);
  }
  return make_error(hmr_code_for_fi(rc),
                    "%s: fi_mr_regattr of %s (access %#llx, requested key %#llx, iface %s) "
                    "failed: %s%s",
                    domain_->who().c_str(), describe_memory(request).c_str(),
                    static_cast<ull>(request.access), static_cast<ull>(key), iface,
                    library_.describe(rc).c_str(),
                    rc == -FI_ENOKEY ? " (the key is in use on the libfabric domain)" : "");
}

Result<Registration> OfiNic::describe_registration(const RegistrationRequest& request,
                                                   fid_mr* mr) const {
  Registration registration;
  registration.handle = mr;
  registration.desc = fi_mr_desc(mr);
  if (raw_keys_) {
    uint64_t base = 0;
    size_t size = KeyBytes::kMaxSize;
    const int rc = fi_mr_raw_attr(mr, &base, registration.key.bytes, &size, 0);
    if (rc != 0) {
      (void)fi_close(&mr->fid);
      return make_error(hmr_code_for_fi(rc), "%s: fi_mr_raw_attr of %s failed: %s",
                        domain_->who().c_str(), describe_memory(request).c_str(),
                        library_.describe(rc).c_str());
    }
    registration.key.size = size;
    registration.base_addr = base;
    return registration;
  }
  const uint64_t key = fi_mr_key(mr);
  if (key == FI_KEY_NOTAVAIL) {
    (void)fi_close(&mr->fid);
    return make_error(HMR_EIO, "%s gave no key for %s (FI_KEY_NOTAVAIL)", domain_->who().c_str(),
                      describe_memory(request).c_str());
  }
  // At full width: the registrar narrows it to the domain's key size, which is at most the
  // provider's, and refuses a key wider than that (NicRegistrar::narrow_key) instead of
  // cutting it, which would send peers another key.
  registration.key = KeyBytes::from_u64(key, sizeof(uint64_t));
  if (virt_addr_) {
    registration.base_addr = reinterpret_cast<uint64_t>(
        request.dmabuf != nullptr ? request.dmabuf->base_addr : request.segments[0].iov_base);
  }
  return registration;
}

Status OfiNic::deregister(Registration& registration) {
  auto* mr = static_cast<fid_mr*>(registration.handle);
  if (mr == nullptr) {
    return make_error(HMR_EINVAL, "%s: no MR to deregister", domain_->who().c_str());
  }
  const int rc = fi_close(&mr->fid);
  if (rc != 0) {
    return make_error(hmr_code_for_fi(rc), "%s: fi_close of an MR failed: %s",
                      domain_->who().c_str(), library_.describe(rc).c_str());
  }
  registration.handle = nullptr;
  return ok_status();
}

Status OfiNic::refresh(Registration& registration, std::span<const iovec> segments) {
  auto* mr = static_cast<fid_mr*>(registration.handle);
  const int rc = fi_mr_refresh(mr, segments.data(), segments.size(), 0);
  if (rc != 0) {
    return make_error(hmr_code_for_fi(rc), "%s: fi_mr_refresh of %zu segment(s) failed: %s",
                      domain_->who().c_str(), segments.size(), library_.describe(rc).c_str());
  }
  return ok_status();
}

}  // namespace hmr::nic::ofi
