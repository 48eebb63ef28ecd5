// poll(2) for threads that must go on reading whatever happens: the userfaultfd reader (an
// unmapping thread waits until its event is read, and the caches must hear of it) and the
// reaper (it unpins memory that was freed).  Where poll itself refuses — EINVAL once the
// application has lowered RLIMIT_NOFILE below the number of fds asked about, ENOMEM — such a
// thread must neither stop (unmappers would wait for ever, or never be heard: stale
// registrations) nor spin: it pauses a millisecond and is told that every fd may be readable,
// so it reads each without waiting (they must be O_NONBLOCK), until poll works again.
#pragma once

#include <poll.h>

#include <atomic>

namespace hmr {

// Waits as poll(fds, count, -1) does (EINTR: waits again), or, where poll refuses, a
// millisecond, after which every fd's revents is POLLIN.  The first refusal of each mode's
// entry is logged as a warning naming `who`; `warned` keeps that to one per spell.
void wait_readable(pollfd* fds, nfds_t count, const char* who, bool& warned);

}  // namespace hmr
