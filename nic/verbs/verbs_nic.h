// The verbs NIC adapter: registers memory with an RDMA device through rdma-core's libibverbs,
// dlopen'ed at run time.  It works in the application's protection domain (nic_handle, a
// struct ibv_pd*) or opens a device and a PD of its own (nic_options device=<name>).
//
// At open it probes the device (device_probe.h) and fixes what every registration gets:
// on-demand paging when asked for, relaxed ordering where libibverbs can pass it, memory-window
// binding where the device has windows.  Ranges above the device's max_mr_size are registered
// in chunks (chunk_plan.h); dma-bufs through ibv_reg_dmabuf_mr; CUDA device memory by VA only
// where a peer-memory client is loaded.  Indirect keys are mlx5 UMR keys: on an mlx5 device
// (libmlx5's mlx5dv_is_supported) a device hmr opens is opened with DEVX, and the first
// indirect key creates the adapter's UMR queue (umr_queue.h).
//
// Registrations take no lock: they are independent verb calls, and the state fixed at open is
// read-only afterwards.  Only creating the UMR queue and posting to it are serialised.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nic/nic.h"
#include "nic/verbs/chunk_plan.h"
#include "nic/verbs/device_probe.h"
#include "nic/verbs/ibverbs_library.h"
#include "nic/verbs/mlx5dv_library.h"
#include "nic/verbs/umr_queue.h"
#include "nic/verbs/verbs_access.h"
#include "nic/verbs/verbs_options.h"
#include "nic/verbs/verbs_registration.h"

namespace hmr::verbs {

// What tests change about the machine the adapter looks at.
struct VerbsEnvironment {
  std::string sysfs_root;  // "" for /; where the peer-direct hints are read
};

class VerbsNic final : public nic::Nic {
 public:
  static Result<std::unique_ptr<nic::Nic>> open(const char* options, void* handle,
                                                const VerbsEnvironment& environment = {});
  ~VerbsNic() override;

  const nic::Capabilities& capabilities() const override { return capabilities_; }
  Result<nic::Registration> register_memory(const nic::RegistrationRequest& request) override;
  Status deregister(nic::Registration& registration) override;
  // The PD registrations are made in: the application's, or the one the adapter allocated
  // (for the application's QPs on a device hmr opened).
  void* native_handle() const override { return device_.pd(); }
  // Destroys the UMR queue (a QP on the PD), then deallocates the PD and closes the device
  // hmr opened: HMR_EIO when the application's objects were left on the PD.
  Status close_native() override;
  Status rereg(nic::Registration& registration, const nic::ReregRequest& request) override;
  bool usable_after_failed_rereg(const nic::Registration& registration) const override;
  Result<nic::MemoryWindow> alloc_window(nic::WindowType type) override;
  Status bind_window(nic::MemoryWindow& window, const nic::WindowBind& bind) override;
  Status invalidate_window(nic::MemoryWindow& window, void* queue, uint64_t work_request_id,
                           bool signaled) override;
  Status dealloc_window(nic::MemoryWindow& window) override;
  Status advise(const nic::Registration& registration, nic::Advice advice,
                std::span<const iovec> ranges, bool flush) override;
  Result<nic::Registration> register_indirect(std::span<const nic::IndirectSegment> segments,
                                              uint64_t access) override;

  const DeviceProbe& probe() const { return probe_; }
  const VerbsOptions& options() const { return options_; }
  ibv_pd* pd() const { return device_.pd(); }

 private:
  // libmlx5 as the adapter found it: loaded, or why not; and why a device hmr opened has no
  // DEVX context when mlx5dv_open_device refused it.
  struct Mlx5Access {
    std::shared_ptr<const Mlx5dvLibrary> library;
    std::string unavailable;
    std::string devx_failure;
  };

  VerbsNic(std::shared_ptr<const IbverbsLibrary> library, DeviceHandle device,
           const VerbsOptions& options, DeviceProbe probe, Mlx5Access mlx5);
  // Opens `device` with DEVX where it is an mlx5 device (indirect keys need it), else as usual.
  static Result<DeviceHandle> open_device(const std::shared_ptr<const IbverbsLibrary>& library,
                                          ibv_device* device, Mlx5Access& mlx5);
  Status apply_options();
  // capabilities_.operations from the probe: what this device can do beyond registration.
  void describe_operations();
  nic::Support indirect_support() const;
  // The UMR queue, created by the first indirect key.
  Result<UmrQueue*> umr_queue();
  Result<nic::Registration> register_implicit(const nic::RegistrationRequest& request);
  static void probe_borrowed_devx(const DeviceHandle& device, Mlx5Access& mlx5);
  // The iova of a registration: its virtual address, or, offset-addressed, the in-page offset
  // the kernel keeps (see the definition).
  Result<uint64_t> iova_for(const nic::RegistrationRequest& request,
                            const VerbsRegistration::Layout& layout) const;
  Status register_chunks_in_parallel(const nic::RegistrationRequest& request,
                                    const VerbsRegistration::Layout& layout,
                                    const std::vector<Chunk>& chunks, VerbsRegistration& record);
  Result<ibv_mr*> register_chunk(const nic::RegistrationRequest& request,
                                 const VerbsRegistration::Layout& layout, const Chunk& chunk);
  Status check_chunking(const nic::RegistrationRequest& request,
                        const VerbsRegistration::Layout& layout, size_t chunks) const;
  Status check_odp_access(uint64_t access) const;
  Status check_device_memory(const nic::RegistrationRequest& request) const;
  // The device's extras for a registration that is (or not) on-demand paging, of device
  // memory the NIC reaches directly (dma-buf, peer-direct: relaxed ordering as the device rule
  // allows) or of memory the CPU may poll (the host rule).
  AccessExtras access_extras(bool on_demand, bool device_direct) const;
  KeyBytes key_of(std::span<const uint32_t> rkeys) const;
  nic::Registration describe(VerbsRegistration& record) const;

  // Declared first: destroyed last, after everything that calls into it.
  std::shared_ptr<const IbverbsLibrary> library_;
  DeviceHandle device_;
  VerbsOptions options_;
  DeviceProbe probe_;
  nic::Capabilities capabilities_;
  // Relaxed ordering for device memory (dma-buf, peer-direct) and for host memory: auto gives
  // it to device memory only (see apply_options), on to both, off to neither.
  bool relaxed_ordering_ = false;
  bool relaxed_ordering_host_ = false;
  uint64_t chunk_len_ = 0;
  Mlx5Access mlx5_;
  std::mutex umr_mutex_;  // creating the UMR queue
  std::unique_ptr<UmrQueue> umr_;  // destroyed before the device
  // Registrations whose ibv_dereg_mr failed: hmr drops them and never asks again
  // (NicRegistrar::deregister_memory), so what the NIC kept is tried once more at close,
  // before the PD (which ibv_dealloc_pd will not free while MRs are on it).  Destroyed before
  // the device (a record's destructor tries again too, and logs what stays).
  std::mutex abandoned_mutex_;
  std::vector<std::unique_ptr<VerbsRegistration>> abandoned_;
};

}  // namespace hmr::verbs
