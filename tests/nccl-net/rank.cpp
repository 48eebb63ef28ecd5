#include "rank.h"

#include <hmr/hmr.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>

namespace hmr::nccl::test {
namespace {

std::mutex g_log_mutex;
std::vector<LogLine>& log_lines() {
  static auto* lines = new std::vector<LogLine>;
  return *lines;
}

uint64_t message_seed(uint64_t seed, const MessageSpec& m) {
  return splitmix64(seed ^ (static_cast<uint64_t>(static_cast<uint32_t>(m.tag)) << 40) ^ m.size);
}

constexpr uint8_t kCanary = 0xcd;
constexpr size_t kCanaryBytes = 64;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string describe(ncclResult_t rc) { return result_name(rc); }

}  // namespace

void capture_log(ncclDebugLogLevel level, unsigned long /*flags*/, const char* /*file*/,
                 int /*line*/, const char* fmt, ...) {
  char text[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  if (std::getenv("HMR_NCCL_HARNESS_VERBOSE") != nullptr) {
    const double t = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    std::fprintf(stderr, "[pid %d %.3f] %s %s\n", static_cast<int>(getpid()), t,
                 level == NCCL_LOG_WARN ? "WARN" : "INFO", text);
  }
  std::lock_guard lock(g_log_mutex);
  log_lines().push_back(LogLine{level, text});
}

std::vector<LogLine> logged() {
  std::lock_guard lock(g_log_mutex);
  return log_lines();
}

size_t log_mark() {
  std::lock_guard lock(g_log_mutex);
  return log_lines().size();
}

bool warned_since(size_t mark, const std::string& needle) {
  std::lock_guard lock(g_log_mutex);
  for (size_t i = mark; i < log_lines().size(); ++i) {
    const LogLine& l = log_lines()[i];
    if (l.level == NCCL_LOG_WARN && l.text.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string warnings_since(size_t mark) {
  std::lock_guard lock(g_log_mutex);
  std::string out;
  for (size_t i = mark; i < log_lines().size(); ++i) {
    if (log_lines()[i].level == NCCL_LOG_WARN) out += "\n    " + log_lines()[i].text;
  }
  return out.empty() ? " (none)" : out;
}

std::string Failures::text() const {
  std::string out;
  for (const std::string& s : list) out += "\n  - " + s;
  return out;
}

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
  }
  return "ncclResult_t(?)";
}

// Mapped memory on transparent huge pages where it is large: paging in 64 MiB 4 KiB at a time
// costs about a second on this project's virtual machines, and what the test measures is the
// plugin, not the page-fault path.
HostBuffer::HostBuffer(size_t size) : size_(size) {
  constexpr size_t kHuge = size_t{2} << 20;
  mapped_ = round_up(size == 0 ? 1 : size, kHuge);
  void* p = mmap(nullptr, mapped_ + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  // A 2 MiB-aligned start inside the mapping; the slack is unmapped again.
  const uintptr_t start = round_up(reinterpret_cast<uintptr_t>(p), kHuge);
  const size_t head = start - reinterpret_cast<uintptr_t>(p);
  if (head != 0) munmap(p, head);
  if (kHuge - head != 0) munmap(reinterpret_cast<void*>(start + mapped_), kHuge - head);
  data_ = reinterpret_cast<uint8_t*>(start);
  madvise(data_, mapped_, MADV_HUGEPAGE);
}

HostBuffer::~HostBuffer() { munmap(data_, mapped_); }

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill_pattern(uint8_t* p, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = splitmix64(seed + i);
    std::memcpy(p + i, &w, 8);
  }
  if (i < n) {
    const uint64_t w = splitmix64(seed + i);
    std::memcpy(p + i, &w, n - i);
  }
}

size_t find_pattern_mismatch(const uint8_t* p, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = splitmix64(seed + i);
    if (std::memcmp(p + i, &w, 8) != 0) {
      for (size_t j = 0; j < 8; ++j) {
        if (p[i + j] != reinterpret_cast<const uint8_t*>(&w)[j]) return i + j;
      }
    }
  }
  if (i < n) {
    const uint64_t w = splitmix64(seed + i);
    for (size_t j = 0; i + j < n; ++j) {
      if (p[i + j] != reinterpret_cast<const uint8_t*>(&w)[j]) return i + j;
    }
  }
  return SIZE_MAX;
}

Rank::Rank(std::unique_ptr<Net> net, int id, Clock::duration budget)
    : net_(std::move(net)), id_(id), deadline_(Clock::now() + budget) {}

bool Rank::start(const PluginLibrary& /*library*/, Failures* f) {
  // (append, not "v" + ...: GCC 12 warns -Wrestrict falsely on a one-character literal + a
  // temporary string at -O2, GCC bug 105651)
  const std::string v = std::string("v").append(std::to_string(net_->version())).append(": ");
  if (!f->check(std::string(net_->name()) == "hmr", v + "the table's name is '" + net_->name() + "', not 'hmr'")) {
    return false;
  }
  const ncclResult_t rc = net_->init(capture_log);
  if (!f->check(rc == ncclSuccess, v + "init: " + describe(rc))) return false;
  int ndev = -1;
  if (!f->check(net_->devices(&ndev) == ncclSuccess && ndev >= 1,
                v + "devices: " + std::to_string(ndev) + " devices")) {
    return false;
  }
  const ncclResult_t prc = net_->properties(0, &properties_);
  if (!f->check(prc == ncclSuccess, v + "getProperties(0): " + describe(prc))) return false;
  const Properties& p = properties_;
  f->check(!p.name.empty(), v + "getProperties: empty name");
  f->check((p.ptr_support & NCCL_PTR_HOST) != 0, v + "getProperties: no NCCL_PTR_HOST");
  f->check(p.reg_is_global == 1, v + "getProperties: regIsGlobal is not 1");
  f->check(p.max_recvs >= 8, v + "getProperties: maxRecvs " + std::to_string(p.max_recvs) + " < 8");
  f->check(p.max_comms > 0 && p.max_comms <= 65536 && p.speed > 0 && p.port >= 0,
           v + "getProperties: maxComms/speed/port");
  f->check(p.net_device_type == NCCL_NET_DEVICE_HOST, v + "getProperties: netDeviceType is not host");
  if (net_->version() >= 9) {
    f->check(p.max_p2p_bytes >= (size_t{64} << 20) && p.max_coll_bytes >= (size_t{64} << 20),
             v + "getProperties: maxP2pBytes/maxCollBytes under 64 MiB");
    f->check(p.vdevs == 1, v + "getProperties: vProps.ndevs is not 1");
  }
  if (net_->version() >= 11) {
    f->check(p.max_multi_request_size >= 1, v + "getProperties: maxMultiRequestSize < 1");
  }
  Properties ignored;
  const size_t mark = log_mark();
  f->check(net_->properties(ndev, &ignored) == ncclInvalidArgument && warned_since(mark, "does not exist"),
           v + "getProperties of a device that does not exist: no ncclInvalidArgument with a reason");
  f->check(net_->devices(nullptr) != ncclSuccess, v + "devices(NULL) succeeded");
  return f->ok();
}

bool Rank::connect_both(OobChannel* oob, Link* link, Failures* f) {
  uint8_t handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  ncclResult_t rc = net_->listen(0, handle, &link->listen);
  if (!f->check(rc == ncclSuccess && link->listen != nullptr, "listen: " + describe(rc))) return false;
  std::vector<uint8_t> peer_handle(handle, handle + sizeof handle);
  if (oob != nullptr) {
    std::string why;
    if (!oob->send(peer_handle, &why)) return f->check(false, why);
    auto received = oob->receive(deadline_, &why);
    if (!received) return f->check(false, "waiting for the peer's listen handle: " + why);
    if (!f->check(received->size() == NCCL_NET_HANDLE_MAXSIZE, "the peer's handle is not 128 bytes")) {
      return false;
    }
    peer_handle = *received;
  }
  // As NCCL's proxy does: call connect and accept again and again until each returns a comm.
  size_t calls = 0;
  while (link->send == nullptr || link->recv == nullptr) {
    if (expired()) {
      return f->check(false, "connect/accept: no connection after " + std::to_string(calls) +
                                 " calls, before the deadline (send " +
                                 (link->send ? "up" : "down") + ", recv " +
                                 (link->recv ? "up" : "down") + ")");
    }
    ++calls;
    if (link->send == nullptr) {
      rc = net_->connect(0, peer_handle.data(), &link->send);
      if (!f->check(rc == ncclSuccess, "connect: " + describe(rc))) return false;
    }
    if (link->recv == nullptr) {
      rc = net_->accept(link->listen, &link->recv);
      if (!f->check(rc == ncclSuccess, "accept: " + describe(rc))) return false;
    }
  }
  return true;
}

bool Rank::close(Link* link, Failures* f) {
  ncclResult_t rc;
  if (link->send != nullptr && (rc = net_->close_send(link->send)) != ncclSuccess) {
    f->add("closeSend: " + describe(rc));
  }
  if (link->recv != nullptr && (rc = net_->close_recv(link->recv)) != ncclSuccess) {
    f->add("closeRecv: " + describe(rc));
  }
  if (link->listen != nullptr && (rc = net_->close_listen(link->listen)) != ncclSuccess) {
    f->add("closeListen: " + describe(rc));
  }
  *link = Link{};
  return f->ok();
}

bool Rank::exchange(Link& link, const std::vector<std::vector<MessageSpec>>& receive_groups,
                    const std::vector<MessageSpec>& sends, uint64_t seed_out, uint64_t seed_in,
                    Failures* f, int registrations, size_t lead) {
  const size_t failures_before = f->list.size();
  // The arenas: receive buffers with a canary tail, then send buffers with their patterns.
  struct Posted {
    MessageSpec spec;
    size_t offset;
  };
  std::vector<std::vector<Posted>> groups;
  size_t recv_bytes = lead;
  for (const auto& group : receive_groups) {
    groups.emplace_back();
    for (const MessageSpec& m : group) {
      groups.back().push_back(Posted{m, recv_bytes});
      recv_bytes += round_up(m.posted + kCanaryBytes, 64);
    }
  }
  std::vector<size_t> send_offsets;
  size_t send_bytes = lead;
  for (const MessageSpec& m : sends) {
    send_offsets.push_back(send_bytes);
    send_bytes += round_up(m.size == 0 ? 1 : m.size, 64);
  }
  HostBuffer& recv_arena = arena(recv_arena_, recv_bytes);
  HostBuffer& send_arena = arena(send_arena_, send_bytes);
  std::memset(recv_arena.data(), kCanary, recv_bytes);
  if (lead != 0) std::memset(send_arena.data(), 0, lead);
  for (size_t i = 0; i < sends.size(); ++i) {
    fill_pattern(send_arena.data() + send_offsets[i], sends[i].size, message_seed(seed_out, sends[i]));
  }

  std::vector<void*> recv_mhs, send_mhs;
  auto deregister_all = [&] {
    for (void* mh : recv_mhs) {
      if (const ncclResult_t rc = net_->dereg_mr(link.recv, mh); rc != ncclSuccess) f->add("deregMr: " + describe(rc));
    }
    for (void* mh : send_mhs) {
      if (const ncclResult_t rc = net_->dereg_mr(link.send, mh); rc != ncclSuccess) f->add("deregMr: " + describe(rc));
    }
    return f->list.size() == failures_before;
  };
  // With a lead, the arenas are registered whole first and the messages use the registration
  // of the range from `lead` on: a sub-range of a registered buffer.
  for (int r = 0; r < registrations + (lead != 0 ? 1 : 0); ++r) {
    const size_t from = r == 0 ? 0 : lead;
    void* mh = nullptr;
    ncclResult_t rc = net_->reg_mr(link.recv, recv_arena.data() + from, recv_arena.size() - from,
                                   NCCL_PTR_HOST, &mh);
    if (!f->check(rc == ncclSuccess && mh != nullptr, "regMr (receive arena): " + describe(rc))) return deregister_all(), false;
    recv_mhs.push_back(mh);
    rc = net_->reg_mr(link.send, send_arena.data() + from, send_arena.size() - from, NCCL_PTR_HOST,
                      &mh);
    if (!f->check(rc == ncclSuccess && mh != nullptr, "regMr (send arena): " + describe(rc))) return deregister_all(), false;
    send_mhs.push_back(mh);
  }
  void* recv_mh = recv_mhs.back();
  void* send_mh = send_mhs.back();

  // Receives: every group posted before any send.
  struct Outstanding {
    void* request = nullptr;
    bool done = false;
  };
  std::vector<Outstanding> recvs(groups.size());
  auto test_recvs = [&]() -> bool {
    for (size_t g = 0; g < groups.size(); ++g) {
      Outstanding& o = recvs[g];
      if (o.request == nullptr || o.done) continue;
      int done = 0;
      int sizes[NCCL_NET_MAX_REQUESTS];
      std::fill(std::begin(sizes), std::end(sizes), -1);
      const ncclResult_t rc = net_->test(o.request, &done, sizes);
      if (!f->check(rc == ncclSuccess, "test (receive group " + std::to_string(g) + "): " + describe(rc))) return false;
      if (!done) continue;
      o.done = true;
      for (size_t i = 0; i < groups[g].size(); ++i) {
        const MessageSpec& m = groups[g][i].spec;
        f->check(sizes[i] == static_cast<int>(m.size),
                 "test reported " + std::to_string(sizes[i]) + " bytes for a " +
                     std::to_string(m.size) + "-byte message with tag " + std::to_string(m.tag));
      }
    }
    return true;
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    const int n = static_cast<int>(groups[g].size());
    void* data[NCCL_NET_MAX_REQUESTS];
    size_t sizes[NCCL_NET_MAX_REQUESTS];
    int tags[NCCL_NET_MAX_REQUESTS];
    void* mhs[NCCL_NET_MAX_REQUESTS];
    for (int i = 0; i < n; ++i) {
      data[i] = recv_arena.data() + groups[g][static_cast<size_t>(i)].offset;
      sizes[i] = groups[g][static_cast<size_t>(i)].spec.posted;
      tags[i] = groups[g][static_cast<size_t>(i)].spec.tag;
      mhs[i] = recv_mh;
    }
    while (recvs[g].request == nullptr) {
      if (!f->check(!expired(), "irecv: no request before the deadline")) return deregister_all(), false;
      const ncclResult_t rc = net_->irecv(link.recv, n, data, sizes, tags, mhs, &recvs[g].request);
      if (!f->check(rc == ncclSuccess, "irecv of " + std::to_string(n) + " buffers: " + describe(rc))) {
        return deregister_all(), false;
      }
    }
  }

  // Sends, all posted before any is tested (the receives are tested meanwhile: that is what
  // moves this rank's announcements to the peer).
  std::vector<Outstanding> send_requests(sends.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    while (send_requests[i].request == nullptr) {
      if (!f->check(!expired(), "isend of " + std::to_string(sends[i].size) + " bytes (tag " +
                                    std::to_string(sends[i].tag) + "): no request before the deadline, " +
                                    std::to_string(i) + " sends in flight")) {
        return deregister_all(), false;
      }
      const ncclResult_t rc = net_->isend(link.send, send_arena.data() + send_offsets[i], sends[i].size,
                                          sends[i].tag, send_mh, &send_requests[i].request);
      if (!f->check(rc == ncclSuccess, "isend of " + std::to_string(sends[i].size) + " bytes: " + describe(rc))) {
        return deregister_all(), false;
      }
      if (send_requests[i].request == nullptr && !test_recvs()) return deregister_all(), false;
    }
  }
  // Everything in flight; test until done.
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < sends.size(); ++i) {
      Outstanding& o = send_requests[i];
      if (o.done) continue;
      int done = 0;
      int size = -1;
      const ncclResult_t rc = net_->test(o.request, &done, &size);
      if (!f->check(rc == ncclSuccess, "test (send of " + std::to_string(sends[i].size) + " bytes): " + describe(rc))) {
        return deregister_all(), false;
      }
      if (done) {
        o.done = true;
        f->check(size == static_cast<int>(sends[i].size), "test reported " + std::to_string(size) +
                                                              " bytes sent for a " + std::to_string(sends[i].size) + "-byte send");
      }
      all = all && o.done;
    }
    if (!test_recvs()) return deregister_all(), false;
    for (const Outstanding& o : recvs) all = all && o.done;
    if (all) break;
    if (!f->check(!expired(), "test: requests still pending at the deadline")) return deregister_all(), false;
  }

  // Every byte, and nothing past a message.
  for (const auto& group : groups) {
    for (const Posted& p : group) {
      const uint8_t* data = recv_arena.data() + p.offset;
      const size_t bad = find_pattern_mismatch(data, p.spec.size, message_seed(seed_in, p.spec));
      f->check(bad == SIZE_MAX, "message with tag " + std::to_string(p.spec.tag) + " (" +
                                    std::to_string(p.spec.size) + " bytes): byte " +
                                    std::to_string(bad) + " differs from what was sent");
      for (size_t i = p.spec.size; i < p.spec.posted + kCanaryBytes; ++i) {
        if (data[i] != kCanary) {
          f->add("message with tag " + std::to_string(p.spec.tag) + ": byte " + std::to_string(i) +
                 " past its " + std::to_string(p.spec.size) + " bytes was written");
          break;
        }
      }
    }
  }
  return deregister_all() && f->list.size() == failures_before;
}

HostBuffer& Rank::arena(std::unique_ptr<HostBuffer>& slot, size_t bytes) {
  if (!slot || slot->size() < bytes) slot = std::make_unique<HostBuffer>(bytes < 4096 ? 4096 : bytes);
  return *slot;
}

bool Rank::stats(const PluginLibrary& library, hmr_domain_stats* out, Failures* f) {
  *out = hmr_domain_stats{};
  return f->check(library.query_stats(0, out) == 0, "hmr_nccl_net_query_stats(0) failed");
}

}  // namespace hmr::nccl::test
