// The application side of the ofi adapter tests: libfabric objects a transport would open
// itself (fabric, domain, endpoints, completion queues), used exactly as such a transport
// uses them — RMA with descriptors and keys that come from hmr — so the tests prove that
// what hmr registered is what the provider serves.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace hmr_ofi_test {

// "tcp" runs over the loopback interface (domain "lo", 127.0.0.1); "shm" is shared memory.
struct ProviderChoice {
  const char* provider;       // hints->fabric_attr->prov_name
  const char* domain_name;    // picked among fi_getinfo's answers; nullptr: the first
  const char* fabric_name;
  uint64_t mode_hints;        // hints->domain_attr->mr_mode
};
ProviderChoice tcp_loopback();
ProviderChoice shm_choice(uint64_t mode_hints);

// fi_getinfo's answer for a choice, owned.
struct InfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;
// The (first matching) answer duplicated on its own, or null with a gtest failure.
InfoPtr find_info(const ProviderChoice& choice);

// Closes any libfabric object.
struct FidCloser {
  void operator()(fid* object) const;
};
using FidPtr = std::unique_ptr<fid, FidCloser>;

// A fabric and a domain the test opened, as an application opens its own.
class AppDomain {
 public:
  // `threading`: the level the domain is opened with (fi_domain with the answer's threading
  // set to it, as an application that serializes its calls asks for FI_THREAD_DOMAIN).
  explicit AppDomain(const ProviderChoice& choice, fi_threading threading = FI_THREAD_SAFE);
  ~AppDomain();
  explicit operator bool() const { return domain_ != nullptr; }
  fid_domain* domain() const { return domain_; }
  fid_fabric* fabric() const { return fabric_; }
  const fi_info* info() const { return info_.get(); }
  // "provider=<prov_name>;mr_mode=<mr_mode>;threading=<threading>", what hmr needs to wrap
  // this domain.
  std::string wrap_options() const;

 private:
  InfoPtr info_;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
};

// Two RDM endpoints on one domain (each with its own completion queue, one address vector),
// so an initiator can reach a target through the provider.  Both progress manually: every
// wait polls both queues.
class EndpointPair {
 public:
  EndpointPair(fid_domain* domain, const fi_info* info);
  ~EndpointPair();
  explicit operator bool() const { return ready_; }

  // A completion that has not come after this long means a hang, not a slow machine.
  static constexpr std::chrono::milliseconds kDeadline{20000};
  // How long a write the target should refuse may stay incomplete: shm reports a bad key on
  // neither queue and never completes the write, so "no completion" is its refusal.
  static constexpr std::chrono::milliseconds kRefusalDeadline{1500};

  // fi_write / fi_read from the initiator to the target's (addr, key) and wait for the
  // completion; 0, or the negative libfabric error from the call or either queue, or
  // -FI_ETIMEDOUT when nothing completed within `deadline`.
  int write(const void* buf, size_t len, void* desc, uint64_t addr, uint64_t key,
            std::chrono::milliseconds deadline = kDeadline);
  int read(void* buf, size_t len, void* desc, uint64_t addr, uint64_t key);
  // Text of the last failure, for messages.
  const std::string& last_error() const { return last_error_; }

 private:
  struct Side {
    fid_ep* ep = nullptr;
    fid_cq* cq = nullptr;
    fi_addr_t address = FI_ADDR_UNSPEC;
  };
  bool open_side(fid_domain* domain, const fi_info* info, Side& side);
  int wait_for_completion(ssize_t posted, std::chrono::milliseconds deadline);

  fid_av* av_ = nullptr;
  Side initiator_;
  Side target_;
  bool ready_ = false;
  std::string last_error_;
};

}  // namespace hmr_ofi_test
