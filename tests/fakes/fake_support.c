#define _GNU_SOURCE
#include "fake_support.h"

#include <string.h>
#include <sys/mman.h>

/* calls->lock held. */
static struct fake_named_value *find_named(struct fake_named_value *table, int count,
                                           const char *name, int create) {
  for (int i = 0; i < count; ++i) {
    if (table[i].name[0] != '\0' && strcmp(table[i].name, name) == 0) return &table[i];
  }
  if (!create) return NULL;
  for (int i = 0; i < count; ++i) {
    if (table[i].name[0] == '\0') {
      strncpy(table[i].name, name, FAKE_NAME_LEN - 1);
      return &table[i];
    }
  }
  return NULL;
}

int fake_calls_enter(struct fake_calls *calls, const char *name) {
  pthread_mutex_lock(&calls->lock);
  struct fake_named_value *counter = find_named(calls->counters, FAKE_MAX_COUNTERS, name, 1);
  if (counter != NULL) counter->value++;
  struct fake_named_value *failure = find_named(calls->failures, FAKE_MAX_FAILURES, name, 0);
  int code = 0;
  if (failure != NULL && failure->countdown == 0) {
    code = failure->value;
  } else if (failure != NULL && --failure->countdown == 0) {
    /* The counted-down call fails once; later calls proceed. */
    code = failure->value;
    failure->name[0] = '\0';
  }
  pthread_mutex_unlock(&calls->lock);
  return code;
}

void fake_calls_set_failure(struct fake_calls *calls, const char *name, int code, int countdown) {
  pthread_mutex_lock(&calls->lock);
  struct fake_named_value *failure =
      find_named(calls->failures, FAKE_MAX_FAILURES, name, code != 0);
  if (failure != NULL && code == 0) {
    failure->name[0] = '\0';
  } else if (failure != NULL) {
    failure->value = code;
    failure->countdown = countdown;
  }
  pthread_mutex_unlock(&calls->lock);
}

int fake_calls_failure(struct fake_calls *calls, const char *name) {
  pthread_mutex_lock(&calls->lock);
  const struct fake_named_value *failure =
      find_named(calls->failures, FAKE_MAX_FAILURES, name, 0);
  const int code = failure != NULL ? failure->value : 0;
  pthread_mutex_unlock(&calls->lock);
  return code;
}

int fake_calls_count(struct fake_calls *calls, const char *name) {
  pthread_mutex_lock(&calls->lock);
  int count = 0;
  if (strcmp(name, "*") == 0) { /* every entry point together */
    for (int i = 0; i < FAKE_MAX_COUNTERS; ++i) count += calls->counters[i].value;
    pthread_mutex_unlock(&calls->lock);
    return count;
  }
  const struct fake_named_value *counter =
      find_named(calls->counters, FAKE_MAX_COUNTERS, name, 0);
  count = counter != NULL ? counter->value : 0;
  pthread_mutex_unlock(&calls->lock);
  return count;
}

void fake_calls_reset(struct fake_calls *calls) {
  pthread_mutex_lock(&calls->lock);
  memset(calls->failures, 0, sizeof calls->failures);
  memset(calls->counters, 0, sizeof calls->counters);
  pthread_mutex_unlock(&calls->lock);
}

void *fake_reserve_device_range(size_t size) {
  void *range = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return range == MAP_FAILED ? NULL : range;
}
