// Owner of one exported dma-buf fd.
//
// Close policy (one for every vendor): the DmabufFd that holds the fd closes it with close(2),
// exactly once, when it is destroyed or reset.  A vendor "close dma-buf" call (ROCr's
// hsa_amd_portable_close_dmabuf) is itself a close(2) of the fd, so one policy serves all.
// release() hands the fd to a caller who then owns it (for example a NIC that keeps it, or an
// application that asked for the fd); a moved-from DmabufFd owns nothing and closes nothing.
#pragma once

#include <unistd.h>

#include <utility>

namespace hmr::hmem {

class DmabufFd {
 public:
  DmabufFd() = default;
  explicit DmabufFd(int fd) : fd_(fd) {}
  DmabufFd(DmabufFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DmabufFd& operator=(DmabufFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  DmabufFd(const DmabufFd&) = delete;
  DmabufFd& operator=(const DmabufFd&) = delete;
  ~DmabufFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }
  // Closes the owned fd (never retried: on Linux the fd is gone even when close reports EINTR,
  // and a retry could close an fd another thread just opened) and takes ownership of `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace hmr::hmem
