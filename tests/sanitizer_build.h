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

}  // namespace hmr_test
