#include "nic/verbs/verbs_registration.h"

#include <cerrno>
#include <cstring>

#include "nic/verbs/verbs_error.h"
#include "util/log.h"

namespace hmr::verbs {

VerbsRegistration::VerbsRegistration(const IbverbsSymbols& symbols, const Layout& layout)
    : symbols_(symbols), layout_(layout) {
  refresh_desc();
}

VerbsRegistration::~VerbsRegistration() {
  Status status = deregister_all();
  if (!status.ok()) {
    log_message(LogLevel::warn, "verbs registration [%#llx, +%llu) leaked on the NIC: %s",
                static_cast<unsigned long long>(layout_.start),
                static_cast<unsigned long long>(layout_.length), status.reason().c_str());
  }
}

void VerbsRegistration::add_chunk(ibv_mr* mr) {
  chunks_.push_back(mr);
  refresh_desc();
}

Status VerbsRegistration::deregister_all() {
  Status first;
  std::vector<ibv_mr*> kept;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const int err = symbols_.dereg_mr(chunks_[i]);
    if (err == 0) continue;
    kept.push_back(chunks_[i]);
    if (first.ok()) {
      first = verbs_failure(err, "ibv_dereg_mr of chunk %zu of [%#llx, +%llu) failed%s", i,
                            static_cast<unsigned long long>(layout_.start),
                            static_cast<unsigned long long>(layout_.length),
                            err == EBUSY ? " (memory windows are still bound to it)" : "");
    }
  }
  chunks_ = std::move(kept);
  refresh_desc();
  return first;
}

ibv_mr* VerbsRegistration::chunk_holding(uint64_t addr, uint64_t len) const {
  if (len == 0 || addr < layout_.start || addr - layout_.start > layout_.length ||
      len > layout_.length - (addr - layout_.start)) {
    return nullptr;
  }
  const uint64_t first = (addr - layout_.start) / layout_.chunk_len;
  const uint64_t last = (addr - layout_.start + len - 1) / layout_.chunk_len;
  if (first != last || first >= chunks_.size()) return nullptr;
  return chunks_[first];
}

void VerbsRegistration::refresh_desc() {
  // The public struct names rdma-core's struct ibv_mr, which hmr declares as its own type of
  // the same layout (verbs_abi.h); the pointers are only handed through.
  auto* const* chunks = reinterpret_cast<::ibv_mr* const*>(chunks_.data());
  desc_.mr = chunks_.empty() ? nullptr : chunks[0];
  desc_.chunk_count = chunks_.size();
  desc_.chunk_len = layout_.chunk_len;
  desc_.chunks = chunks_.empty() ? nullptr : chunks;
}

}  // namespace hmr::verbs
