// libfabric, loaded with dlopen the first time the plugin needs it, never linked: a binary
// linked to libfabric pays ~0.2 s in its providers' constructors at start, and NCCL loads
// net plugins into every rank.  Only the handful of entry points libfabric really exports are
// looked up; everything else in its API (fi_domain, fi_endpoint, fi_writedata, fi_cq_read ...)
// is an inline call through the objects' own operation tables.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace hmr::nccl {

struct Libfabric {
  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const fi_info* hints, fi_info** info);
  void (*freeinfo)(fi_info* info);
  fi_info* (*dupinfo)(const fi_info* info);
  int (*fabric)(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
  const char* (*strerror)(int error);
  uint32_t (*version)();

  // The API version to ask for: the headers' or the runtime's, whichever is older (Debian 12's
  // libfabric 1.17 rejects anything newer than itself).
  uint32_t api_version() const;
  // libfabric's text for a (negative or positive) error code.
  std::string describe(int64_t error) const;
};

// Loads libfabric.so.1 (or $HMR_OFI_LIBRARY, the path hmr itself honours, so both use the same
// copy) once per process; nullptr and `why` when it cannot be loaded.
const Libfabric* load_libfabric(std::string* why);

}  // namespace hmr::nccl
