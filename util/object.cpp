#include "util/object.h"

namespace hmr::core {

namespace {

const char* name_of(ObjectClass object_class) {
  switch (object_class) {
    case ObjectClass::domain: return "domain";
    case ObjectClass::memory_region:
    case ObjectClass::cached_memory_region: return "MR";
    case ObjectClass::event_queue: return "event queue";
    case ObjectClass::counter: return "counter";
    case ObjectClass::endpoint: return "endpoint";
    case ObjectClass::monitor: return "monitor";
    case ObjectClass::remote_key: return "rkey";
    case ObjectClass::memory_window: return "memory window";
  }
  return nullptr;  // not a class of ours: not a handle
}

}  // namespace

bool made_before_fork(const void* handle) {
  if (handle == nullptr) return false;
  const auto* tag = static_cast<const ObjectTag*>(handle);
  // The number of forks that made the process the object was made in, if it is one of ours
  // (a dead tag, 0, reads as a count far above any real one).
  const uint32_t made_in = tag->magic - ObjectTag::kLive;
  return made_in < forks_counted() && name_of(tag->object_class) != nullptr;
}

const char* class_name(const void* handle) {
  const char* name = name_of(static_cast<const ObjectTag*>(handle)->object_class);
  return name != nullptr ? name : "handle";
}

void forget_inherited(void* handle) {
  // This process's copy of the parent's object: the parent's own is untouched.
  static_cast<ObjectTag*>(handle)->magic = 0;
}

}  // namespace hmr::core
