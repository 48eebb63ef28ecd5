// Options of the libfabric NIC adapter (hmr_domain_attr.nic_options for nic "ofi").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "util/status.h"

namespace hmr::nic::ofi {

enum class EndpointType { rdm, msg, dgram };

struct OfiOptions {
  // Provider name as libfabric prints it ("tcp", "shm", "tcp;ofi_rxm"); empty: any provider.
  std::string provider;
  EndpointType endpoint_type = EndpointType::rdm;
  // Exact domain_attr->name / fabric_attr->name to pick among fi_getinfo's answers
  // ("lo", "127.0.0.1/32"); empty: the first answer.
  std::string domain;
  std::string fabric;
  // Opening a domain: the mr_mode bits offered in the hints.  Wrapping one: the mr_mode it
  // was opened with (its info->domain_attr->mr_mode).
  std::optional<uint64_t> mr_mode;
  // The domain has (or is to be opened with) the FI_HMEM capability.
  bool hmem = false;
  // Wrapping a domain: the threading level it was opened with (its
  // info->domain_attr->threading, an enum fi_threading value); absent: FI_THREAD_SAFE.
  std::optional<int> threading;
};

// Parses "provider=tcp;ofi_rxm;ep_type=rdm;domain=lo;mr_mode=VIRT_ADDR|PROV_KEY;hmem=1;
// threading=domain".
// A provider name may contain ';' as libfabric's layered names do: an item without '='
// right after provider= continues the name.  mr_mode takes mode names joined by '|' or a
// number (0x10), so an application can print info->domain_attr->mr_mode as it is.
Result<OfiOptions> parse_ofi_options(const char* text);

const char* endpoint_type_name(EndpointType type);

}  // namespace hmr::nic::ofi
