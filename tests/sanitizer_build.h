// What kind of sanitizer build the tests run in, for the few tests whose behaviour a
// sanitizer's runtime changes.
#pragma once

namespace hmr_test {

// Whether this is a ThreadSanitizer build, whose runtime ends a forked child of a
// multi-threaded process that starts a thread (as a caching domain's monitor, hmr's
// deferred-deregistration thread or its registration pool does): such children start none.
#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kUnderThreadSanitizer = true;
#else
constexpr bool kUnderThreadSanitizer = false;
#endif
#else
constexpr bool kUnderThreadSanitizer = false;
#endif

// Whether this is an AddressSanitizer build whose runtime does not hold its allocator's locks
// across fork().  Such a runtime (clang 14's, Debian 12's) leaves a size-class lock that
// another thread held at the fork locked for ever in the child, whose next malloc of that
// size waits on it: a child forked while the parent's threads register hung in 2 of 6 full
// runs of hmr_api_tests (and once in CI), each time inside
// SizeClassAllocator64::GetFromAllocator (gdb).  Later compiler-rt
// takes those locks around fork itself (asan_posix.cpp, InstallAtForkHandler, from LLVM 18);
// hmr cannot, from outside the runtime.  GCC's libasan is counted as such a runtime up to
// GCC 14 (its libsanitizer was merged from compiler-rt before that change; GCC 15's has it).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizerMayHangForkedChildren =
#if defined(__clang__)
    __clang_major__ < 18;
#else
    __GNUC__ < 15;
#endif
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizerMayHangForkedChildren = __clang_major__ < 18;
#else
constexpr bool kAddressSanitizerMayHangForkedChildren = false;
#endif
#else
constexpr bool kAddressSanitizerMayHangForkedChildren = false;
#endif

}  // namespace hmr_test
