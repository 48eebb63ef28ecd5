"""hmr.Error and its subclasses.  The C extension raises them from hmr's negative return codes;
each carries the positive HMR_E* number (``code``) and hmr_last_error()'s text (``reason``)."""
from __future__ import annotations

import errno as _errno


class Error(Exception):
    """A failed hmr call.  ``code``: the positive HMR_E* number (libfabric's FI_E* value);
    ``reason``: hmr's own explanation of what was wrong, for this call."""

    code: int
    reason: str

    def __init__(self, code: int, reason: str, message: str | None = None) -> None:
        self.code = code
        self.reason = reason
        super().__init__(message if message is not None else f"hmr error {code}: {reason}")

    def __reduce__(self):
        # Pickled with what __init__ takes (args holds only the message): a worker process's
        # error reaches its parent (multiprocessing, concurrent.futures) as itself.
        return (type(self), (self.code, self.reason, str(self)), self.__dict__)


class InvalidArgumentError(Error, ValueError):
    """HMR_EINVAL: a bad argument — also non-contiguous memory and objects exposing none."""


class AccessError(Error):
    """HMR_EACCES / HMR_EPERM: the access asked for is not allowed (a read-only buffer asked
    for REMOTE_WRITE, an RMA outside what a key grants)."""


class BusyError(Error):
    """HMR_EBUSY: the object is still in use (a domain with a call in flight on another
    thread; a region bound to a window or an indirect key)."""


class ClosedError(Error, ValueError):
    """HMR_EBADF: the region, key, endpoint or domain was closed, or (in a forked child) is
    its parent's, which the child can only close."""


class NotSupportedError(Error):
    """HMR_ENOSYS / HMR_EOPNOTSUPP / HMR_ENODEV: this NIC or build cannot do it."""


class ResourceError(Error, MemoryError):
    """HMR_ENOMEM / HMR_ENOSPC: out of memory, registrations or pinnable bytes."""


HMR_EKEYREJECTED = 129

_BY_CODE = {
    _errno.EINVAL: InvalidArgumentError,
    _errno.EFAULT: InvalidArgumentError,
    _errno.ERANGE: InvalidArgumentError,
    HMR_EKEYREJECTED: InvalidArgumentError,
    _errno.EACCES: AccessError,
    _errno.EPERM: AccessError,
    _errno.EBUSY: BusyError,
    _errno.EBADF: ClosedError,
    _errno.ENOSYS: NotSupportedError,
    _errno.EOPNOTSUPP: NotSupportedError,
    _errno.ENODEV: NotSupportedError,
    _errno.ENOMEM: ResourceError,
    _errno.ENOSPC: ResourceError,
}
