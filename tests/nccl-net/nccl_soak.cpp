// hmr-nccl-net-soak: two processes drive libnccl-net-hmr.so the way NCCL's proxy threads do,
// with every byte verified, for a number of steps or seconds.
//
// What NCCL does that the harness's exchanges do not (src/transport/net.cc, 2.28): each
// channel has a staging buffer of NCCL_STEPS (8) slots registered once; the receiving proxy
// keeps up to 8 steps posted, one irecv per slot, and tests the oldest; the sending proxy
// isends step s from slot s % 8 once the GPU filled it, asks again while isend gives no
// request, and the GPU refills the slot as soon as the send completed; several channels
// progress in one thread; both directions run at once (a ring of two). Here:
//   - each rank has `channels` send comms and `channels` recv comms to the other rank;
//   - message sizes are random from 0 to the slot (seeded, so both sides know each one);
//   - a sender rewrites a slot with the next step's bytes the moment its send completes, and
//     a receiver checks a step's bytes and size, then scribbles over the slot before it posts
//     the slot again: a provider or plugin that reads a source late, writes a target late, or
//     matches a message to the wrong step, fails the run with the step, offset and channel;
//   - after a receive, an iflush of the received bytes (as NCCL does for GPU buffers), tested
//     to completion when the plugin returns a request;
//   - every `reg_every` steps a random sub-range of a slot is registered and deregistered, as
//     NCCL registers user buffers inside larger registered ones (regIsGlobal);
//   - with --group N, every receive is a grouped receive of N buffers (tags 0..N-1), and each
//     buffer's sends move on by themselves, so one is often a step ahead of another (NCCL's
//     PXN and shared comms);
//   - hmr's open MRs before the comms and after they closed, and file descriptors before the
//     first init and after finalize, must be equal;
//   - with HMR_NCCL_CHECK_LANDED=1 a receiver leaves a slot as it arrived, and the plugin
//     checks that its bytes stay so until it is posted again (net/landed_bytes_check.h):
//     each warning it logs fails the run.
//
// With --net socket the same run drives NCCL's own socket transport (nccl_socket_reference.h)
// instead of the plugin: the pattern checked against the reference, so that what the soak
// asks of the plugin is what NCCL's transports are asked.  There it leaves out what NCCL
// would not do to a host-memory transport without flushes (iflush), and hmr's statistics.
//
//   hmr-nccl-net-soak [--provider tcp|shm] [--channels C] [--steps N] [--seconds S]
//                     [--slot BYTES] [--seed N] [--reg-every K] [--group N] [--net hmr|socket]
// prints  RESULT metric=nccl_net_soak provider=<p> channels=<C> steps=<n> bytes=<b>
//         seconds=<s> GBps=<g> errors=0      and exits 0, or names the first error and exits 1.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_socket_reference.h"
#include "net/boolean_setting.h"
#include "peer_process.h"
#include "plugin_under_test.h"
#include "rank.h"

namespace hmr::nccl::test {
namespace {

constexpr int kSteps = 8;  // NCCL_STEPS

struct Options {
  std::string provider = "shm";
  int channels = 4;
  long steps = 2000;    // per channel and direction; with --seconds, an upper bound
  double seconds = 0;   // > 0: stop after this long (both ranks agree on the step count)
  size_t slot = 512 * 1024;  // NCCL's SIMPLE buffer (4 MiB) over NCCL_STEPS
  uint64_t seed = 1;
  int reg_every = 16;
  int group = 1;  // buffers per receive (NCCL's grouped receives, up to maxRecvs)
  std::string net = "hmr";  // or "socket": NCCL's own socket transport
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "hmr-nccl-net-soak (pid %d): %s\n", static_cast<int>(getpid()), what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void check(bool ok, const std::string& what) {
  if (!ok) die(what);
}

// The plugin's warnings go to stderr, as with no logger; those of HMR_NCCL_CHECK_LANDED
// (bytes of a completed receive that changed before it was posted again) are counted: each is
// an error of the run.  Its checksum lines (one per message at each end: "HMR_NCCL_CHECK_SUM
// sent|received <key and sum>") are folded into one digest per side, order-free, which the
// ranks compare at the end: one rank's "sent" must be the other's "received".
std::atomic<int> g_landed_warnings{0};
struct ChecksumDigest {
  std::atomic<uint64_t> digest{0};
  std::atomic<uint64_t> count{0};
  void add(const char* text) {
    uint64_t h = 0;
    for (const char* c = text; *c != '\0'; ++c) h = splitmix64(h ^ static_cast<uint8_t>(*c));
    digest ^= h;
    ++count;
  }
};
ChecksumDigest g_sent_sums, g_received_sums;
__attribute__((format(printf, 5, 6))) void soak_logger(ncclDebugLogLevel level, unsigned long,
                                                       const char*, int, const char* fmt, ...) {
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  if (const char* sum = std::strstr(line, "HMR_NCCL_CHECK_SUM ")) {
    sum += 19;
    if (std::strncmp(sum, "sent ", 5) == 0) g_sent_sums.add(sum + 5);
    if (std::strncmp(sum, "received ", 9) == 0) g_received_sums.add(sum + 9);
  }
  if (level != NCCL_LOG_WARN) return;
  std::fprintf(stderr, "%s\n", line);
  if (std::strstr(line, "HMR_NCCL_CHECK_LANDED") != nullptr) ++g_landed_warnings;
}

// HMR_NCCL_CHECK_LANDED on, read as the plugin reads it: the plugin itself watches received
// bytes until they are posted again, so the receiver does not scribble over them.
bool plugin_checks_landed_bytes() {
  const char* value = std::getenv("HMR_NCCL_CHECK_LANDED");
  return value != nullptr && parse_boolean_setting(value).value_or(false);
}

// Open file descriptors, less the GPU driver's and hmr's one process-lifetime eventfd.
// Where libcuda is installed, hmr's pointer detection initialises the driver, which keeps
// /dev/nvidia* open for the life of the process (13 of them on an H200 host), as it does in
// every NCCL process.  hmr's first cache starts the thread that deregisters what monitors
// leave dead (cache/deferred_reaper.h), with an eventfd that lives as long: `eventfds`
// counts those, and a run may add one.
int count_own_fds(int* eventfds) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  *eventfds = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t len = readlink(link.c_str(), target, sizeof target - 1);
    if (len > 0 && std::strncmp(target, "/dev/nvidia", 11) == 0) continue;
    if (len > 0 && std::strcmp(target, "anon_inode:[eventfd]") == 0) {
      ++*eventfds;
      continue;
    }
    ++n;
  }
  closedir(dir);
  return n - 1;  // the directory's own fd
}

// What step `step` of channel `channel` from rank `from` carries: its size and pattern seed.
struct StepSpec {
  size_t size;
  uint64_t seed;
};
// Buffer `part` of the step: a slot holds `group` buffers of part_size() bytes each.
StepSpec step_spec(const Options& o, int from, int channel, long step, int part) {
  const uint64_t r = splitmix64(o.seed ^ splitmix64((static_cast<uint64_t>(from) << 56) ^
                                      (static_cast<uint64_t>(channel) << 40) ^
                                      (static_cast<uint64_t>(part) << 36) ^
                                      static_cast<uint64_t>(step)));
  const size_t most = o.slot / static_cast<size_t>(o.group);
  size_t size;
  switch (r % 8) {
    case 0: size = 0; break;                   // NCCL sends empty steps too
    case 1: size = most; break;                // a full buffer
    case 2: size = 1 + (r >> 8) % 64; break;   // tiny
    default: size = (r >> 8) % (most + 1); break;
  }
  return {size, splitmix64(r)};
}

// One of the 8 steps of a staging buffer.  A receiver posts it as one (grouped) receive; a
// sender has one request per buffer of the group, as NCCL's PXN and shared comms have one
// sender per buffer: each (a "part") moves on by itself, and may be a step ahead of another.
struct Slot {
  void* request = nullptr;  // receiver
  long step = -1;           // receiver
  std::array<void*, 8> part_request{};  // sender, per part
  std::array<long, 8> part_step{};      // sender: the step part p of this slot carries
  std::array<bool, 8> part_filled{};    // sender: part p holds its step's bytes, not yet sent
};

struct Direction {
  void* comm = nullptr;
  std::unique_ptr<HostBuffer> buffer;
  void* mh = nullptr;
  std::array<Slot, kSteps> slots{};
  long next = 0;  // receiver: next step to post; sender: most steps any part handed to isend
  long done = 0;  // receiver: steps verified; sender: fewest steps any part completed
  std::array<long, 8> part_next{};  // sender: per part, the next step to send
  std::array<long, 8> part_done{};  // sender: per part, steps completed
  uint8_t* slot_data(int i, size_t slot) const { return buffer->data() + static_cast<size_t>(i) * slot; }
};

struct ChannelState {
  Direction send, recv;
  void* listen = nullptr;
};

class Soak {
 public:
  Soak(const Options& o, int rank, OobChannel& oob) : o_(o), rank_(rank), oob_(oob) {}
  const bool checks_landed_ = plugin_checks_landed_bytes();

  int run() {
    int eventfds_before = 0;
    const int fds_before = count_own_fds(&eventfds_before);
    setenv("HMR_NCCL_PROVIDER", o_.provider.c_str(), 1);
    std::string why;
    if (o_.net == "socket") {
      net_ = open_nccl_socket_transport(&why);
      if (net_ == nullptr) {  // not this run's failure: ctest's skip (77), with the reason
        std::fprintf(stderr, "hmr-nccl-net-soak: NCCL's socket transport cannot be used here: %s\n", why.c_str());
        std::exit(77);
      }
    } else {
      library_ = PluginLibrary::open(plugin_path(), &why);
      check(library_ != nullptr, why);
      net_ = library_->table(11, &why);
      check(net_ != nullptr, why);
    }
    check(net_->init(soak_logger) == ncclSuccess, "init failed");
    Properties properties;
    check(net_->properties(0, &properties) == ncclSuccess, "getProperties failed");
    check(o_.group <= properties.max_recvs, "--group " + std::to_string(o_.group) + ": " + net_->name() +
                                                " takes at most " + std::to_string(properties.max_recvs) +
                                                " buffers per receive (maxRecvs)");
    const hmr_domain_stats before = stats();
    connect();
    const long steps = agree_on_steps();
    const auto start = Clock::now();
    size_t bytes = 0;
    progress(steps, &bytes);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    close_all();
    const hmr_domain_stats after = stats();
    check(after.mr_open == before.mr_open,
          "hmr MRs open on device 0: " + std::to_string(before.mr_open) + " before the comms, " +
              std::to_string(after.mr_open) + " after they closed (a registration was lost)");
    check(after.registration_errors == before.registration_errors, "a registration failed");
    check(net_->finalize() == ncclSuccess, "finalize failed");
    check(g_landed_warnings == 0, std::to_string(g_landed_warnings.load()) + " receives' bytes "
          "changed after test() reported them done (HMR_NCCL_CHECK_LANDED)");
    net_.reset();
    library_.reset();  // (the plugin stays mapped: it is linked -z nodelete)
    int eventfds_after = 0;
    const int fds_after = count_own_fds(&eventfds_after);
    check(fds_after == fds_before && eventfds_after <= eventfds_before + 1,
          "open file descriptors: " + std::to_string(fds_before) + " (and " +
              std::to_string(eventfds_before) + " eventfds) before init, " +
              std::to_string(fds_after) + " (and " + std::to_string(eventfds_after) +
              ") after finalize");
    // Both ranks report; rank 0 prints the run's line with the bytes both received.
    // (With HMR_NCCL_CHECK_LANDED, rank 1's checksum digests too: rank 0 compares them.)
    if (rank_ == 1) {
      oob_send(std::to_string(bytes) + " " + std::to_string(g_sent_sums.digest) + " " +
               std::to_string(g_sent_sums.count) + " " + std::to_string(g_received_sums.digest) +
               " " + std::to_string(g_received_sums.count));
      return 0;
    }
    std::istringstream peer(oob_receive());
    uint64_t peer_bytes = 0;
    uint64_t peer_sent = 0, peer_sent_count = 0, peer_received = 0, peer_received_count = 0;
    peer >> peer_bytes >> peer_sent >> peer_sent_count >> peer_received >> peer_received_count;
    bytes += peer_bytes;
    if (checks_landed_ && o_.net == "hmr") {
      check(g_sent_sums.count > 0 && g_sent_sums.count == peer_received_count &&
                g_sent_sums.digest == peer_received,
            "HMR_NCCL_CHECK_SUM: rank 0 sent " + std::to_string(g_sent_sums.count) +
                " messages, rank 1 received " + std::to_string(peer_received_count) +
                (g_sent_sums.digest == peer_received ? "" : ", with other checksums"));
      check(peer_sent_count > 0 && peer_sent_count == g_received_sums.count &&
                peer_sent == g_received_sums.digest,
            "HMR_NCCL_CHECK_SUM: rank 1 sent " + std::to_string(peer_sent_count) +
                " messages, rank 0 received " + std::to_string(g_received_sums.count.load()) +
                (peer_sent == g_received_sums.digest ? "" : ", with other checksums"));
      std::printf("info: HMR_NCCL_CHECK_SUM: %llu and %llu messages, both ends' checksums equal\n",
                  static_cast<unsigned long long>(g_sent_sums.count.load()),
                  static_cast<unsigned long long>(peer_sent_count));
    }
    long received = 0;  // steps this rank verified, over every channel
    for (const ChannelState& ch : channels_) received += ch.recv.done;
    std::printf("RESULT metric=nccl_net_soak provider=%s channels=%d steps=%ld bytes=%zu "
                "seconds=%.2f GBps=%.3f errors=0\n",
                o_.net == "socket" ? "nccl-socket" : o_.provider.c_str(), o_.channels, received, bytes, seconds, bytes / seconds / 1e9);
    return 0;
  }

 private:
  void oob_send(const std::string& text) {
    std::string why;
    check(oob_.send(text, &why), "out-of-band send: " + why);
  }
  std::string oob_receive() {
    std::string why;
    auto text = oob_.receive_text(Clock::now() + std::chrono::seconds(60), &why);
    check(text.has_value(), "out-of-band receive: " + why);
    return *text;
  }

  hmr_domain_stats stats() const {
    hmr_domain_stats out{};
    out.size = sizeof out;
    if (library_ == nullptr) return out;  // NCCL's socket transport: no hmr underneath
    check(library_->query_stats(0, &out) == 0, "hmr_nccl_net_query_stats failed");
    return out;
  }

  // Every channel's listener, the handles traded, then connect and accept until all exist.
  void connect() {
    channels_.resize(static_cast<size_t>(o_.channels));
    std::vector<uint8_t> handles(static_cast<size_t>(o_.channels) * NCCL_NET_HANDLE_MAXSIZE);
    for (int c = 0; c < o_.channels; ++c) {
      check(net_->listen(0, handles.data() + c * NCCL_NET_HANDLE_MAXSIZE, &channels_[c].listen) ==
                ncclSuccess, "listen failed");
    }
    std::string why;
    check(oob_.send(handles, &why), why);
    auto peer = oob_.receive(Clock::now() + std::chrono::seconds(60), &why);
    check(peer && peer->size() == handles.size(), "no handles from the peer: " + why);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      bool all = true;
      for (int c = 0; c < o_.channels; ++c) {
        ChannelState& ch = channels_[c];
        if (ch.send.comm == nullptr) {
          check(net_->connect(0, peer->data() + c * NCCL_NET_HANDLE_MAXSIZE, &ch.send.comm) ==
                    ncclSuccess, "connect failed");
        }
        if (ch.recv.comm == nullptr) {
          check(net_->accept(ch.listen, &ch.recv.comm) == ncclSuccess, "accept failed");
        }
        all = all && ch.send.comm != nullptr && ch.recv.comm != nullptr;
      }
      if (all) break;
      check(Clock::now() < deadline, "connections not up within 60 s");
    }
    const size_t bytes = o_.slot * kSteps;
    for (ChannelState& ch : channels_) {
      for (Direction* d : {&ch.send, &ch.recv}) {
        d->buffer = std::make_unique<HostBuffer>(bytes);
        std::memset(d->buffer->data(), 0xee, bytes);
        check(net_->reg_mr(d->comm, d->buffer->data(), bytes, NCCL_PTR_HOST, &d->mh) == ncclSuccess,
              "regMr of the staging buffer failed");
      }
    }
  }

  // With --seconds, rank 0 measures how many steps fit (a short probe is not needed: both
  // run `steps` at most and rank 0 tells rank 1 when it stops posting).  Kept simple: the
  // step count is fixed up front and --seconds only bounds the run's deadline.
  long agree_on_steps() {
    deadline_ = Clock::now() + std::chrono::seconds(o_.seconds > 0 ? static_cast<long>(o_.seconds) + 30 : 600);
    return o_.steps;
  }

  void progress(long steps, size_t* bytes) {
    const auto stop_posting = o_.seconds > 0
                                  ? Clock::now() + std::chrono::milliseconds(static_cast<long>(o_.seconds * 1000))
                                  : Clock::time_point::max();
    // With --seconds both ranks must agree how many steps each channel carries.  When its
    // time is up a rank freezes what it has handed to isend and posted with irecv, per
    // channel, and tells the other; then each direction carries the larger of what its
    // sender sent and its receiver posted, so no receive is left posted and none is missed.
    std::vector<long> limit(static_cast<size_t>(o_.channels), steps);   // steps I send
    std::vector<long> expect(static_cast<size_t>(o_.channels), steps);  // steps I receive
    bool told = o_.seconds <= 0, heard = o_.seconds <= 0;
    for (;;) {
      bool finished = true;
      for (int c = 0; c < o_.channels; ++c) {
        ChannelState& ch = channels_[c];
        send_side(c, ch.send, limit[c]);
        recv_side(c, ch.recv, expect[c], bytes);
        finished = finished && ch.send.done >= limit[c] && ch.recv.done >= expect[c];
      }
      if (!told && Clock::now() >= stop_posting) {
        std::string text;
        for (int c = 0; c < o_.channels; ++c) {
          limit[c] = channels_[c].send.next;
          expect[c] = channels_[c].recv.next;
          text += std::to_string(limit[c]) + " " + std::to_string(expect[c]) + " ";
        }
        oob_send(text);
        told = true;
      }
      if (told && !heard) {
        std::string why;
        auto text = oob_.receive_text(Clock::now(), &why);
        if (text) {
          size_t pos = 0;
          for (int c = 0; c < o_.channels; ++c) {
            size_t used = 0;
            const long peer_sent = std::stol(text->substr(pos), &used);
            pos += used;
            const long peer_posted = std::stol(text->substr(pos), &used);
            pos += used;
            expect[c] = std::max(expect[c], peer_sent);
            limit[c] = std::max(limit[c], peer_posted);
          }
          heard = true;
          continue;  // `finished` above was judged by the limits before these
        }
      }
      if (finished && told && heard) break;
      if (Clock::now() >= deadline_) {
        std::string limits;
        for (int c = 0; c < o_.channels; ++c) {
          limits.append(" ").append(std::to_string(limit[c])).append("/").append(std::to_string(expect[c]));
        }
        die("rank " + std::to_string(rank_) + ": the run's deadline passed: " + state() +
            "send/receive limits" + limits + (told ? ", told" : "") + (heard ? ", heard" : ""));
      }
    }
  }

  std::string state() const {
    std::string s;
    for (int c = 0; c < o_.channels; ++c) {
      s += "channel " + std::to_string(c) + ": sent " + std::to_string(channels_[c].send.done) +
           "/" + std::to_string(channels_[c].send.next) + ", received " +
           std::to_string(channels_[c].recv.done) + "/" + std::to_string(channels_[c].recv.next) + "; ";
    }
    return s;
  }

  std::string where(int c, long step) const {
    return "rank " + std::to_string(rank_) + " channel " + std::to_string(c) + " step " +
           std::to_string(step);
  }

  size_t part_size() const { return o_.slot / static_cast<size_t>(o_.group); }

  void send_side(int c, Direction& d, long limit) {
    // Each part sends its steps in order (NCCL's proxy sends step s only after s-1 was
    // handed over), the parts in a changing order, so one is often a step ahead of another.
    const int first = static_cast<int>(splitmix64(static_cast<uint64_t>(d.next) ^ sends_++) % o_.group);
    for (int k = 0; k < o_.group; ++k) {
      const int part = (first + k) % o_.group;
      while (d.part_next[part] < limit) {
        const long step = d.part_next[part];
        Slot& slot = d.slots[step % kSteps];
        if (slot.part_request[part] != nullptr) break;  // its previous step is in flight
        const StepSpec spec = step_spec(o_, rank_, c, step, part);
        uint8_t* data = d.slot_data(static_cast<int>(step % kSteps), o_.slot) + part * part_size();
        if (!slot.part_filled[part]) {
          fill_pattern(data, spec.size, spec.seed);  // the GPU writing the buffer
          slot.part_filled[part] = true;
        }
        void* request = nullptr;
        const ncclResult_t rc = net_->isend(d.comm, data, spec.size, part, d.mh, &request);
        check(rc == ncclSuccess, where(c, step) + " part " + std::to_string(part) +
                                     ": isend failed (" + std::to_string(rc) + ")");
        if (request == nullptr) break;  // NCCL asks again later
        slot.part_request[part] = request;
        slot.part_step[part] = step;
        slot.part_filled[part] = false;
        d.part_next[part] = step + 1;
        d.next = std::max(d.next, step + 1);
      }
      // Test the part's oldest send in flight, as the proxy does.
      while (d.part_done[part] < d.part_next[part]) {
        Slot& slot = d.slots[d.part_done[part] % kSteps];
        int done = 0, size = -1;
        const ncclResult_t rc = net_->test(slot.part_request[part], &done, &size);
        check(rc == ncclSuccess, where(c, slot.part_step[part]) + ": test of a send failed (" +
                                     std::to_string(rc) + ")");
        if (!done) break;
        // The send completed: the GPU may write the buffer again right away, and does.
        std::memset(d.slot_data(static_cast<int>(d.part_done[part] % kSteps), o_.slot) +
                        part * part_size(), 0xa5, part_size());
        slot.part_request[part] = nullptr;
        ++d.part_done[part];
        if (part == 0) maybe_register_sub_range(d, slot.part_step[part]);
      }
    }
    d.done = *std::min_element(d.part_done.begin(), d.part_done.begin() + o_.group);
  }

  void recv_side(int c, Direction& d, long expect, size_t* bytes) {
    const int n = o_.group;
    while (d.next < expect && d.next - d.done < kSteps) {
      Slot& slot = d.slots[d.next % kSteps];
      uint8_t* base = d.slot_data(static_cast<int>(d.next % kSteps), o_.slot);
      void* data[8];
      size_t sizes[8];
      int tags[8];
      void* mhs[8];
      for (int p = 0; p < n; ++p) {
        data[p] = base + p * part_size();
        sizes[p] = part_size();
        tags[p] = p;
        mhs[p] = d.mh;
      }
      void* request = nullptr;
      const ncclResult_t rc = net_->irecv(d.comm, n, data, sizes, tags, mhs, &request);
      check(rc == ncclSuccess, where(c, d.next) + ": irecv failed (" + std::to_string(rc) + ")");
      if (request == nullptr) break;
      slot.request = request;
      slot.step = d.next;
      ++d.next;
    }
    while (d.done < d.next) {
      Slot& slot = d.slots[d.done % kSteps];
      int done = 0;
      int sizes[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      const ncclResult_t rc = net_->test(slot.request, &done, sizes);
      check(rc == ncclSuccess, where(c, slot.step) + ": test of a receive failed (" + std::to_string(rc) + ")");
      if (!done) break;
      uint8_t* base = d.slot_data(static_cast<int>(d.done % kSteps), o_.slot);
      for (int p = 0; p < n; ++p) {
        const StepSpec spec = step_spec(o_, 1 - rank_, c, slot.step, p);
        const std::string which = where(c, slot.step) + " buffer " + std::to_string(p);
        check(static_cast<size_t>(sizes[p]) == spec.size,
              which + ": received " + std::to_string(sizes[p]) + " bytes, sent " +
                  std::to_string(spec.size));
        uint8_t* data = base + p * part_size();
        flush(c, d, data, sizes[p], slot.step);
        const size_t bad = find_pattern_mismatch(data, spec.size, spec.seed);
        check(bad == SIZE_MAX, which + ": byte " + std::to_string(bad) + " of " +
                                   std::to_string(spec.size) + " is not what was sent");
        *bytes += spec.size;
      }
      // The GPU consumed it; a late write shows next time (or in the plugin's own check).
      if (!checks_landed_) std::memset(base, 0xee, o_.slot);
      slot.request = nullptr;
      ++d.done;
    }
  }

  void flush(int c, Direction& d, void* data, int size, long step) {
    // NCCL flushes only GPU buffers written through GPUDirect; its socket transport takes host
    // memory only and answers every iflush with an error (net_socket.cc: "We don't support
    // CUDA pointers, so we don't need a flush operation").
    if (library_ == nullptr) return;
    if (size == 0) return;
    void* request = nullptr;
    void* mh = d.mh;
    const ncclResult_t rc = net_->iflush(d.comm, 1, &data, &size, &mh, &request);
    check(rc == ncclSuccess, where(c, step) + ": iflush failed (" + std::to_string(rc) + ")");
    int done = 0;
    while (request != nullptr && !done) {
      check(net_->test(request, &done, nullptr) == ncclSuccess, where(c, step) + ": test of a flush failed");
      check(Clock::now() < deadline_, where(c, step) + ": the flush never completed");
    }
  }

  // A registration of a sub-range of the staging buffer and its deregistration, as NCCL
  // registers user buffers (and ranges of them) while traffic goes on.
  void maybe_register_sub_range(Direction& d, long step) {
    if (o_.reg_every <= 0 || step % o_.reg_every != 0) return;
    const uint64_t r = splitmix64(o_.seed ^ static_cast<uint64_t>(step) ^ 0x5eed);
    const size_t total = o_.slot * kSteps;
    const size_t offset = r % total;
    const size_t len = 1 + (r >> 20) % (total - offset);
    void* mh = nullptr;
    check(net_->reg_mr(d.comm, d.buffer->data() + offset, len, NCCL_PTR_HOST, &mh) == ncclSuccess,
          "regMr of a sub-range failed");
    check(net_->dereg_mr(d.comm, mh) == ncclSuccess, "deregMr of a sub-range failed");
  }

  void close_all() {
    for (ChannelState& ch : channels_) {
      check(net_->dereg_mr(ch.send.comm, ch.send.mh) == ncclSuccess, "deregMr failed");
      check(net_->dereg_mr(ch.recv.comm, ch.recv.mh) == ncclSuccess, "deregMr failed");
    }
    // Both ranks are done before either closes (a close may drop what the other still tests).
    oob_send("closing");
    oob_receive();
    for (ChannelState& ch : channels_) {
      check(net_->close_send(ch.send.comm) == ncclSuccess, "closeSend failed");
      check(net_->close_recv(ch.recv.comm) == ncclSuccess, "closeRecv failed");
      check(net_->close_listen(ch.listen) == ncclSuccess, "closeListen failed");
    }
  }

  const Options& o_;
  int rank_;
  OobChannel& oob_;
  std::unique_ptr<PluginLibrary> library_;
  std::unique_ptr<Net> net_;
  std::vector<ChannelState> channels_;
  Clock::time_point deadline_;
  uint64_t sends_ = 0;  // send_side calls, to vary the order of the parts
};

}  // namespace
}  // namespace hmr::nccl::test

int main(int argc, char** argv) {
  using namespace hmr::nccl::test;
  Options o;
  bool peer = false;
  std::vector<std::string> forwarded;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--peer") {
      peer = true;
      continue;
    }
    if (i + 1 >= argc) die(arg + " needs a value");
    const std::string value = argv[++i];
    forwarded.insert(forwarded.end(), {arg, value});
    if (arg == "--provider") o.provider = value;
    else if (arg == "--channels") o.channels = std::stoi(value);
    else if (arg == "--steps") o.steps = std::stol(value);
    else if (arg == "--seconds") o.seconds = std::stod(value);
    else if (arg == "--slot") o.slot = std::stoul(value);
    else if (arg == "--seed") o.seed = std::stoull(value);
    else if (arg == "--reg-every") o.reg_every = std::stoi(value);
    else if (arg == "--group") o.group = std::stoi(value);
    else if (arg == "--net") o.net = value;
    else die("unknown argument " + arg + " (--provider, --channels, --steps, --seconds, --slot, --seed, --reg-every, --group, --net)");
  }
  check(o.channels > 0 && o.channels <= 64 && o.steps > 0 && o.slot > 0 && o.slot <= (64u << 20) &&
            o.group >= 1 && o.group <= 8 && o.slot % static_cast<size_t>(o.group) == 0 &&
            (o.net == "hmr" || o.net == "socket"),
        "bad options");
  if (o.seconds > 0) o.steps = 1L << 40;  // bounded by time; the ranks agree on the count
  if (peer) {
    OobChannel oob(kPeerChannelFd);
    return Soak(o, 1, oob).run();
  }
  std::vector<std::string> args = {self_executable(), "--peer"};
  args.insert(args.end(), forwarded.begin(), forwarded.end());
  std::string why;
  auto other = PeerProcess::start(args, &why);
  check(other.has_value(), why);
  const int rc = Soak(o, 0, other->channel()).run();
  const auto status = other->wait(Clock::now() + std::chrono::seconds(60));
  check(status == std::optional<int>(0), "the other rank failed (its reason is above)");
  return rc;
}
