#include "nic/verbs/indirect_mkey.h"

#include <cerrno>

#include "nic/verbs/verbs_error.h"
#include "util/log.h"

namespace hmr::verbs {

Result<std::unique_ptr<IndirectMkey>> IndirectMkey::create(
    std::shared_ptr<const Mlx5dvLibrary> mlx5, ibv_pd* pd, uint16_t entries, uint64_t length,
    const std::string& device) {
  mlx5dv_mkey_init_attr attr{};
  attr.pd = pd;
  attr.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
  attr.max_entries = entries;
  errno = 0;
  mlx5dv_mkey* mkey = mlx5->symbols().create_mkey(&attr);
  if (mkey == nullptr) {
    const int err = errno;
    return verbs_failure(err,
                         "mlx5dv_create_mkey(INDIRECT, %u entries) on %s failed%s", entries,
                         device.c_str(),
                         err == EOPNOTSUPP || err == EPERM || err == EPROTONOSUPPORT ||
                                 err == EINVAL
                             ? " (an indirect mkey needs a DEVX context: let hmr open the device "
                               "(nic_options device=<name>) or open it with mlx5dv_open_device "
                               "and MLX5DV_CONTEXT_FLAGS_DEVX)"
                             : "");
  }
  return std::unique_ptr<IndirectMkey>(new IndirectMkey(std::move(mlx5), mkey, pd, length, device));
}

IndirectMkey::IndirectMkey(std::shared_ptr<const Mlx5dvLibrary> mlx5, mlx5dv_mkey* mkey,
                           ibv_pd* pd, uint64_t length, std::string device)
    : mlx5_(std::move(mlx5)), mkey_(mkey), device_(std::move(device)) {
  view_.context = pd->context;
  view_.pd = pd;
  view_.addr = nullptr;
  view_.length = static_cast<size_t>(length);
  view_.lkey = mkey->lkey;
  view_.rkey = mkey->rkey;
}

IndirectMkey::~IndirectMkey() {
  Status status = destroy();
  if (!status.ok()) log_message(LogLevel::warn, "%s", status.reason().c_str());
}

Status IndirectMkey::destroy() {
  if (mkey_ == nullptr) return ok_status();
  if (const int err = mlx5_->symbols().destroy_mkey(mkey_); err != 0) {
    return verbs_failure(err, "mlx5dv_destroy_mkey of indirect key %#x on %s failed",
                         view_.rkey, device_.c_str());
  }
  mkey_ = nullptr;
  return ok_status();
}

}  // namespace hmr::verbs
