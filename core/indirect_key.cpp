// hmr_mr_reg_indirect: one key over pieces of MRs of the domain, in order, as mlx5's UMR builds
// from a KLM list.  Every piece is checked here, before the NIC is asked, so each NIC sees only
// pieces of live registrations it made; the MRs are held (MemoryRegion::add_user) until the
// indirect key closes.
#include "core/domain.h"
#include "core/memory_region.h"

namespace hmr::core {
namespace {

using ull = unsigned long long;

Status check_piece(const Domain& domain, const Domain::IndirectPiece& piece, size_t index,
                   uint64_t access) {
  if (piece.mr == nullptr) return make_error(HMR_EINVAL, "indirect segment %zu: mr is not an MR", index);
  MemoryRegion& mr = *piece.mr;
  if (&mr.domain() != &domain) {
    return make_error(HMR_EINVAL, "indirect segment %zu: the MR belongs to another domain", index);
  }
  Status registered = mr.check_registered();
  if (!registered.ok()) {
    return make_error(registered.code(), "indirect segment %zu: %s", index,
                      registered.reason().c_str());
  }
  if (mr.indirect()) {
    return make_error(HMR_EINVAL, "indirect segment %zu: an indirect key cannot be a segment of "
                                  "another", index);
  }
  if (piece.addr == 0 || piece.len == 0 || piece.addr + piece.len < piece.addr ||
      !mr.contains(piece.addr, piece.len)) {
    return make_error(HMR_EINVAL, "indirect segment %zu: [%#llx, +%zu) is not inside its MR",
                      index, static_cast<ull>(piece.addr), piece.len);
  }
  const uint64_t granted = mr.request().access;
  if ((granted & access) != access) {
    return make_error(HMR_EACCES, "indirect segment %zu: the key asks for access %#llx, its MR "
                      "grants %#llx", index, static_cast<ull>(access), static_cast<ull>(granted));
  }
  return ok_status();
}

}  // namespace

Result<MemoryRegion*> Domain::register_indirect(std::span<const IndirectPiece> pieces,
                                                uint64_t access) {
  RegistrationFailureTally tally(stats_);
  const nic::Support available = operation_support(HMR_MD_OP_INDIRECT);
  if (!available.available) return make_error(HMR_ENOSYS, "%s", available.reason.c_str());
  MrRequest request;
  request.access = access;
  std::vector<MemoryRegion*> parts;
  std::vector<nic::IndirectSegment> segments;
  uint64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    HMR_RETURN_IF_ERROR(check_piece(*this, pieces[i], i, access));
    if (__builtin_add_overflow(total, pieces[i].len, &total)) {
      return make_error(HMR_EINVAL, "the segments of the indirect key add up to more than 2^64 "
                                    "bytes");
    }
    parts.push_back(pieces[i].mr);
    segments.push_back({&pieces[i].mr->registration(), pieces[i].addr, pieces[i].len});
    request.segments.push_back({reinterpret_cast<void*>(pieces[i].addr), pieces[i].len});
  }
  HMR_RETURN_IF_ERROR(reserve_mr_slot());
  MrSlotReservation reservation(*this);
  const uint64_t length = request.length();
  auto region = std::make_unique<MemoryRegion>(*this, std::move(request));
  HMR_RETURN_IF_ERROR(region->register_indirect(std::move(parts), segments));
  reservation.handed_out();
  tally.settle();
  stats_.record_registration(true);
  stats_.record_mr_open(length);
  return region.release();
}

}  // namespace hmr::core
