#include "nic/verbs/verbs_nic.h"

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "hmem/hmem_registry.h"
#include "hmem/page_range.h"
#include "nic/verbs/fork_protection.h"
#include "nic/verbs/indirect_mkey.h"
#include "nic/verbs/memory_window.h"
#include "nic/verbs/provider_ops.h"
#include "nic/verbs/verbs_error.h"
#include "util/log.h"
#include "util/thread_pool.h"

namespace hmr::verbs {
namespace {

using ull = unsigned long long;

constexpr uint64_t kKnownFlags =
    HMR_MR_DMABUF | HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC | HMR_MR_ODP;
constexpr uint64_t kRemoteAccess = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
// An ibv_sge length is 32 bits; prefetch advice is split into pieces no longer than this.
constexpr uint64_t kMaxAdviceSge = uint64_t{1} << 30;
// The same for the byte count of a KLM entry of an indirect key.
constexpr uint64_t kMaxKlmEntry = uint64_t{1} << 30;
// An indirect key's total: what libmlx5 before rdma-core 61 can sum in an int (see
// register_indirect).
constexpr uint64_t kMaxIndirectLength = (uint64_t{1} << 31) - 1;

VerbsRegistration* record_of(const nic::Registration& registration) {
  return static_cast<VerbsRegistration*>(registration.handle);
}

ibv_advise_mr_advice to_ibv_advice(nic::Advice advice) {
  switch (advice) {
    case nic::Advice::prefetch: return IBV_ADVISE_MR_ADVICE_PREFETCH;
    case nic::Advice::prefetch_write: return IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
    case nic::Advice::prefetch_no_fault: break;
  }
  return IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
}

}  // namespace

Result<std::unique_ptr<nic::Nic>> VerbsNic::open(const char* options, void* handle,
                                                 const VerbsEnvironment& environment) {
  Result<VerbsOptions> parsed = parse_verbs_options(options);
  if (!parsed.ok()) return parsed.status();
  if (handle != nullptr && !parsed->device.empty()) {
    return make_error(HMR_EINVAL, "verbs option device=%s and a nic_handle both choose the "
                      "device; give one (the PD's device is used)", parsed->device.c_str());
  }
  Result<std::shared_ptr<const IbverbsLibrary>> library = IbverbsLibrary::load();
  if (!library.ok()) return library.status();
  // libmlx5 only once there is a device to use it on: a process without RDMA never loads it.
  Mlx5Access mlx5;
  auto load_mlx5 = [&mlx5] {
    if (Result<std::shared_ptr<const Mlx5dvLibrary>> loaded = Mlx5dvLibrary::load(); loaded.ok()) {
      mlx5.library = std::move(*loaded);
    } else {
      mlx5.unavailable = loaded.status().reason();
    }
  };

  Result<DeviceHandle> device = [&]() -> Result<DeviceHandle> {
    // Fork protection is decided once there is a device to use, before anything of it is
    // opened or registered (ibv_fork_init must precede the first registration and the
    // provider's own buffers); a process without RDMA devices is left as it was.
    if (handle != nullptr) {
      (void)protect_against_fork((*library)->symbols(), parsed->fork);
      load_mlx5();
      return DeviceHandle::borrow(*library, static_cast<ibv_pd*>(handle));
    }
    Result<DeviceList> list = DeviceList::get(*library);
    if (!list.ok()) return list.status();
    (void)protect_against_fork((*library)->symbols(), parsed->fork);
    load_mlx5();
    Result<ibv_device*> chosen = parsed->device.empty() ? Result<ibv_device*>(list->device(0))
                                                        : list->find(parsed->device);
    if (!chosen.ok()) return chosen.status();
    // The list may be freed once the device is open.
    return open_device(*library, *chosen, mlx5);
  }();
  if (!device.ok()) return device.status();
  if (handle != nullptr) probe_borrowed_devx(*device, mlx5);

  Result<DeviceProbe> probe =
      probe_device(**library, device->context(), device->pd(), environment.sysfs_root);
  if (!probe.ok()) return probe.status();
  std::unique_ptr<VerbsNic> nic(new VerbsNic(std::move(*library), std::move(*device), *parsed,
                                             std::move(*probe), std::move(mlx5)));
  HMR_RETURN_IF_ERROR(nic->apply_options());
  log_message(LogLevel::info, "verbs NIC on %s: dma-buf %s; peer-direct %s; ODP %s",
              nic->probe_.name.c_str(), nic->probe_.dmabuf.reason.c_str(),
              nic->probe_.peer_direct.reason.c_str(), nic->probe_.on_demand_paging.reason.c_str());
  return std::unique_ptr<nic::Nic>(std::move(nic));
}

Result<DeviceHandle> VerbsNic::open_device(const std::shared_ptr<const IbverbsLibrary>& library,
                                           ibv_device* device, Mlx5Access& mlx5) {
  if (mlx5.library != nullptr && mlx5.library->symbols().is_supported(device)) {
    mlx5dv_context_attr attr{};
    attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
    errno = 0;
    if (ibv_context* context = mlx5.library->symbols().open_device(device, &attr)) {
      return DeviceHandle::adopt(library, context);
    }
    const int err = errno;
    const char* name = library->symbols().get_device_name(device);
    mlx5.devx_failure = std::string("mlx5dv_open_device(") + (name != nullptr ? name : "?") +
                        ", MLX5DV_CONTEXT_FLAGS_DEVX) failed: " +
                        (err != 0 ? std::strerror(err) : "no errno") +
                        "; an indirect mkey needs a DEVX context, so the device was opened "
                        "without one";
  }
  return DeviceHandle::open(library, device);
}

// The application's context may or may not have been opened with DEVX, and nothing public
// says which: an indirect mkey made and destroyed at once settles it, so hmr_md_query_op tells
// the truth.  (On a context without DEVX the kernel answers EINVAL: mlx5's devx_get_uid, before
// anything else; EOPNOTSUPP and EPERM where DEVX is not allowed at all.)  Any other failure
// settles nothing (ENOMEM: the device's mkey table, shared with every process, is full for
// the moment; EAGAIN, EBUSY, a firmware syndrome): the context may well have DEVX, so
// indirect keys stay offered and each key's own creation says what fails then.
void VerbsNic::probe_borrowed_devx(const DeviceHandle& device, Mlx5Access& mlx5) {
  if (mlx5.library == nullptr || !mlx5.library->symbols().is_supported(device.context()->device)) {
    return;  // indirect_support() says why
  }
  Result<std::unique_ptr<IndirectMkey>> probe =
      IndirectMkey::create(mlx5.library, device.pd(), 1, 0, "the application's device");
  if (probe.ok()) return;  // (destroyed here)
  const int code = probe.status().code();  // (EPERM is HMR_EACCES: verbs_error.cpp)
  if (code != HMR_EINVAL && code != HMR_EOPNOTSUPP && code != HMR_EACCES) {
    log_message(LogLevel::info,
                "the application's device: the probe of DEVX failed for another reason than "
                "DEVX (%s); indirect keys stay offered",
                probe.status().reason().c_str());
    return;
  }
  mlx5.devx_failure = "the application's PD belongs to a context opened without DEVX (a probe "
                      "mlx5dv_create_mkey failed: " + probe.status().reason() + "); open it "
                      "with mlx5dv_open_device and MLX5DV_CONTEXT_FLAGS_DEVX for indirect keys";
}

VerbsNic::VerbsNic(std::shared_ptr<const IbverbsLibrary> library, DeviceHandle device,
                   const VerbsOptions& options, DeviceProbe probe, Mlx5Access mlx5)
    : library_(std::move(library)),
      device_(std::move(device)),
      options_(options),
      probe_(std::move(probe)),
      mlx5_(std::move(mlx5)) {}

VerbsNic::~VerbsNic() = default;

Status VerbsNic::close_native() {
  Status retried = ok_status();
  {
    std::lock_guard<std::mutex> lock(abandoned_mutex_);
    for (const std::unique_ptr<VerbsRegistration>& record : abandoned_) {
      Status again = record->deregister_all();
      if (!again.ok() && retried.ok()) {
        retried = Status(again.code(), "a registration whose deregistration had failed still "
                         "could not be deregistered at close (the device's close destroyed it): " +
                         again.reason());
      }
    }
    abandoned_.clear();
  }
  // The UMR queue's QP is on hmr's PD too: one the device would not destroy is the reason to
  // give, not the PD's dealloc that it then makes fail (which blames the application's own
  // objects).  Destroyed before the queue is dropped, so that its verb and errno are known.
  Status umr_destroyed = ok_status();
  {
    std::lock_guard<std::mutex> lock(umr_mutex_);
    if (umr_ != nullptr) {
      umr_destroyed = umr_->destroy();
      if (!umr_destroyed.ok()) {
        umr_destroyed = Status(umr_destroyed.code(),
                               umr_destroyed.reason() + (device_.owned()
                                   ? "; the device context was closed all the same, which "
                                     "destroyed it"
                                   : "; it stays on the application's PD"));
      }
      umr_.reset();  // (its destructor tries once more)
    }
  }
  // (The PD's dealloc then fails too, for that MR or queue: they are the reason to give.)
  Status closed = device_.close();
  if (!retried.ok()) return retried;
  return umr_destroyed.ok() ? closed : umr_destroyed;
}

Status VerbsNic::apply_options() {
  if (options_.odp && !probe_.on_demand_paging.supported) {
    return make_error(HMR_EOPNOTSUPP, "verbs option odp=on, but %s cannot: %s",
                      probe_.name.c_str(), probe_.on_demand_paging.reason.c_str());
  }
  // Relaxed ordering lets the NIC's PCIe writes land out of order: a CPU that polls the last
  // byte of an RDMA-written host buffer may then see it before the bytes before it.  GPU memory
  // is not polled that way and gains bandwidth from it (NCCL sets it), so auto gives it to
  // device memory only; on gives it to host memory too (UCX's choice on CPUs that need it).
  switch (options_.relaxed_ordering) {
    case Tristate::off: relaxed_ordering_ = relaxed_ordering_host_ = false; break;
    case Tristate::automatic:
      relaxed_ordering_ = probe_.relaxed_ordering.supported;
      relaxed_ordering_host_ = false;
      break;
    case Tristate::on:
      if (!probe_.relaxed_ordering.supported) {
        return make_error(HMR_EOPNOTSUPP, "verbs option relaxed_ordering=on, but %s",
                          probe_.relaxed_ordering.reason.c_str());
      }
      relaxed_ordering_ = relaxed_ordering_host_ = true;
      break;
  }
  chunk_len_ = chunk_length_for(probe_.max_mr_size);

  capabilities_.name = "verbs:" + probe_.name;
  capabilities_.required_mr_mode = HMR_MR_LOCAL | HMR_MR_PROV_KEY;
  // Without ODP the kernel pins pages at registration, so they must exist.
  if (!options_.odp) capabilities_.required_mr_mode |= HMR_MR_ALLOCATED;
  if (!probe_.offset_addressing.supported) capabilities_.required_mr_mode |= HMR_MR_VIRT_ADDR;
  if (options_.raw_keys) capabilities_.required_mr_mode |= HMR_MR_RAW;
  capabilities_.key_size = options_.raw_keys ? kRawKeySize : sizeof(uint32_t);
  // mlx5 makes MRs, windows and indirect mkeys from one table (mlx5_ib_query_device reports
  // 1 << log_max_mkey as both max_mr and max_mw); known by Mellanox's vendor id.  Other
  // devices are not known to, so a window they refuse gives nothing back (it would empty the
  // cache for nothing).
  capabilities_.windows_take_registration_keys = probe_.mellanox();
  capabilities_.iov_limit = 1;
  capabilities_.mr_cnt = probe_.max_mr > 0 ? static_cast<size_t>(probe_.max_mr) : 0;
  capabilities_.max_mr_size =
      max_chunked_length(chunk_len_, options_.raw_keys ? kMaxRawKeyChunks : kMaxLocalChunks);
  capabilities_.dmabuf_import = probe_.dmabuf.supported;
  capabilities_.peer_direct = probe_.peer_direct.supported;
  capabilities_.on_demand_paging = options_.odp;
  // ib_umem_get pins every page of a non-ODP registration and charges it to pinned_vm.
  capabilities_.pins_host_memory = !options_.odp;
  capabilities_.memory_windows =
      probe_.window_type1.supported || probe_.window_type2.supported;
  describe_operations();
  return ok_status();
}

void VerbsNic::describe_operations() {
  nic::MemoryOperations& ops = capabilities_.operations;
  const std::string& device = probe_.name;
  ops.rereg = {probe_.rereg.supported, probe_.rereg.supported ? "" : probe_.rereg.reason};
  if (capabilities_.memory_windows) {
    ops.memory_windows = {true, ""};
  } else {
    ops.memory_windows = {false, device + ": " + probe_.window_type1.reason};
  }
  if (probe_.on_demand_paging.supported) {
    ops.odp = {true, ""};
  } else {
    ops.odp = {false, device + ": " + probe_.on_demand_paging.reason};
  }
  if (!ops.odp.available) {
    ops.implicit_odp = ops.odp;
  } else if ((probe_.odp_general_caps & IBV_ODP_SUPPORT_IMPLICIT) == 0) {
    ops.implicit_odp = {false, device + " has ODP but not implicit ODP (odp_caps.general_caps "
                                        "lacks IBV_ODP_SUPPORT_IMPLICIT)"};
  } else {
    ops.implicit_odp = {true, ""};
  }
  if (!ops.odp.available) {
    ops.advise = {false, "prefetch advice is for ODP registrations, and " + ops.odp.reason};
  } else if (!advise_available(device_.pd())) {
    ops.advise = {false, "the provider library of " + device + " has no ibv_advise_mr"};
  } else {
    ops.advise = {true, ""};
  }
  ops.indirect = indirect_support();
}

nic::Support VerbsNic::indirect_support() const {
  const std::string why = "indirect keys on verbs are mlx5 UMR keys (an mlx5dv_create_mkey key "
                          "filled by mlx5dv_wr_mr_list): ";
  if (mlx5_.library == nullptr) return {false, why + mlx5_.unavailable};
  if (!mlx5_.library->symbols().is_supported(device_.context()->device)) {
    return {false, why + probe_.name + " is not an mlx5 device (mlx5dv_is_supported)"};
  }
  if (const char* missing = UmrQueue::missing_verb(library_->symbols())) {
    return {false, why + library_->path() + " lacks " + missing};
  }
  if (!mlx5_.devx_failure.empty()) return {false, why + mlx5_.devx_failure};
  return {true, ""};
}

AccessExtras VerbsNic::access_extras(bool on_demand, bool device_direct) const {
  AccessExtras extras;
  // Atomics on pages the NIC faults in need the device's ODP atomic support.
  extras.atomics =
      probe_.atomics && (!on_demand || (probe_.odp_rc_caps & IBV_ODP_SUPPORT_ATOMIC) != 0);
  extras.on_demand_paging = on_demand;
  extras.relaxed_ordering = device_direct ? relaxed_ordering_ : relaxed_ordering_host_;
  extras.iwarp = probe_.iwarp;
  return extras;
}

Status VerbsNic::check_odp_access(uint64_t access) const {
  uint32_t needed = 0;
  if (access & HMR_SEND) needed |= IBV_ODP_SUPPORT_SEND;
  if (access & HMR_RECV) needed |= IBV_ODP_SUPPORT_RECV;
  if (access & HMR_REMOTE_WRITE) needed |= IBV_ODP_SUPPORT_WRITE;
  if (access & HMR_REMOTE_READ) needed |= IBV_ODP_SUPPORT_READ;
  const uint32_t missing = needed & ~probe_.odp_rc_caps;
  if (missing != 0) {
    return make_error(HMR_EOPNOTSUPP,
                      "on-demand paging registration with access %#llx needs RC ODP support for "
                      "%s, which %s lacks (it has: %s)",
                      static_cast<ull>(access), odp_transport_names(missing).c_str(),
                      probe_.name.c_str(), odp_transport_names(probe_.odp_rc_caps).c_str());
  }
  return ok_status();
}

Status VerbsNic::check_device_memory(const nic::RegistrationRequest& request) const {
  const bool device_memory =
      request.iface != HMR_HMEM_SYSTEM && (request.flags & HMR_HMEM_HOST_ALLOC) == 0;
  if (!device_memory || request.iface != HMR_HMEM_CUDA || probe_.peer_direct.supported) {
    return ok_status();
  }
  return make_error(HMR_EOPNOTSUPP,
                    "CUDA device memory [%p, +%zu) cannot be registered by virtual address on "
                    "%s: %s",
                    request.segments[0].iov_base, request.segments[0].iov_len,
                    probe_.name.c_str(), probe_.peer_direct.reason.c_str());
}

Status VerbsNic::check_chunking(const nic::RegistrationRequest& request,
                                const VerbsRegistration::Layout& layout, size_t chunks) const {
  if (chunks == 1) return ok_status();
  const bool remote = (request.access & kRemoteAccess) != 0;
  if (options_.raw_keys && chunks > kMaxRawKeyChunks) {
    return make_error(HMR_EINVAL,
                      "[%#llx, +%llu) needs %zu chunks of %llu bytes (max_mr_size of %s is "
                      "%llu); a RAW key carries %zu: register at most %llu bytes per MR",
                      static_cast<ull>(layout.start), static_cast<ull>(layout.length), chunks,
                      static_cast<ull>(chunk_len_), probe_.name.c_str(),
                      static_cast<ull>(probe_.max_mr_size), kMaxRawKeyChunks,
                      static_cast<ull>(chunk_len_ * kMaxRawKeyChunks));
  }
  if (!options_.raw_keys && remote) {
    return make_error(HMR_EINVAL,
                      "[%#llx, +%llu) is larger than the max_mr_size of %s (%llu), so it is "
                      "registered as %zu chunks with a key each, and a 4-byte key names one: "
                      "open the domain with HMR_MR_RAW and nic_options raw_keys=on (up to %zu "
                      "chunks), register at most %llu bytes per MR, or ask for local access only",
                      static_cast<ull>(layout.start), static_cast<ull>(layout.length),
                      probe_.name.c_str(), static_cast<ull>(probe_.max_mr_size), chunks,
                      kMaxRawKeyChunks, static_cast<ull>(chunk_len_));
  }
  if (chunks > kMaxLocalChunks) {
    return make_error(HMR_EINVAL, "[%#llx, +%llu) would need %zu chunks (at most %zu)",
                      static_cast<ull>(layout.start), static_cast<ull>(layout.length), chunks,
                      kMaxLocalChunks);
  }
  return ok_status();
}

Result<ibv_mr*> VerbsNic::register_chunk(const nic::RegistrationRequest& request,
                                         const VerbsRegistration::Layout& layout,
                                         const Chunk& chunk) {
  const IbverbsSymbols& verbs = library_->symbols();
  const uint64_t iova = layout.iova + chunk.offset;
  ibv_mr* mr = nullptr;
  errno = 0;
  if (layout.dmabuf) {
    mr = verbs.reg_dmabuf_mr(device_.pd(), request.dmabuf->offset + chunk.offset, chunk.length,
                             iova, request.dmabuf->fd, static_cast<int>(layout.ibv_access));
    if (mr != nullptr) return mr;
    return verbs_failure(errno,
                         "ibv_reg_dmabuf_mr(fd %d, offset %llu, %llu bytes, access %#x) on %s "
                         "failed",
                         request.dmabuf->fd,
                         static_cast<ull>(request.dmabuf->offset + chunk.offset),
                         static_cast<ull>(chunk.length), layout.ibv_access, probe_.name.c_str());
  }
  auto* addr = reinterpret_cast<void*>(static_cast<uintptr_t>(layout.start + chunk.offset));
  const bool through_iova2 = verbs.reg_mr_iova2 != nullptr;
  mr = through_iova2 ? verbs.reg_mr_iova2(device_.pd(), addr, chunk.length, iova, layout.ibv_access)
                     : verbs.reg_mr(device_.pd(), addr, chunk.length,
                                    static_cast<int>(layout.ibv_access));
  if (mr != nullptr) return mr;
  const int err = errno;
  const bool device_memory =
      request.iface != HMR_HMEM_SYSTEM && (request.flags & HMR_HMEM_HOST_ALLOC) == 0;
  return verbs_failure(err, "%s([%p, +%llu), access %#x) on %s failed%s",
                       through_iova2 ? "ibv_reg_mr_iova2" : "ibv_reg_mr", addr,
                       static_cast<ull>(chunk.length), layout.ibv_access, probe_.name.c_str(),
                       device_memory ? " (device memory by virtual address needs its vendor's "
                                       "peer-memory client; register a dma-buf instead)"
                                     : "");
}

// Pinning is what makes a huge registration slow, and the kernel pins separate MRs
// independently, so the chunks go to the registration pool at once.  They are added to the
// record in address order (their keys are published in that order); if any failed, the record
// still takes those that were made, and deregisters them when it is dropped.
Status VerbsNic::register_chunks_in_parallel(const nic::RegistrationRequest& request,
                                             const VerbsRegistration::Layout& layout,
                                             const std::vector<Chunk>& chunks,
                                             VerbsRegistration& record) {
  std::vector<ibv_mr*> made(chunks.size(), nullptr);
  std::vector<core::ThreadPool::Task> tasks;
  tasks.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    tasks.push_back([&, i]() -> Status {
      Result<ibv_mr*> mr = register_chunk(request, layout, chunks[i]);
      if (!mr.ok()) return mr.status();
      made[i] = *mr;
      return ok_status();
    });
  }
  const Status status =
      core::ThreadPool::registration_pool(request.parallelism).run_batch(tasks);
  for (ibv_mr* mr : made) {
    if (mr != nullptr) record.add_chunk(mr);
  }
  return status;
}

KeyBytes VerbsNic::key_of(std::span<const uint32_t> rkeys) const {
  if (options_.raw_keys) return encode_raw_key(rkeys, chunk_len_);
  return KeyBytes::from_u64(rkeys.empty() ? 0 : rkeys[0], sizeof(uint32_t));
}

nic::Registration VerbsNic::describe(VerbsRegistration& record) const {
  std::vector<uint32_t> rkeys;
  for (size_t i = 0; i < record.chunk_count(); ++i) rkeys.push_back(record.chunk(i)->rkey);
  nic::Registration registration;
  registration.handle = &record;
  registration.desc = record.desc();
  registration.key = key_of(rkeys);
  registration.base_addr = record.layout().iova;
  return registration;
}

Result<nic::Registration> VerbsNic::register_memory(const nic::RegistrationRequest& request) {
  if (request.requested_key) {
    return make_error(HMR_EINVAL, "requested key %#llx: verbs keys are chosen by the device "
                      "(HMR_MR_PROV_KEY)", static_cast<ull>(*request.requested_key));
  }
  if (request.track_page_changes) {
    return make_error(HMR_EOPNOTSUPP, "verbs registrations are not refreshed page by page "
                      "(HMR_MR_MMU_NOTIFY); use odp=on for memory that changes");
  }
  if ((request.flags & ~kKnownFlags) != 0) {
    return make_error(HMR_EBADFLAGS, "registration flags %#llx are not supported by the verbs NIC",
                      static_cast<ull>(request.flags & ~kKnownFlags));
  }
  VerbsRegistration::Layout layout;
  if (request.dmabuf != nullptr) {
    if (!probe_.dmabuf.supported) {
      return make_error(HMR_EOPNOTSUPP, "dma-buf registration on %s: %s", probe_.name.c_str(),
                        probe_.dmabuf.reason.c_str());
    }
    layout.start = reinterpret_cast<uintptr_t>(request.dmabuf->base_addr);
    layout.length = request.dmabuf->len;
    layout.dmabuf = true;
  } else {
    if (request.segments.size() != 1) {
      return make_error(HMR_EINVAL, "the verbs NIC registers one range per MR (iov_limit 1), "
                        "got %zu", request.segments.size());
    }
    HMR_RETURN_IF_ERROR(check_device_memory(request));
    layout.start = reinterpret_cast<uintptr_t>(request.segments[0].iov_base);
    layout.length = request.segments[0].iov_len;
  }
  if (layout.length == 0) {  // (what ib_umem_get answers for no pages, without asking it)
    return make_error(HMR_EINVAL, "%s cannot register 0 bytes: the kernel refuses a registration "
                      "of no pages (ib_umem_get, EINVAL)", probe_.name.c_str());
  }
  // On-demand paging is for the CPU's own pages.  The kernel's dma-buf method takes no
  // IBV_ACCESS_ON_DEMAND (uverbs_std_types_mr.c: EINVAL), and peer-memory clients, which serve
  // device memory by virtual address, do not serve ODP faults; so odp=on, like libfabric's
  // verbs provider, applies to system memory only, and HMR_MR_ODP on anything else is refused.
  const bool system_memory = request.dmabuf == nullptr && request.iface == HMR_HMEM_SYSTEM;
  const bool on_demand = request.on_demand_paging || (options_.odp && system_memory);
  if (request.on_demand_paging) {
    const nic::Support& odp = capabilities_.operations.odp;
    if (!odp.available) return make_error(HMR_ENOSYS, "%s", odp.reason.c_str());
    if (request.dmabuf != nullptr) {
      return make_error(HMR_EINVAL, "a dma-buf registration cannot be on-demand paging (the "
                        "kernel's dma-buf method takes no IBV_ACCESS_ON_DEMAND)");
    }
    if (!system_memory) {
      return make_error(HMR_EOPNOTSUPP, "on-demand paging of %s memory: the NIC pages only "
                        "the CPU's own memory (peer-memory clients do not serve ODP faults); "
                        "register it without HMR_MR_ODP", hmem::iface_name(request.iface));
    }
    if (layout.start == 0 && layout.length == SIZE_MAX) return register_implicit(request);
  }
  if (layout.dmabuf && (request.access & HMR_MW_BIND) != 0) {
    return make_error(HMR_EOPNOTSUPP, "HMR_MW_BIND on a dma-buf registration: the kernel's "
                      "dma-buf method takes no IBV_ACCESS_MW_BIND (EINVAL), so no window can be "
                      "bound to it; bind windows to MRs of host memory");
  }
  if (!request.virt_addr && !probe_.offset_addressing.supported) {
    return make_error(HMR_EOPNOTSUPP, "offset addressing (no HMR_MR_VIRT_ADDR): %s",
                      probe_.offset_addressing.reason.c_str());
  }
  if (on_demand) HMR_RETURN_IF_ERROR(check_odp_access(request.access));
  Result<uint64_t> iova = iova_for(request, layout);
  if (!iova.ok()) return iova.status();
  layout.iova = *iova;
  layout.chunk_len = chunk_len_;
  // Relaxed ordering under `auto` is for device memory reached directly only (dma-buf and
  // peer-direct: DEVICE_ONLY): a runtime's pinned host memory (cudaHostAlloc, registered by
  // address with its iface and HOST_ALLOC) and managed memory are polled by the CPU as host
  // memory is, and got it (found by a review).
  const bool device_direct =
      request.dmabuf != nullptr || (request.flags & HMR_HMEM_DEVICE_ONLY) != 0;
  layout.ibv_access = ibv_access_for(request.access, access_extras(on_demand, device_direct));

  const std::vector<Chunk> chunks = plan_chunks(layout.length, chunk_len_);
  HMR_RETURN_IF_ERROR(check_chunking(request, layout, chunks.size()));
  auto record = std::make_unique<VerbsRegistration>(library_->symbols(), layout);
  record->reserve_chunks(chunks.size());
  if (chunks.size() > 1 && request.parallelism > 1) {
    HMR_RETURN_IF_ERROR(register_chunks_in_parallel(request, layout, chunks, *record));
  } else {
    for (const Chunk& chunk : chunks) {
      Result<ibv_mr*> mr = register_chunk(request, layout, chunk);
      if (!mr.ok()) return mr.status();  // the record deregisters the chunks made so far
      record->add_chunk(*mr);
    }
  }
  nic::Registration registration = describe(*record);
  record.release();  // owned by the registration's handle until deregister
  return registration;
}

// The kernel keeps a registration's offset within its page: ib_uverbs_reg_mr
// (drivers/infiniband/core/uverbs_cmd.c) refuses a start and an iova whose offsets within a
// page differ, and the dma-buf method (uverbs_std_types_mr.c) a dma-buf offset and an iova.
// So an offset-addressed registration begins at that in-page offset, not at 0, and peers
// learn it as the MR's base (hmr_mr_raw_attr, packed rkeys): docs/api.md, "The verbs NIC".
Result<uint64_t> VerbsNic::iova_for(const nic::RegistrationRequest& request,
                                    const VerbsRegistration::Layout& layout) const {
  const uint64_t in_page_mask = hmem::host_page_size() - 1;
  const uint64_t kernel_side = layout.dmabuf ? request.dmabuf->offset : layout.start;
  const uint64_t iova = request.virt_addr ? layout.start : (kernel_side & in_page_mask);
  if (((iova ^ kernel_side) & in_page_mask) != 0) {
    return make_error(HMR_EINVAL, "dma-buf offset %llu and address %#llx lie at different "
                      "offsets within a page, which the kernel refuses for a registration "
                      "(ibv_reg_dmabuf_mr, EINVAL): give the dma-buf's base_addr the offset's "
                      "page alignment", static_cast<ull>(kernel_side), static_cast<ull>(iova));
  }
  return iova;
}

// One ODP registration of the whole address space: ibv_reg_mr(pd, NULL, SIZE_MAX, ...).  Never
// chunked: the device translates every page on demand, so its max_mr_size does not apply.
Result<nic::Registration> VerbsNic::register_implicit(const nic::RegistrationRequest& request) {
  const nic::Support& implicit = capabilities_.operations.implicit_odp;
  if (!implicit.available) return make_error(HMR_ENOSYS, "%s", implicit.reason.c_str());
  if (!request.virt_addr) {
    return make_error(HMR_EINVAL, "an implicit ODP registration is addressed by virtual address "
                      "(the domain needs HMR_MR_VIRT_ADDR)");
  }
  HMR_RETURN_IF_ERROR(check_odp_access(request.access));
  VerbsRegistration::Layout layout;
  layout.start = 0;
  layout.length = SIZE_MAX;
  layout.iova = 0;
  layout.chunk_len = SIZE_MAX;
  // The whole address space is the CPU's own memory: the host rules apply.
  layout.ibv_access = ibv_access_for(request.access,
                                     access_extras(/*on_demand=*/true, /*device_direct=*/false));
  // Through ibv_reg_mr_iova2 where there is one, as every other registration: it drops the
  // optional access bits (relaxed ordering) a kernel lacks, where the exported ibv_reg_mr of
  // rdma-core 28-31 passed them as given (it goes through iova2 only from rdma-core 32).
  const IbverbsSymbols& verbs = library_->symbols();
  // The record first: made after the MR, its allocation could fail with the MR made.
  auto record = std::make_unique<VerbsRegistration>(library_->symbols(), layout);
  record->reserve_chunks(1);
  errno = 0;
  const unsigned int access = layout.ibv_access;
  ibv_mr* mr = verbs.reg_mr_iova2 != nullptr
                   ? verbs.reg_mr_iova2(device_.pd(), nullptr, SIZE_MAX, 0, access)
                   : verbs.reg_mr(device_.pd(), nullptr, SIZE_MAX, static_cast<int>(access));
  if (mr == nullptr) {
    return verbs_failure(errno, "implicit ODP %s(NULL, SIZE_MAX, access %#x) on %s failed",
                         verbs.reg_mr_iova2 != nullptr ? "ibv_reg_mr_iova2" : "ibv_reg_mr",
                         layout.ibv_access, probe_.name.c_str());
  }
  record->add_chunk(mr);
  nic::Registration registration = describe(*record);
  record.release();  // owned by the registration's handle until deregister
  return registration;
}

Status VerbsNic::deregister(nic::Registration& registration) {
  VerbsRegistration* record = record_of(registration);
  if (record == nullptr) return make_error(HMR_EINVAL, "not a verbs registration");
  Status status = record->deregister_all();
  registration.handle = nullptr;
  registration.desc = nullptr;
  if (status.ok()) {
    delete record;
    return ok_status();
  }
  // Dropped by hmr all the same: kept for close_native() to try again (the record held what
  // the NIC kept, and was leaked with it).
  try {
    std::lock_guard<std::mutex> lock(abandoned_mutex_);
    abandoned_.emplace_back(record);
  } catch (const std::bad_alloc&) {
    delete record;  // (its destructor tries once more, and logs what stays on the NIC)
  }
  return status;
}

Status VerbsNic::rereg(nic::Registration& registration, const nic::ReregRequest& request) {
  VerbsRegistration* record = record_of(registration);
  if (record == nullptr) return make_error(HMR_EINVAL, "not a verbs registration");
  if (record->unusable()) {
    return make_error(HMR_EIO, "an earlier re-registration left this registration unusable; "
                      "close it");
  }
  if (record->indirect()) {
    return make_error(HMR_EINVAL, "an indirect key is not re-registered: close it and build "
                      "another");
  }
  const VerbsRegistration::Layout& old_layout = record->layout();
  if (record->chunk_count() != 1) {
    return make_error(HMR_EOPNOTSUPP, "a registration split into %zu chunks cannot be "
                      "re-registered; close it and register again", record->chunk_count());
  }
  if (old_layout.dmabuf) {
    return make_error(HMR_EOPNOTSUPP, "a dma-buf registration cannot be re-registered "
                      "(ibv_rereg_mr takes virtual ranges); close it and register again");
  }
  VerbsRegistration::Layout layout = old_layout;
  int flags = 0;
  void* addr = nullptr;
  size_t length = 0;
  ibv_pd* pd = nullptr;
  unsigned int access = 0;
  if (!request.translation.empty()) {
    if (request.translation.size() != 1) {
      return make_error(HMR_EINVAL, "ibv_rereg_mr takes one range, got %zu",
                        request.translation.size());
    }
    const iovec& range = request.translation[0];
    if (range.iov_base == nullptr || range.iov_len == 0) {
      return make_error(HMR_EINVAL, "re-registration translation [%p, +%zu) is empty",
                        range.iov_base, range.iov_len);
    }
    if (range.iov_len > chunk_len_) {
      return make_error(HMR_EINVAL, "re-registration to %zu bytes exceeds the max_mr_size of %s "
                        "(%llu); close it and register again", range.iov_len,
                        probe_.name.c_str(), static_cast<ull>(probe_.max_mr_size));
    }
    if (old_layout.iova != old_layout.start) {
      return make_error(HMR_EOPNOTSUPP, "ibv_rereg_mr gives a new translation its virtual "
                        "address as iova, which would change how peers address this "
                        "offset-addressed registration; close it and register again");
    }
    flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
    addr = range.iov_base;
    length = range.iov_len;
    layout.start = layout.iova = reinterpret_cast<uintptr_t>(range.iov_base);
    layout.length = range.iov_len;
  }
  if (request.protection_domain != nullptr) {
    pd = static_cast<ibv_pd*>(request.protection_domain);
    if (pd->context != device_.context()) {
      return make_error(HMR_EINVAL, "the new protection domain %p belongs to another device "
                        "context than %s", request.protection_domain, probe_.name.c_str());
    }
    flags |= IBV_REREG_MR_CHANGE_PD;
  }
  if (request.access) {
    const bool on_demand = (old_layout.ibv_access & IBV_ACCESS_ON_DEMAND) != 0;
    if (on_demand) HMR_RETURN_IF_ERROR(check_odp_access(*request.access));
    AccessExtras extras = access_extras(on_demand, /*device_direct=*/false);
    // ibv_rereg_mr passes access bits as given: unlike ibv_reg_mr_iova2 it does not drop the
    // optional ones a kernel lacks, and such a kernel refuses them (EINVAL).
    extras.relaxed_ordering = false;
    access = ibv_access_for(*request.access, extras);
    layout.ibv_access = access;
    flags |= IBV_REREG_MR_CHANGE_ACCESS;
  }
  if (flags == 0) {
    return make_error(HMR_EINVAL, "re-registration changes nothing: give a translation, a "
                      "protection domain or access");
  }
  ibv_mr* mr = record->chunk(0);
  errno = 0;
  const int result = library_->symbols().rereg_mr(mr, flags, pd, addr, length,
                                                  static_cast<int>(access));
  const int err = errno;
  if (result == 0 || result == IBV_REREG_MR_ERR_DO_FORK_OLD) {
    if (result != 0) {
      log_message(LogLevel::warn, "ibv_rereg_mr on %s succeeded but could not restore fork "
                  "protection of the old range: %s", probe_.name.c_str(), std::strerror(err));
    }
    record->set_layout(layout);
    const uint32_t rkey = mr->rkey;
    registration.key = key_of({&rkey, 1});
    registration.base_addr = layout.iova;
    return ok_status();
  }
  // Memory pinned read-only cannot be made writable in place: kernels with
  // ib_umem_check_rereg (drivers/infiniband/core/umem.c, upstream commit badad6fad60d, June
  // 2026) refuse it with EACCES, which mlx5, mlx4, hns, irdma and rxe check before they change
  // anything.  hmr does not re-pin on its own (a new translation may revoke the MR, change its
  // key, or on mlx4 and hns destroy it when the pin fails): the caller may give the range.
  if (err == EACCES && (flags & IBV_REREG_MR_CHANGE_ACCESS) &&
      !(flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
    return verbs_failure(err, "ibv_rereg_mr(flags %#x) on %s: the pages were pinned read-only, "
                         "and the kernel does not make them writable in place; the "
                         "registration is unchanged (give its range again as a new "
                         "translation to pin it for writing, or close it and register again)",
                         static_cast<unsigned>(flags), probe_.name.c_str());
  }
  // EOPNOTSUPP is answered before anything changes, whatever the result code: by libibverbs'
  // dummy op of a provider without rereg_mr (IBV_REREG_MR_ERR_INPUT), or by the kernel's flag
  // check (ib_uverbs_rereg_mr) before it touches the MR (IBV_REREG_MR_ERR_CMD).
  if (result == IBV_REREG_MR_ERR_INPUT || result == IBV_REREG_MR_ERR_DONT_FORK_NEW ||
      err == EOPNOTSUPP) {
    return verbs_failure(err, "ibv_rereg_mr(flags %#x) on %s failed (result %d); the "
                         "registration is unchanged", static_cast<unsigned>(flags),
                         probe_.name.c_str(), result);
  }
  record->mark_unusable();
  return verbs_failure(err, "ibv_rereg_mr(flags %#x) on %s failed (result %d) and left the "
                       "registration usable only for deregistration; close it",
                       static_cast<unsigned>(flags), probe_.name.c_str(), result);
}

bool VerbsNic::usable_after_failed_rereg(const nic::Registration& registration) const {
  const VerbsRegistration* record = record_of(registration);
  return record != nullptr && !record->unusable();
}

Result<nic::MemoryWindow> VerbsNic::alloc_window(nic::WindowType type) {
  const Support& support =
      type == nic::WindowType::type2 ? probe_.window_type2 : probe_.window_type1;
  if (type != nic::WindowType::type1 && type != nic::WindowType::type2) {
    return make_error(HMR_EINVAL, "memory window type %d: use 1 or 2", static_cast<int>(type));
  }
  if (!support.supported) {
    return make_error(HMR_ENOSYS, "memory windows of type %d on %s: %s",
                      static_cast<int>(type), probe_.name.c_str(), support.reason.c_str());
  }
  Result<std::unique_ptr<VerbsWindow>> window =
      VerbsWindow::allocate(device_.pd(), type, probe_.name);
  if (!window.ok()) return window.status();
  nic::MemoryWindow result;
  result.type = type;
  const uint32_t rkey = (*window)->rkey();
  result.key = key_of({&rkey, 1});
  result.handle = window->release();
  return result;
}

Status VerbsNic::bind_window(nic::MemoryWindow& window, const nic::WindowBind& bind) {
  auto* verbs_window = static_cast<VerbsWindow*>(window.handle);
  if (verbs_window == nullptr || bind.registration == nullptr ||
      record_of(*bind.registration) == nullptr) {
    return make_error(HMR_EINVAL, "binding needs a memory window and a registration of this NIC");
  }
  if (record_of(*bind.registration)->indirect()) {
    return make_error(HMR_EINVAL, "a memory window is bound to an MR, not to an indirect key");
  }
  // libmlx5 builds a bind from KLM entries of at most 2 GiB (providers/mlx5/qp.c, set_bind_wr:
  // EOPNOTSUPP above it).
  constexpr uint64_t kMlx5MaxBind = uint64_t{1} << 31;
  if (probe_.mellanox() && bind.len > kMlx5MaxBind) {
    return make_error(HMR_EOPNOTSUPP, "a memory window of %llu bytes on %s: mlx5 binds at most "
                      "2 GiB (libmlx5 set_bind_wr); bind several windows",
                      static_cast<ull>(bind.len), probe_.name.c_str());
  }
  HMR_RETURN_IF_ERROR(verbs_window->bind(*record_of(*bind.registration), bind));
  const uint32_t rkey = verbs_window->rkey();
  window.key = key_of({&rkey, 1});
  return ok_status();
}

Status VerbsNic::invalidate_window(nic::MemoryWindow& window, void* queue,
                                   uint64_t work_request_id, bool signaled) {
  auto* verbs_window = static_cast<VerbsWindow*>(window.handle);
  if (verbs_window == nullptr) return make_error(HMR_EINVAL, "not a memory window of this NIC");
  return verbs_window->invalidate(queue, work_request_id, signaled);
}

Status VerbsNic::dealloc_window(nic::MemoryWindow& window) {
  auto* verbs_window = static_cast<VerbsWindow*>(window.handle);
  if (verbs_window == nullptr) return make_error(HMR_EINVAL, "not a memory window of this NIC");
  HMR_RETURN_IF_ERROR(verbs_window->deallocate());
  delete verbs_window;
  window.handle = nullptr;
  return ok_status();
}

Status VerbsNic::advise(const nic::Registration& registration, nic::Advice advice,
                        std::span<const iovec> ranges, bool flush) {
  const VerbsRegistration* record = record_of(registration);
  if (record == nullptr) return make_error(HMR_EINVAL, "not a verbs registration");
  if (record->indirect()) {
    return make_error(HMR_EINVAL, "advise the MRs an indirect key lies in, not the key");
  }
  const VerbsRegistration::Layout& layout = record->layout();
  if ((layout.ibv_access & IBV_ACCESS_ON_DEMAND) == 0) {
    return make_error(HMR_EINVAL, "prefetch advice needs an on-demand-paging registration (open "
                      "the verbs NIC with odp=on)");
  }
  if (ranges.empty()) return make_error(HMR_EINVAL, "prefetch advice needs at least one range");
  std::vector<ibv_sge> sges;
  for (const iovec& range : ranges) {
    const uint64_t start = reinterpret_cast<uintptr_t>(range.iov_base);
    if (!record->contains(start, range.iov_len)) {
      return make_error(HMR_EINVAL, "advice range [%p, +%zu) is not inside the registration "
                        "[%#llx, +%llu)", range.iov_base, range.iov_len,
                        static_cast<ull>(layout.start), static_cast<ull>(layout.length));
    }
    record->append_entries(start, range.iov_len, kMaxAdviceSge, sges);
  }
  const uint32_t flags = flush ? IBV_ADVISE_MR_FLAG_FLUSH : 0;
  if (const int err = advise_mr(record->chunk(0)->pd, to_ibv_advice(advice), flags, sges.data(),
                                static_cast<uint32_t>(sges.size()));
      err != 0) {
    return verbs_failure(err, "ibv_advise_mr(%zu ranges) on %s failed", sges.size(),
                         probe_.name.c_str());
  }
  return ok_status();
}

Result<UmrQueue*> VerbsNic::umr_queue() {
  std::lock_guard<std::mutex> lock(umr_mutex_);
  if (umr_ == nullptr) {
    Result<std::unique_ptr<UmrQueue>> created =
        UmrQueue::create(library_, mlx5_.library, device_.context(), device_.pd(), probe_.name);
    if (!created.ok()) return created.status();
    umr_ = std::move(*created);
  }
  return umr_.get();
}

// The KLM list names each segment by the lkey of the chunk it lies in and its address as that
// MR is addressed; the mkey then addresses the segments' bytes from 0, in order.
Result<nic::Registration> VerbsNic::register_indirect(
    std::span<const nic::IndirectSegment> segments, uint64_t access) {
  const nic::Support& support = capabilities_.operations.indirect;
  if (!support.available) return make_error(HMR_ENOSYS, "%s", support.reason.c_str());
  std::vector<ibv_sge> entries;
  uint64_t length = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const nic::IndirectSegment& segment = segments[i];
    const VerbsRegistration* record =
        segment.registration != nullptr ? record_of(*segment.registration) : nullptr;
    if (record == nullptr) {
      return make_error(HMR_EINVAL, "indirect segment %zu: not a verbs registration", i);
    }
    if (record->indirect()) {
      return make_error(HMR_EINVAL, "indirect segment %zu: an indirect key cannot be a segment "
                        "of another", i);
    }
    if (record->unusable()) {
      return make_error(HMR_EIO, "indirect segment %zu: its registration failed to "
                        "re-register; close it", i);
    }
    if (!record->contains(segment.addr, segment.len)) {
      return make_error(HMR_EINVAL, "indirect segment %zu: [%#llx, +%llu) is not inside its "
                        "registration", i, static_cast<ull>(segment.addr),
                        static_cast<ull>(segment.len));
    }
    // The mkey is made in hmr's PD, and a UMR reaches only MRs of its own PD (the device fails
    // the UMR, and the queue must be reset): an MR a re-registration moved to another PD is
    // refused here, as a window's bind refuses it.  (All chunks of a registration are in one PD.)
    if (record->chunk_count() != 0 && record->chunk(0)->pd != device_.pd()) {
      return make_error(HMR_EINVAL, "indirect segment %zu: its registration is in another "
                        "protection domain than hmr's (moved by a re-registration, "
                        "HMR_MR_REREG_PD): an indirect key reaches MRs of hmr's PD only", i);
    }
    if (__builtin_add_overflow(length, segment.len, &length) || length > kMaxIndirectLength) {
      return make_error(HMR_EINVAL, "the indirect key's segments add up to 2 GiB or more; "
                        "libmlx5 before rdma-core 61 sums a UMR's lengths in an int "
                        "(umr_sg_list_create), so the key would get a wrong length (4 GiB "
                        "gives 0), and hmr cannot tell the version: build keys of less than "
                        "2 GiB");
    }
    record->append_entries(segment.addr, segment.len, kMaxKlmEntry, entries);
  }
  if (entries.size() > UmrQueue::kMaxEntries) {
    return make_error(HMR_EINVAL, "the segments need %zu KLM entries (one per piece within a "
                      "chunk, at most %llu bytes each); one UMR of hmr's queue carries at most "
                      "%u", entries.size(), static_cast<ull>(kMaxKlmEntry),
                      UmrQueue::kMaxEntries);
  }
  // The mkey only points at MRs: they page, or not.
  AccessExtras extras = access_extras(/*on_demand=*/false, /*device_direct=*/true);
  extras.relaxed_ordering = false;
  const unsigned int ibv_access = ibv_access_for(access, extras);

  Result<UmrQueue*> queue = umr_queue();
  if (!queue.ok()) return queue.status();
  Result<std::unique_ptr<IndirectMkey>> mkey =
      IndirectMkey::create(mlx5_.library, device_.pd(), static_cast<uint16_t>(entries.size()),
                           length, probe_.name);
  if (!mkey.ok()) return mkey.status();
  HMR_RETURN_IF_ERROR((*queue)->fill((*mkey)->mkey(), ibv_access, entries));

  VerbsRegistration::Layout layout;
  layout.start = 0;
  layout.length = length;
  layout.iova = 0;
  layout.chunk_len = length;
  layout.ibv_access = ibv_access;
  auto record = std::make_unique<VerbsRegistration>(library_->symbols(), layout);
  record->set_indirect(std::move(*mkey));
  const uint32_t rkey = record->first_rkey();
  nic::Registration registration;
  registration.handle = record.get();
  registration.desc = record->desc();
  registration.key = key_of({&rkey, 1});
  registration.base_addr = 0;
  record.release();  // owned by the registration's handle until deregister
  return registration;
}

}  // namespace hmr::verbs
