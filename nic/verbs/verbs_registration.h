// One NIC registration on the verbs adapter: the verbs MRs of its chunks (usually one) and the
// descriptor hmr_mr_desc() hands out.  It owns the MRs: whatever is still registered when it is
// destroyed is deregistered, so a registration that fails half way leaks nothing.  An indirect
// key has no chunks: it owns its mlx5 mkey instead, whose ibv_mr view is its one descriptor.
#pragma once

#include <hmr/hmr.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "nic/verbs/indirect_mkey.h"
#include "nic/verbs/verbs_symbols.h"
#include "util/status.h"

namespace hmr::verbs {

class VerbsRegistration {
 public:
  struct Layout {
    uint64_t start = 0;      // the first byte's VA (for a dma-buf, its base address)
    uint64_t length = 0;
    uint64_t iova = 0;       // the address peers use for the first byte
    uint64_t chunk_len = 0;
    unsigned int ibv_access = 0;
    bool dmabuf = false;
  };

  VerbsRegistration(const IbverbsSymbols& symbols, const Layout& layout);
  VerbsRegistration(const VerbsRegistration&) = delete;
  VerbsRegistration& operator=(const VerbsRegistration&) = delete;
  ~VerbsRegistration();

  // Room for `count` chunks, taken before the first ibv_reg_mr: add_chunk then never
  // allocates, so an MR the kernel made is never lost to out of memory before it is recorded.
  void reserve_chunks(size_t count) { chunks_.reserve(count); }
  // Takes ownership of the next chunk's MR.
  void add_chunk(ibv_mr* mr);
  // Makes this the registration of an indirect key (no chunks).
  void set_indirect(std::unique_ptr<IndirectMkey> mkey);
  bool indirect() const { return indirect_ != nullptr; }
  // The key peers use: the indirect key's rkey, or chunk 0's.
  uint32_t first_rkey() const;
  // Deregisters every chunk (or destroys the indirect mkey); the ones that fail stay owned
  // (and are retried by a later call or the destructor), and the first failure is returned.
  Status deregister_all();

  const Layout& layout() const { return layout_; }
  size_t chunk_count() const { return chunks_.size(); }
  ibv_mr* chunk(size_t index) const { return chunks_[index]; }
  // The chunk that holds all of [addr, addr+len) (addresses as in layout().start), or null when
  // the range is outside the registration or crosses a chunk boundary.
  ibv_mr* chunk_holding(uint64_t addr, uint64_t len) const;
  // Whether [addr, addr+len) lies inside the registration (addresses as in layout().start).
  bool contains(uint64_t addr, uint64_t len) const;
  // Appends the scatter/gather entries that name [addr, addr+len) (inside the registration):
  // one per piece within a chunk and at most `max_piece` bytes, each with that chunk's lkey and
  // the address as the MR is addressed (its iova), as any work request or KLM entry needs.
  void append_entries(uint64_t addr, uint64_t len, uint64_t max_piece,
                      std::vector<ibv_sge>& out) const;

  // The public descriptor; refreshed by every change of the chunks.
  hmr_verbs_desc* desc() { return &desc_; }
  // After a re-registration changed range, access or addressing.
  void set_layout(const Layout& layout) {
    layout_ = layout;
    refresh_desc();
  }
  // After ibv_rereg_mr failed in a way that leaves the MR fit only for deregistration.
  void mark_unusable() { unusable_ = true; }
  bool unusable() const { return unusable_; }

 private:
  void refresh_desc();

  const IbverbsSymbols& symbols_;
  Layout layout_;
  std::vector<ibv_mr*> chunks_;
  std::unique_ptr<IndirectMkey> indirect_;
  ibv_mr* indirect_view_ = nullptr;  // what desc_.chunks points to for an indirect key
  hmr_verbs_desc desc_{};
  bool unusable_ = false;
};

}  // namespace hmr::verbs
