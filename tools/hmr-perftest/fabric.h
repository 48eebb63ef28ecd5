// hmr-perftest's data path: one libfabric RDM endpoint with its completion queue and address
// vector, driven directly, exactly as a transport would.  hmr only registers memory; every
// byte moves through the provider's own fi_write/fi_read.
//
// tcp and shm progress manually: whoever waits (for a completion or for bytes to land) must
// keep reading its CQ, the target included, or nothing moves.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "peer_watch.h"
#include "stuck_call_watchdog.h"

namespace hmr::perftest {

class Fabric {
 public:
  // Opens provider `provider` (e.g. "tcp", "shm", "verbs") for RDM endpoints with RMA.
  static std::optional<Fabric> open(const std::string& provider, std::string* why);

  Fabric(Fabric&& other) noexcept;
  Fabric& operator=(Fabric&&) = delete;
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;
  ~Fabric();

  fid_domain* domain() const { return domain_; }
  uint64_t mr_mode() const;
  size_t mr_key_size() const;
  std::string provider_name() const;
  std::string fabric_version() const;
  std::vector<uint8_t> address() const;  // fi_getname of the endpoint

  // The peer's address, as fi_getname gave it on its side; refused with the reason unless it
  // fits this provider's address format (peer_address.h).
  bool insert_peer(const std::vector<uint8_t>& address, std::string* why);

  // From now on, a data-path call into the provider that lasts `timeout_ms` ends the process
  // (stuck_call_watchdog.h): the waits above cannot end a call that never returns.
  void watch_calls(int timeout_ms, const char* role);
  // The peer's connection, once there is one: a stuck call ends at once when it hangs up.
  void watch_peer(int fd);

  // Posts one RMA operation whose completion carries `context`; retries while the provider
  // says EAGAIN, progressing the CQ meanwhile: completions read then go where poll() puts
  // them (into `done` when given), so none is lost.  A provider may say EAGAIN for ever (a
  // peer that stopped progressing, an address it cannot reach): `watch` ends the retries.
  bool post_write(const void* buf, size_t len, void* desc, uint64_t remote_addr, uint64_t key,
                  void* context, std::vector<void*>* done, PeerWatch& watch, std::string* why);
  bool post_read(void* buf, size_t len, void* desc, uint64_t remote_addr, uint64_t key,
                 void* context, std::vector<void*>* done, PeerWatch& watch, std::string* why);
  // Reads completions once (this is also what progresses a manual-progress provider), adding
  // their contexts to `done` when given, else counting them for wait(); returns how many completed, or -1 with a reason on an
  // error completion.
  int poll(std::vector<void*>* done, std::string* why);
  // Waits until `count` more operations completed (contexts are dropped), or `watch` says
  // the wait is over (no completion within --timeout, or the peer gave up or died).
  bool wait(uint64_t count, PeerWatch& watch, std::string* why);

  // fi_mr_reg without hmr, for the raw baseline; fi_close()d by the caller through close_mr.
  fid_mr* register_raw(void* buf, size_t len, uint64_t access, uint64_t requested_key,
                       std::string* why);
  static void close_mr(fid_mr* mr);
  // Turns a peer's raw key into a u64 key (FI_MR_RAW providers).
  bool map_raw(uint64_t base, const std::vector<uint8_t>& raw, uint64_t* key, std::string* why);

 private:
  Fabric() = default;
  bool post(bool write, void* buf, size_t len, void* desc, uint64_t remote_addr, uint64_t key,
            void* context, std::vector<void*>* done, PeerWatch& watch, std::string* why);
  // poll() once, counting completions as progress for `watch`: false with the reason on an
  // error completion, or once `watch` ends the wait (its reason after "`waiting`: ").
  bool poll_watched(std::vector<void*>* done, PeerWatch& watch, const char* waiting,
                    std::string* why);
  void close_all();

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  uint64_t completed_ = 0;  // completions counted by poll(nullptr) and not yet waited for
  std::unique_ptr<StuckCallWatchdog> watchdog_;
};

}  // namespace hmr::perftest
