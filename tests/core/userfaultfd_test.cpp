#include "util/userfaultfd.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace hmr::core {
namespace {

constexpr size_t kPage = 4096;

void* map_pages(size_t pages) {
  void* memory = mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(memory, MAP_FAILED);
  return memory;
}

// The changing syscall blocks until its events are read, so a reader thread drains events
// until the syscall has returned.  One syscall may raise several events (mremap: UNMAP of the
// old range and REMAP); the one asked for is returned.
AddressRangeEvent change_and_read(Userfaultfd& uffd, AddressRangeEvent::Kind wanted,
                                  const std::function<void()>& change) {
  std::atomic<bool> changed{false};
  std::vector<AddressRangeEvent> events;
  std::thread reader([&] {
    AddressRangeEvent event{};
    for (;;) {
      const bool finished = changed.load();
      while (uffd.read_event(&event)) events.push_back(event);
      if (finished) return;
      std::this_thread::yield();
    }
  });
  change();
  changed = true;
  reader.join();
  for (const AddressRangeEvent& event : events) {
    if (event.kind == wanted) return event;
  }
  ADD_FAILURE() << "no event of the expected kind among " << events.size();
  return AddressRangeEvent{};
}

TEST(Userfaultfd, ReportsUnmapRemoveAndRemap) {
  Result<Userfaultfd> opened = Userfaultfd::open();
  if (!opened.ok()) GTEST_SKIP() << opened.status().reason();
  Userfaultfd& uffd = *opened;

  auto* memory = static_cast<uint8_t*>(map_pages(4));
  memory[0] = 1;  // a populated page, so DONTNEED really removes something
  ASSERT_TRUE(uffd.watch(reinterpret_cast<uintptr_t>(memory), 4 * kPage).ok());

  AddressRangeEvent removed = change_and_read(uffd, AddressRangeEvent::Kind::remove, [&] { madvise(memory, kPage, MADV_DONTNEED); });
  EXPECT_EQ(removed.kind, AddressRangeEvent::Kind::remove);
  EXPECT_EQ(removed.start, reinterpret_cast<uintptr_t>(memory));
  EXPECT_EQ(removed.end, reinterpret_cast<uintptr_t>(memory) + kPage);

  AddressRangeEvent unmapped =
      change_and_read(uffd, AddressRangeEvent::Kind::unmap, [&] { munmap(memory + 3 * kPage, kPage); });
  EXPECT_EQ(unmapped.kind, AddressRangeEvent::Kind::unmap);
  EXPECT_EQ(unmapped.start, reinterpret_cast<uintptr_t>(memory + 3 * kPage));

  void* moved_to = nullptr;
  AddressRangeEvent remapped = change_and_read(uffd, AddressRangeEvent::Kind::remap, [&] {
    moved_to = mremap(memory, 3 * kPage, 3 * kPage, MREMAP_MAYMOVE | MREMAP_FIXED,
                      static_cast<uint8_t*>(map_pages(3)));
  });
  ASSERT_NE(moved_to, MAP_FAILED);
  EXPECT_EQ(remapped.kind, AddressRangeEvent::Kind::remap);
  EXPECT_EQ(remapped.start, reinterpret_cast<uintptr_t>(memory));
  uffd.unwatch(reinterpret_cast<uintptr_t>(moved_to), 3 * kPage);
  munmap(moved_to, 3 * kPage);
}

TEST(Userfaultfd, WatchingUnmappedMemoryFails) {
  Result<Userfaultfd> opened = Userfaultfd::open();
  if (!opened.ok()) GTEST_SKIP() << opened.status().reason();
  void* memory = map_pages(1);
  munmap(memory, kPage);
  Status status = opened->watch(reinterpret_cast<uintptr_t>(memory), kPage);
  EXPECT_EQ(status.code(), HMR_EFAULT);
}

}  // namespace
}  // namespace hmr::core
