// libFuzzer target: hmr_rkey_unpack fed arbitrary bytes, through the public C ABI, on a sim
// domain with 8-byte keys and one with 16-byte raw keys.  The first input byte picks the
// domain (bit 1) and whether the checksum is re-sealed over the rest (bit 0): unsealed inputs
// test the checksum, sealed ones let the fuzzer reach every field check behind it.
// Every unpack either fails with -HMR_EINVAL and a reason or yields an rkey that queries and
// releases cleanly; anything else aborts.
//
// The blob decoder (core/packed_rkey.cpp) is also compiled into this program, instrumented,
// and run on the same bytes first: libhmr.so carries no coverage counters, so without it the
// fuzzer would be blind past the magic.  The two must agree: bytes the decoder refuses, the
// C ABI refuses.
#include <hmr/hmr.h>

#include "core/packed_rkey.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

hmr_domain* open_domain(const char* options, uint64_t mode) {
  hmr_domain_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic = "sim";
  attr.nic_options = options;
  attr.mr_mode = mode;
  hmr_domain* domain = nullptr;
  if (hmr_domain_open(&attr, &domain) != 0) std::abort();
  return domain;
}

void reseal(std::vector<uint8_t>& blob) {
  if (blob.size() < 4) return;
  uint32_t hash = 2166136261u;
  const size_t body = blob.size() - 4;
  for (size_t i = 0; i < body; ++i) hash = (hash ^ blob[i]) * 16777619u;
  for (size_t i = 0; i < 4; ++i) blob[body + i] = static_cast<uint8_t>(hash >> (8 * i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hmr_domain* const plain = open_domain("key_size=8", HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  static hmr_domain* const raw = open_domain(
      "require=RAW;key_size=16", HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_RAW);
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::vector<uint8_t> blob(data + 1, data + size);
  if (mode & 1) reseal(blob);
  hmr_domain* domain = (mode & 2) ? raw : plain;

  const bool decodes = hmr::core::PackedRkey::decode(blob).ok();
  hmr_rkey* rkey = nullptr;
  const int rc = hmr_rkey_unpack(domain, blob.data(), blob.size(), &rkey);
  if (rc == 0 && !decodes) std::abort();
  if (rc != 0) {
    if (rc != -HMR_EINVAL || rkey != nullptr || hmr_last_error()[0] == '\0') std::abort();
    return 0;
  }
  hmr_rkey_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  // (A length of 0 is a zero-byte MR's key; a range that wraps is never let in.)
  if (hmr_rkey_query(rkey, &info) != 0 || info.addr + info.length < info.addr ||
      info.raw_key_size > HMR_RKEY_RAW_MAX) {
    std::abort();
  }
  if (hmr_rkey_release(rkey) != 0) std::abort();
  return 0;
}
