// The allocator of a test binary that makes out-of-memory happen where a test says: this
// binary's operator new and delete replace the standard ones (for libhmr.so too, whose calls
// bind to them at load), and each thread can arm its own failure.  An armed failure throws
// std::bad_alloc as the standard operator new does (and the nothrow forms return null), so hmr
// meets exactly what a full heap gives it.  Only the arming thread is affected: hmr's own
// threads (the reaper, a monitor) allocate as usual.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hmr_test::allocation_failure {

// The `nth` allocation (1 = the next) this thread makes fails; later ones succeed.
void fail_nth(uint64_t nth);
// Every allocation of `bytes` or more this thread makes fails, until disarm().
void fail_at_least(size_t bytes);
// Stops failing; whether a failure was made since the thread armed.
bool disarm();
// Failures made so far by every thread (for a thread the test does not run, such as hmr's
// asynchronous worker armed from inside a NIC callback).
uint64_t failures_made();

}  // namespace hmr_test::allocation_failure
