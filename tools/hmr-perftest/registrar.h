// How hmr-perftest registers a buffer under each --reg mode: through hmr layered on the
// tool's own libfabric domain (the way a transport adopts hmr), or, for the raw baseline,
// with fi_mr_reg directly.
#pragma once

#include <hmr/hmr.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fabric.h"
#include "options.h"

namespace hmr::perftest {

// One registration, whichever way it was made.  It owns what it registered and gives it back
// (hmr_mr_close, or fi_close for the raw baseline) when it goes, so an error path that returns
// early leaks nothing: before, every early return of the client left its registrations open,
// and its hmr domains with them (hmr_domain_close refuses a domain with MRs open).  Moved, not
// copied; it must go before the Registrar (the hmr domain) it came from.
class Registered {
 public:
  // Gives the registration back now (nothing, if it holds none).
  void reset() {
    mr.reset();
    raw_mr.reset();
  }

  // The local buffer transfers use: the memory itself, or hmr's host shadow of device memory
  // the NIC cannot reach (which then needs hmr_mr_sync around transfers).
  void* local = nullptr;
  bool shadow = false;
  void* desc = nullptr;
  uint64_t key = 0;
  std::vector<uint8_t> raw_key;  // when the provider uses FI_MR_RAW
  uint64_t base = 0;             // what a peer uses as the address of byte 0 (VA or 0)
  struct CloseMr {
    void operator()(hmr_mr* handle) const { (void)hmr_mr_close(handle); }
  };
  struct CloseRawMr {
    void operator()(fid_mr* handle) const { Fabric::close_mr(handle); }
  };
  std::unique_ptr<hmr_mr, CloseMr> mr;
  std::unique_ptr<fid_mr, CloseRawMr> raw_mr;
};

class Registrar {
 public:
  // For the hmr modes, opens an hmr domain on `fabric`'s libfabric domain ("ofi" adapter);
  // per-iter turns hmr's cache off so every registration reaches the provider.
  // `dmabuf`: device memory must reach the NIC as a dma-buf (no shadow, no other path).
  static std::optional<Registrar> open(Fabric& fabric, RegMode mode, bool dmabuf,
                                       std::string* why);

  Registrar(Registrar&& other) noexcept;
  Registrar& operator=(Registrar&&) = delete;
  ~Registrar();

  RegMode mode() const { return mode_; }
  std::optional<Registered> reg(void* buf, size_t len, uint64_t access, std::string* why);
  // Host shadows only (a no-op otherwise): device -> shadow before the NIC reads it, or
  // shadow -> device after the NIC wrote it.
  bool sync(const Registered& registered, size_t len, bool to_device, std::string* why);
  // hmr's statistics for this mode (zeros for raw).
  hmr_domain_stats stats() const;

 private:
  Registrar(Fabric& fabric, RegMode mode) : fabric_(&fabric), mode_(mode) {}

  Fabric* fabric_;
  RegMode mode_;
  hmr_domain* domain_ = nullptr;
  uint64_t mr_mode_ = 0;   // what the provider requires
  bool dmabuf_ = false;
};

}  // namespace hmr::perftest
