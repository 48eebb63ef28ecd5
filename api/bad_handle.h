// What the C ABI says of a handle util/object.h's from_handle() refused, and how a forked
// child closes the handles it inherited.  A handle the parent made before fork() is refused
// in the child with HMR_EBADF and the reason, not HMR_EINVAL: it is a real object, of a
// process whose threads (which may hold its locks for ever) and NIC resources the child does
// not have.  The child may close it; nothing of it is touched but the child's copy of its tag.
#pragma once

namespace hmr {

// -HMR_EBADF with the reason for a handle made before this process forked, else -HMR_EINVAL
// with `what` ("not a domain handle"); recorded as the thread's last error either way.
int report_bad_handle(const void* handle, const char* what);

// For a close: 0 where `handle` was made before this process forked (it is now closed here;
// nothing else of it is touched), else report_bad_handle(handle, what).
int close_bad_handle(void* handle, const char* what);

}  // namespace hmr
