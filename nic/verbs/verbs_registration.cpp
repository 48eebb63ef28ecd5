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

void VerbsRegistration::set_indirect(std::unique_ptr<IndirectMkey> mkey) {
  indirect_ = std::move(mkey);
  indirect_view_ = indirect_->view();
  refresh_desc();
}

uint32_t VerbsRegistration::first_rkey() const {
  if (indirect_ != nullptr) return indirect_view_->rkey;
  return chunks_.empty() ? 0 : chunks_[0]->rkey;
}

Status VerbsRegistration::deregister_all() {
  if (indirect_ != nullptr) {
    HMR_RETURN_IF_ERROR(indirect_->destroy());
    indirect_.reset();
    indirect_view_ = nullptr;
    refresh_desc();
    return ok_status();
  }
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
  if (!contains(addr, len)) return nullptr;
  const uint64_t first = (addr - layout_.start) / layout_.chunk_len;
  const uint64_t last = (addr - layout_.start + len - 1) / layout_.chunk_len;
  if (first != last || first >= chunks_.size()) return nullptr;
  return chunks_[first];
}

bool VerbsRegistration::contains(uint64_t addr, uint64_t len) const {
  return len != 0 && addr >= layout_.start && addr - layout_.start <= layout_.length &&
         len <= layout_.length - (addr - layout_.start);
}

void VerbsRegistration::append_entries(uint64_t addr, uint64_t len, uint64_t max_piece,
                                       std::vector<ibv_sge>& out) const {
  uint64_t offset = addr - layout_.start;
  const uint64_t end = offset + len;
  while (offset < end) {
    const uint64_t chunk = offset / layout_.chunk_len;
    const uint64_t chunk_end = (chunk + 1) * layout_.chunk_len;
    uint64_t piece = (end < chunk_end ? end : chunk_end) - offset;
    if (piece > max_piece) piece = max_piece;
    out.push_back({layout_.iova + offset, static_cast<uint32_t>(piece),
                   chunks_[static_cast<size_t>(chunk)]->lkey});
    offset += piece;
  }
}

void VerbsRegistration::refresh_desc() {
  // The public struct names rdma-core's struct ibv_mr, which hmr declares as its own type of
  // the same layout (verbs_abi.h); the pointers are only handed through.
  if (indirect_ != nullptr) {
    desc_.mr = reinterpret_cast<::ibv_mr*>(indirect_view_);
    desc_.chunk_count = 1;
    desc_.chunk_len = layout_.chunk_len;
    desc_.chunks = reinterpret_cast<::ibv_mr* const*>(&indirect_view_);
    return;
  }
  auto* const* chunks = reinterpret_cast<::ibv_mr* const*>(chunks_.data());
  desc_.mr = chunks_.empty() ? nullptr : chunks[0];
  desc_.chunk_count = chunks_.size();
  desc_.chunk_len = layout_.chunk_len;
  desc_.chunks = chunks_.empty() ? nullptr : chunks;
}

}  // namespace hmr::verbs
