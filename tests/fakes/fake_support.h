/* What every fake vendor library keeps so tests can steer and observe it: a count of calls per
 * entry point, failures injected per entry point, and device address ranges the CPU cannot
 * touch.  Compiled into each fake shared object (hidden visibility), so each fake keeps its own
 * state.  struct fake_calls locks itself, so a test-only control needs no lock of the fake's; a
 * fake may call in with its own lock held (never the other way round). */
#ifndef HMR_TESTS_FAKE_SUPPORT_H
#define HMR_TESTS_FAKE_SUPPORT_H

#include <pthread.h>
#include <stddef.h>

#define FAKE_NAME_LEN 64
#define FAKE_MAX_FAILURES 16
#define FAKE_MAX_COUNTERS 96

struct fake_named_value {
  char name[FAKE_NAME_LEN]; /* "" marks a free slot */
  int value;
  int countdown; /* failures: fail only the countdown-th call from now (0: every call) */
};

struct fake_calls {
  pthread_mutex_t lock;
  struct fake_named_value failures[FAKE_MAX_FAILURES];
  struct fake_named_value counters[FAKE_MAX_COUNTERS];
};

#define FAKE_CALLS_INITIALIZER {.lock = PTHREAD_MUTEX_INITIALIZER}

/* Counts a call of `name`; returns the code injected for it, 0 when it must proceed. */
int fake_calls_enter(struct fake_calls *calls, const char *name);

/* Makes `name` fail with `code` (0 clears it): on every call when countdown is 0, else only on
 * the countdown-th call from now. */
void fake_calls_set_failure(struct fake_calls *calls, const char *name, int code, int countdown);

/* The code injected for `name` without counting a call (fakes use pseudo-names such as
 * "zeMemGetAllocProperties:export" to steer one detail of an entry point); 0 when none. */
int fake_calls_failure(struct fake_calls *calls, const char *name);

/* How often `name` was entered since the last reset. */
int fake_calls_count(struct fake_calls *calls, const char *name);

void fake_calls_reset(struct fake_calls *calls);

/* Reserves `size` bytes of address space, never backed: device addresses handed out from it are
 * real and distinct, and a CPU touch faults as it would on device memory.  NULL on failure. */
void *fake_reserve_device_range(size_t size);

#endif
