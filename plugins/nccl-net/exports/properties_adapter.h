// The older property structs are prefixes (v9, v10) or reorderings (v8) of v11's: one getter
// fills v11's and each adapter copies the fields its version has.
#pragma once

#include "../abi/nccl_net_v11.h"
#include "../abi/nccl_net_v8.h"
#include "../net/net_api.h"

namespace hmr::nccl::exports {

// Fields every version has, by name.
template <typename Properties>
ncclResult_t get_properties_as(int dev, Properties* out) {
  ncclNetProperties_v11_t props;
  if (out == nullptr) return api::get_properties(dev, nullptr);
  if (const ncclResult_t rc = api::get_properties(dev, &props); rc != ncclSuccess) return rc;
  *out = Properties{};
  out->name = props.name;
  out->pciPath = props.pciPath;
  out->guid = props.guid;
  out->ptrSupport = props.ptrSupport;
  out->regIsGlobal = props.regIsGlobal;
  out->speed = props.speed;
  out->port = props.port;
  out->latency = props.latency;
  out->maxComms = props.maxComms;
  out->maxRecvs = props.maxRecvs;
  out->netDeviceType = props.netDeviceType;
  out->netDeviceVersion = props.netDeviceVersion;
  if constexpr (requires { out->maxP2pBytes; }) {
    out->forceFlush = props.forceFlush;
    out->vProps = props.vProps;
    out->maxP2pBytes = props.maxP2pBytes;
    out->maxCollBytes = props.maxCollBytes;
  }
  if constexpr (requires { out->maxMultiRequestSize; }) {
    out->maxMultiRequestSize = props.maxMultiRequestSize;
  }
  return ncclSuccess;
}

}  // namespace hmr::nccl::exports
