// One rank of a harness run: the plugin table under test, its device 0, a log capture, and
// the NCCL-style loops around the plugin's non-blocking calls (connect/accept until both comms
// exist; post receives and sends, then test until every request is done), each under a
// deadline so a plugin that never finishes fails the run with a reason instead of hanging it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "peer_process.h"
#include "plugin_under_test.h"

namespace hmr::nccl::test {

// Everything the plugin logged through the logger it was given at init.
struct LogLine {
  ncclDebugLogLevel level;
  std::string text;
};
void capture_log(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                 const char* fmt, ...) __attribute__((format(printf, 5, 6)));
std::vector<LogLine> logged();
size_t log_mark();
// A warning logged since `mark` that contains `needle`.
bool warned_since(size_t mark, const std::string& needle);
std::string warnings_since(size_t mark);

// A failure collector for code that runs in both the gtest parent and a bare peer process.
struct Failures {
  std::vector<std::string> list;
  bool ok() const { return list.empty(); }
  void add(const std::string& what) { list.push_back(what); }
  bool check(bool condition, const std::string& what) {
    if (!condition) add(what);
    return condition;
  }
  std::string text() const;
};

// One direction's pair of comms and the listener they came from.
struct Link {
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
};

// A message of an exchange: `size` bytes with `tag`, received into a `posted`-byte buffer.
struct MessageSpec {
  size_t size = 0;
  int tag = 0;
  size_t posted = 0;
};

// Buffers of host memory, page-aligned, freed on destruction.
class HostBuffer {
 public:
  explicit HostBuffer(size_t size);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

// SplitMix64's finalizer: a well-mixed 64-bit value from any input (patterns, seeds).
uint64_t splitmix64(uint64_t x);
void fill_pattern(uint8_t* p, size_t n, uint64_t seed);
// Offset of the first byte that differs from the pattern, or SIZE_MAX.
size_t find_pattern_mismatch(const uint8_t* p, size_t n, uint64_t seed);

class Rank {
 public:
  Rank(std::unique_ptr<Net> net, int id, Clock::duration budget);
  Net& net() { return *net_; }
  int id() const { return id_; }
  Clock::time_point deadline() const { return deadline_; }
  bool expired() const { return Clock::now() >= deadline_; }

  // init with the capturing logger, then devices and device 0's properties, checked.
  bool start(const PluginLibrary& library, Failures* f);

  // Listens, trades handles over `oob`, and connects and accepts in one loop until both comms
  // exist (two ranks), or to its own listener when `oob` is null (one process, loopback).
  bool connect_both(OobChannel* oob, Link* link, Failures* f);
  bool close(Link* link, Failures* f);

  // Posts every receive group (one irecv each) then every send (isend, in `sends` order),
  // keeping all of them in flight before testing any send; tests until all are done; checks
  // sizes, bytes, and that nothing was written past a message.  `seed_out`/`seed_in` name
  // this rank's outgoing and incoming patterns.  Each side's buffers are one arena registered
  // `registrations` times (NCCL registers the same memory again with regIsGlobal); the last
  // handle is the one used.  With `lead` bytes before the messages, each arena is registered
  // whole first and the handle used covers only the range from `lead` on (NCCL registers user
  // buffers inside registered ones): a peer that addressed it from the wrong base would write
  // `lead` bytes off.
  bool exchange(Link& link, const std::vector<std::vector<MessageSpec>>& receive_groups,
                const std::vector<MessageSpec>& sends, uint64_t seed_out, uint64_t seed_in,
                Failures* f, int registrations = 1, size_t lead = 0);

  // The plugin's statistics for device 0.
  bool stats(const PluginLibrary& library, hmr_domain_stats* out, Failures* f);

  const Properties& properties() const { return properties_; }

 private:
  // The rank's receive and send arenas, kept from one exchange to the next (as NCCL keeps its
  // buffers) and grown when too small: paging in fresh 64 MiB each time is what made runs slow.
  HostBuffer& arena(std::unique_ptr<HostBuffer>& slot, size_t bytes);
  std::unique_ptr<HostBuffer> recv_arena_, send_arena_;
  std::unique_ptr<Net> net_;
  int id_;
  Clock::time_point deadline_;
  Properties properties_;
};

// "ncclSuccess", "ncclInvalidArgument" ...
const char* result_name(ncclResult_t r);

}  // namespace hmr::nccl::test
