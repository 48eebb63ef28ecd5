#include "synapseai/synapseai_error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace hmr::synapseai {
namespace {

const char* syn_status_name(synStatus status) {
  switch (status) {
    case synSuccess: return "synSuccess";
    case synInvalidArgument: return "synInvalidArgument";
    case synCbFull: return "synCbFull";
    case synOutOfHostMemory: return "synOutOfHostMemory";
    case synOutOfDeviceMemory: return "synOutOfDeviceMemory";
    case synObjectAlreadyInitialized: return "synObjectAlreadyInitialized";
    case synObjectNotInitialized: return "synObjectNotInitialized";
    case synCommandSubmissionFailure: return "synCommandSubmissionFailure";
    case synNoDeviceFound: return "synNoDeviceFound";
    case synDeviceTypeMismatch: return "synDeviceTypeMismatch";
    case synDeviceReset: return "synDeviceReset";
    case synUnsupported: return "synUnsupported";
    case synBusy: return "synBusy";
    case synAllResourcesTaken: return "synAllResourcesTaken";
    case synUnavailable: return "synUnavailable";
    case synFail: return "synFail";
    case synOutOfResources: return "synOutOfResources";
    case synUninitialized: return "synUninitialized";
    case synAlreadyInitialized: return "synAlreadyInitialized";
    case synTimeout: return "synTimeout";
    case synResourceBadUsage: return "synResourceBadUsage";
  }
  return "synStatus";
}

const char* errno_name(int error) {
  switch (error) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    case EBADF: return "EBADF";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case ENOTTY: return "ENOTTY";
    case ENOSPC: return "ENOSPC";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ETIMEDOUT: return "ETIMEDOUT";
  }
  return "errno";
}

}  // namespace

int hmr_code_for(synStatus status) {
  switch (status) {
    case synSuccess: return HMR_SUCCESS;
    case synInvalidArgument: return HMR_EINVAL;
    case synOutOfHostMemory:
    case synOutOfDeviceMemory:
    case synOutOfResources: return HMR_ENOMEM;
    case synNoDeviceFound:
    case synDeviceTypeMismatch: return HMR_ENODEV;
    case synUnsupported: return HMR_EOPNOTSUPP;
    case synBusy:
    case synAllResourcesTaken: return HMR_EBUSY;
    case synUnavailable: return HMR_EAGAIN;
    case synTimeout: return HMR_ETIMEDOUT;
    default: return HMR_EIO;
  }
}

std::string describe_syn_status(synStatus status) {
  return std::string(syn_status_name(status)) + " (" + std::to_string(status) + ")";
}

int hlthunk_errno(long long result, int saved_errno) {
  if (result < -1 && result >= -4095) return static_cast<int>(-result);
  return saved_errno != 0 ? saved_errno : EIO;
}

int hmr_code_for_errno(int error) {
  switch (error) {
    case EPERM:
    case EACCES: return HMR_EPERM;
    case ENOMEM:
    case ENOSPC: return HMR_ENOMEM;
    case EBUSY: return HMR_EBUSY;
    case ENOENT:
    case ENODEV: return HMR_ENODEV;
    case EINVAL:
    case EFAULT: return HMR_EINVAL;
    case ENOTTY:  // an ioctl this driver does not know: the feature is missing
    case EOPNOTSUPP: return HMR_EOPNOTSUPP;
    case ETIMEDOUT: return HMR_ETIMEDOUT;
    default: return HMR_EIO;
  }
}

std::string describe_errno(int error) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "%s (%d: %s)", errno_name(error), error,
                std::strerror(error));
  return buffer;
}

}  // namespace hmr::synapseai
