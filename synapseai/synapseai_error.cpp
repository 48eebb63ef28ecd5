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

const char* scal_result_name(int result) {
  switch (result) {
    case kScalSuccess: return "SCAL_SUCCESS";
    case kScalFailure: return "SCAL_FAILURE";
    case kScalTimedOut: return "SCAL_TIMED_OUT";
    case -3: return "SCAL_FW_FILE_LOAD_ERR";
    case kScalInvalidParam: return "SCAL_INVALID_PARAM";
    case kScalOutOfMemory: return "SCAL_OUT_OF_MEMORY";
    case kScalNotReady: return "SCAL_NOT_READY";
    case kScalResetRequired: return "SCAL_RESET_REQUIRED";
    case -8: return "SCAL_INVALID_CONFIG";
    case -9: return "SCAL_UNSUPPORTED_CONFIG_VERSION";
    case -10: return "SCAL_FILE_NOT_FOUND";
    case kScalNotFound: return "SCAL_NOT_FOUND";
    case kScalNotImplemented: return "SCAL_NOT_IMPLEMENTED";
    case -13: return "SCAL_EMPTY_PATH";
    case -14: return "SCAL_UNSUPPORTED_TEST_CONFIG";
  }
  return nullptr;
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

int hmr_code_for_scal(int result) {
  switch (result) {
    case kScalSuccess: return HMR_SUCCESS;
    case kScalOutOfMemory: return HMR_ENOMEM;
    case kScalTimedOut: return HMR_ETIMEDOUT;
    case kScalNotReady: return HMR_EAGAIN;
    case kScalNotImplemented: return HMR_EOPNOTSUPP;
    default: return HMR_EIO;
  }
}

std::string describe_scal_result(int result) {
  const char* name = scal_result_name(result);
  if (name == nullptr) return "SCAL result " + std::to_string(result);
  return std::string(name) + " (" + std::to_string(result) + ")";
}

}  // namespace hmr::synapseai
