// hmr-nccl-net-bench: libnccl-net-hmr.so against raw libfabric RMA on the same provider and
// against NCCL's own socket transport (NCCL_NET=Socket), two processes on this host.
//
// Plugin and Socket: the receiver keeps `window` irecvs of `size` bytes posted (reposting each
// as it completes), the sender keeps `window` isends in flight, both through the v11 net table,
// as NCCL's proxy does for one channel (NCCL's send/recv: 128 KiB chunks, 8 in flight).  Socket
// is NCCL's built-in transport, loaded from libnccl.so (nccl_socket_reference.h) and driven by
// the same loops: what NCCL would use between hosts without the plugin.  Raw: the same two
// processes open their own libfabric endpoint on the same provider, the receiver registers its
// buffers with fi_mr_reg and hands the key over once, and the sender streams fi_writedata with
// remote CQ data at the same window, with no per-message announcement: the provider's ceiling.
// Rounds rotate among them; each figure is the median of its rounds, timed on the receiver
// from a shared start to the last byte's completion.  --latency: round trips of --size bytes
// instead, each side keeping its next receive posted.
//
//   hmr-nccl-net-bench [--provider tcp|shm] [--size BYTES] [--messages N] [--window W]
//                      [--rounds R] [--latency] [--no-socket | --require-socket]
//                      [--only plugin|raw|socket]
// prints  RESULT metric=nccl_net_bw_1MiB provider=<p> plugin=<GB/s> raw=<GB/s> ratio=<r>
//         RESULT metric=nccl_net_bw_1MiB_vs_socket provider=<p> plugin=<GB/s> socket=<GB/s> ratio=<r>
// (with --latency: nccl_net_rtt_<size>B[_vs_socket], plugin_us, raw_us|socket_us, and a ratio
// of times, so that there above 1 is slower).  Without libnccl the Socket line is left out
// and the reason printed.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nccl_socket_reference.h"
#include "peer_process.h"
#include "plugin_under_test.h"
#include "rank.h"

namespace hmr::nccl::test {
namespace {

struct Options {
  std::string provider = "shm";
  size_t size = size_t{1} << 20;
  int messages = 256;
  int window = 8;
  int rounds = 7;
  std::string only;  // "plugin", "raw" or "socket": run that one alone (for a profile), no RESULT
  bool latency = false;  // round trips of --size bytes instead of a stream
  bool socket = true;    // NCCL's socket transport beside the plugin, where libnccl is found
  bool require_socket = false;  // and fail where it cannot be
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "hmr-nccl-net-bench (pid %d): %s\n", static_cast<int>(getpid()), what.c_str());
  std::exit(1);
}

void check(bool ok, const std::string& what) {
  if (!ok) die(what);
}
// For the timed loops: a literal, so a check costs no std::string (a heap allocation for
// messages over 15 characters) when it passes.
void check(bool ok, const char* what) {
  if (!ok) die(what);
}

// Every loop below ends by this time at the latest, the run failing with what it waited for.
Clock::time_point g_deadline = Clock::now() + std::chrono::minutes(5);
void check_deadline(const char* waiting_for) {
  if (Clock::now() > g_deadline) die(std::string("still waiting for ") + waiting_for + " at the deadline");
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A stream round's figure: GB/s on the receiver, whose clock times it (the sender's is not used).
double stream_gbps(const Options& o, bool receiver, double seconds) {
  return receiver ? static_cast<double>(o.size) * o.messages / seconds / 1e9 : 0;
}

// ------------------------------------------------------------------------------ raw libfabric
class RawFabric {
 public:
  explicit RawFabric(const std::string& provider) {
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->cq_data_size = 8;
    hints->tx_attr->size = 256;
    hints->rx_attr->size = 256;
    hints->fabric_attr->prov_name = strdup(provider.c_str());
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    check(rc == 0, "raw: fi_getinfo for " + provider + ": " + fi_strerror(-rc));
    check(fi_fabric(info_->fabric_attr, &fabric_, nullptr) == 0, "raw: fi_fabric");
    check(fi_domain(fabric_, info_, &domain_, nullptr) == 0, "raw: fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.size = 1024;
    check(fi_cq_open(domain_, &cq_attr, &cq_, nullptr) == 0, "raw: fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    check(fi_av_open(domain_, &av_attr, &av_, nullptr) == 0, "raw: fi_av_open");
    check(fi_endpoint(domain_, info_, &ep_, nullptr) == 0, "raw: fi_endpoint");
    check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV) == 0 && fi_ep_bind(ep_, &av_->fid, 0) == 0,
          "raw: fi_ep_bind");
    check(fi_enable(ep_) == 0, "raw: fi_enable");
  }
  ~RawFabric() {
    if (mr_ != nullptr) fi_close(&mr_->fid);
    fi_close(&ep_->fid);
    fi_close(&av_->fid);
    fi_close(&cq_->fid);
    fi_close(&domain_->fid);
    fi_close(&fabric_->fid);
    fi_freeinfo(info_);
  }
  std::vector<uint8_t> name() const {
    std::vector<uint8_t> out(256);
    size_t len = out.size();
    check(fi_getname(&ep_->fid, out.data(), &len) == 0, "raw: fi_getname");
    out.resize(len);
    return out;
  }
  void insert(const std::vector<uint8_t>& address) {
    check(fi_av_insert(av_, address.data(), 1, &peer_, 0, nullptr) == 1, "raw: fi_av_insert");
  }
  void reg(void* data, size_t len) {
    check(fi_mr_reg(domain_, data, len, FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV, 0, 0, 0, &mr_, nullptr) == 0,
          "raw: fi_mr_reg");
  }
  uint64_t key() const { return fi_mr_key(mr_); }
  void* desc() const { return fi_mr_desc(mr_); }
  bool virt_addr() const { return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0; }
  // Completions read (remote writes arrived, or own writes done); dies on an error.
  int poll() {
    fi_cq_data_entry entries[32];
    const ssize_t n = fi_cq_read(cq_, entries, 32);
    if (n > 0) return static_cast<int>(n);
    if (n == -FI_EAGAIN) return 0;
    fi_cq_err_entry err{};
    fi_cq_readerr(cq_, &err, 0);
    die(std::string("raw: completion error: ") + fi_strerror(err.err));
  }
  // Remote writes that arrived (completions with CQ data); the own writes' completions are
  // read and dropped on the way.
  int arrivals() {
    fi_cq_data_entry entries[32];
    const ssize_t n = fi_cq_read(cq_, entries, 32);
    if (n == -FI_EAGAIN) return 0;
    if (n < 0) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_, &err, 0);
      die(std::string("raw: completion error: ") + fi_strerror(err.err));
    }
    int arrived = 0;
    for (ssize_t i = 0; i < n; ++i) arrived += (entries[i].flags & FI_REMOTE_CQ_DATA) != 0;
    return arrived;
  }
  bool write(const void* buf, size_t len, uint64_t data, uint64_t remote, uint64_t key, fi_context2* ctx) {
    const ssize_t rc = fi_writedata(ep_, buf, len, desc(), data, peer_, remote, key, ctx);
    if (rc == -FI_EAGAIN) return false;
    if (rc != 0) die(std::string("raw: fi_writedata: ") + fi_strerror(static_cast<int>(-rc)));
    return true;
  }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_mr* mr_ = nullptr;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
};

struct Channel {
  OobChannel& oob;
  std::vector<uint8_t> receive() {
    std::string why;
    auto got = oob.receive(Clock::now() + std::chrono::seconds(60), &why);
    if (!got) die(why);
    return *got;
  }
  void send(const std::vector<uint8_t>& bytes) {
    std::string why;
    check(oob.send(bytes, &why), why);
  }
  void barrier() {
    send({1});
    receive();
  }
};

std::vector<uint8_t> u64_bytes(uint64_t a, uint64_t b) {
  std::vector<uint8_t> out(16);
  std::memcpy(out.data(), &a, 8);
  std::memcpy(out.data() + 8, &b, 8);
  return out;
}

// Receiver: seconds from the barrier to the last write's arrival.
double raw_round(RawFabric& raw, Channel& ch, bool receiver, const Options& o, uint8_t* buffer,
                 uint64_t remote_base, uint64_t key) {
  ch.barrier();
  const auto start = Clock::now();
  if (receiver) {
    for (int arrived = 0; arrived < o.messages;) {
      arrived += raw.poll();
      check_deadline("raw writes to arrive");
    }
    const double t = seconds_since(start);
    ch.send({2});  // the sender's last completions may still be unread: let it drain first
    return t;
  }
  std::vector<fi_context2> contexts(static_cast<size_t>(o.window));
  int posted = 0, completed = 0;
  while (completed < o.messages) {
    while (posted < o.messages && posted - completed < o.window) {
      const size_t slot = static_cast<size_t>(posted % o.window);
      if (!raw.write(buffer + slot * o.size, o.size, static_cast<uint64_t>(posted),
                     remote_base + slot * o.size, key, &contexts[slot])) {
        break;
      }
      ++posted;
    }
    completed += raw.poll();
    check_deadline("raw writes to complete");
  }
  ch.receive();
  return 0;
}

// A stream of o.messages through `net`, as NCCL's proxy drives one channel (src/transport/net.cc,
// sendProxyProgress and recvProxyProgress): up to `window` requests posted in order, each into
// its own slot, and only the oldest one tested until it completes.  Testing out of order would
// be no pattern NCCL makes, and NCCL's socket transport (whose test() moves a message's bytes
// over the stream in the order it is called) delivers into the wrong buffer under it.  `who`
// names the net in the messages of a failure.
double plugin_round(Net& net, Channel& ch, bool receiver, const Options& o, void* comm,
                    uint8_t* buffer, void* mh, const char* who) {
  std::vector<void*> requests(static_cast<size_t>(o.window), nullptr);
  ch.barrier();
  const auto start = Clock::now();
  int posted = 0, completed = 0;
  while (completed < o.messages) {
    check_deadline(receiver ? "receives" : "sends");
    if (posted < o.messages && posted - completed < o.window) {
      void*& request = requests[static_cast<size_t>(posted % o.window)];
      void* data = buffer + static_cast<size_t>(posted % o.window) * o.size;
      ncclResult_t rc;
      if (receiver) {
        size_t size = o.size;
        int tag = 0;
        void* mhs[1] = {mh};
        rc = net.irecv(comm, 1, &data, &size, &tag, mhs, &request);
      } else {
        rc = net.isend(comm, data, o.size, 0, mh, &request);
      }
      if (rc != ncclSuccess) die(std::string(who) + (receiver ? ": irecv failed" : ": isend failed"));
      if (request != nullptr) ++posted;
    }
    if (completed < posted) {
      void*& request = requests[static_cast<size_t>(completed % o.window)];
      int done = 0;
      int sizes[1] = {0};
      if (net.test(request, &done, sizes) != ncclSuccess) die(std::string(who) + ": test failed");
      if (done) {
        if (receiver && sizes[0] != static_cast<int>(o.size)) die(std::string(who) + ": a receive reported the wrong size");
        request = nullptr;
        ++completed;
      }
    }
  }
  const double t = seconds_since(start);
  ch.barrier();
  return receiver ? t : 0;
}

// Round trips of o.size bytes, `first` sending first: microseconds per round trip.  Each
// side keeps its next receive posted before it sends, as NCCL keeps receives posted ahead,
// so a reply never waits for its receive to be announced.
double plugin_round_trips(Net& net, Channel& ch, bool first, const Options& o, void* send_comm,
                          void* send_mh, void* recv_comm, void* recv_mh, uint8_t* buffer,
                          const char* who) {
  auto ok = [who](bool good, const char* what) {
    if (!good) die(std::string(who) + ": " + what);
  };
  auto post_receive = [&] {
    void* request = nullptr;
    void* data = buffer + o.size;
    size_t size = o.size;
    int tag = 0;
    void* mhs[1] = {recv_mh};
    while (request == nullptr) {
      ok(net.irecv(recv_comm, 1, &data, &size, &tag, mhs, &request) == ncclSuccess, "irecv failed");
      check_deadline("a receive to be posted");
    }
    return request;
  };
  auto send = [&] {
    void* request = nullptr;
    while (request == nullptr) {
      ok(net.isend(send_comm, buffer, o.size, 0, send_mh, &request) == ncclSuccess, "isend failed");
      check_deadline("a send to be posted");
    }
    return request;
  };
  // NCCL's proxy tests every operation it has posted in each pass of its progress loop, sends
  // and receives alike, and waits on none.  So while the reply is awaited the last send is
  // tested too, until it completes: waiting on it first would add the provider's delivery
  // acknowledgement to every round trip (raw writes are never waited for), and never testing
  // it until the reply came would deadlock NCCL's socket transport, whose test() is what moves
  // a send's bytes.
  void* sent = nullptr;
  auto test_send = [&] {
    if (sent == nullptr) return;
    int done = 0;
    ok(net.test(sent, &done, nullptr) == ncclSuccess, "test of a send failed");
    if (done) sent = nullptr;
  };
  auto wait_receive = [&](void* request) {
    for (int done = 0; !done;) {
      int sizes[1] = {0};
      ok(net.test(request, &done, sizes) == ncclSuccess, "test of a receive failed");
      test_send();
      check_deadline("a round trip");
    }
  };
  auto finish_send = [&] {
    while (sent != nullptr) {
      test_send();
      check_deadline("a send to complete");
    }
  };
  void* receive = post_receive();
  ch.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < o.messages; ++i) {
    if (first) {
      finish_send();  // posted a round trip ago: done by now, or the next moment
      sent = send();
    }
    wait_receive(receive);
    if (i + 1 < o.messages) receive = post_receive();
    if (!first) {
      finish_send();
      sent = send();
    }
  }
  finish_send();
  const double us = seconds_since(start) * 1e6 / o.messages;
  ch.barrier();
  return us;
}

double raw_round_trips(RawFabric& raw, Channel& ch, bool first, const Options& o, uint8_t* buffer,
                       uint64_t remote_base, uint64_t key) {
  fi_context2 contexts[4];  // a write's context is not reused before later ones completed
  int sent = 0;
  auto send = [&] {
    fi_context2* context = &contexts[sent++ % 4];
    while (!raw.write(buffer, o.size, 0, remote_base + o.size, key, context)) {
      (void)raw.arrivals();
      check_deadline("a raw write to be posted");
    }
  };
  auto wait = [&] {
    while (raw.arrivals() == 0) check_deadline("a raw round trip");
  };
  ch.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < o.messages; ++i) {
    if (first) send();
    wait();
    if (!first) send();
  }
  const double us = seconds_since(start) * 1e6 / o.messages;
  ch.barrier();
  return us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One connection of `net` within 30 s: `listener` listens (its listen comm left in *listen)
// and sends the handle over `ch`; the other connects with it.  The comm; `what` names it.
void* connect_comm(Net& net, Channel& ch, bool listener, void** listen, const std::string& what) {
  void* comm = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  if (listener) {
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
    check(net.listen(0, handle, listen) == ncclSuccess, what + ": listen failed");
    ch.send(std::vector<uint8_t>(handle, handle + sizeof handle));
    while (comm == nullptr && Clock::now() < deadline) {
      check(net.accept(*listen, &comm) == ncclSuccess, what + ": accept failed");
    }
  } else {
    std::vector<uint8_t> handle = ch.receive();
    while (comm == nullptr && Clock::now() < deadline) {
      check(net.connect(0, handle.data(), &comm) == ncclSuccess, what + ": connect failed");
    }
  }
  check(comm != nullptr, what + ": no connection within 30 s");
  return comm;
}

// Raw libfabric's key for `buffer`: `offering` sends its RMA base and key over `ch`, the other
// side receives them into *remote_base and *key.
void exchange_raw_key(Channel& ch, RawFabric& raw, bool offering, uint8_t* buffer,
                      uint64_t* remote_base, uint64_t* key) {
  if (offering) {
    ch.send(u64_bytes(raw.virt_addr() ? reinterpret_cast<uintptr_t>(buffer) : 0, raw.key()));
  } else {
    const std::vector<uint8_t> b = ch.receive();
    std::memcpy(remote_base, b.data(), 8);
    std::memcpy(key, b.data() + 8, 8);
  }
}

// One NCCL net (the plugin, or NCCL's own socket transport) as the bench uses it: a connection
// from the sender to the receiver with the buffer registered on it, and for --latency a second
// one the other way (the sender listens, the receiver connects).
struct NetSide {
  const char* name;
  Net* net;
  void* listen = nullptr;
  void* comm = nullptr;  // the receiver's recv comm, the sender's send comm
  void* mh = nullptr;
  void* back_listen = nullptr;
  void* back = nullptr;  // the other direction: the receiver's send comm, the sender's recv comm
  void* back_mh = nullptr;
};

NetSide open_side(const char* name, Net& net, Channel& ch, bool receiver, const Options& o,
                  uint8_t* buffer, size_t bytes) {
  NetSide s{name, &net};
  const std::string who = name;
  check(net.init(nullptr) == ncclSuccess, who + ": init failed");
  s.comm = connect_comm(net, ch, receiver, &s.listen, name);
  check(net.reg_mr(s.comm, buffer, bytes, NCCL_PTR_HOST, &s.mh) == ncclSuccess, who + ": regMr failed");
  if (o.latency) {
    s.back = connect_comm(net, ch, !receiver, &s.back_listen, name);
    check(net.reg_mr(s.back, buffer, bytes, NCCL_PTR_HOST, &s.back_mh) == ncclSuccess, who + ": regMr failed");
  }
  return s;
}

void close_side(NetSide& s, bool receiver) {
  const std::string who = s.name;
  Net& net = *s.net;
  if (s.back != nullptr) {
    check(net.dereg_mr(s.back, s.back_mh) == ncclSuccess, who + ": deregMr failed");
    check((receiver ? net.close_send(s.back) : net.close_recv(s.back)) == ncclSuccess, who + ": close failed");
  }
  check(net.dereg_mr(s.comm, s.mh) == ncclSuccess, who + ": deregMr failed");
  check((receiver ? net.close_recv(s.comm) : net.close_send(s.comm)) == ncclSuccess, who + ": close failed");
  for (void* listen : {s.listen, s.back_listen}) {
    if (listen != nullptr) check(net.close_listen(listen) == ncclSuccess, who + ": closeListen failed");
  }
  check(net.finalize() == ncclSuccess, who + ": finalize failed");
}

// A side's round: GB/s of a stream, or µs per round trip with --latency, on the receiver (the
// sender's figure is not used).  Round trips start from the receiver, which sends on `back`.
double side_round(NetSide& s, Channel& ch, bool receiver, const Options& o, uint8_t* buffer) {
  if (o.latency) {
    void* send_comm = receiver ? s.back : s.comm;
    void* send_mh = receiver ? s.back_mh : s.mh;
    void* recv_comm = receiver ? s.comm : s.back;
    void* recv_mh = receiver ? s.mh : s.back_mh;
    return plugin_round_trips(*s.net, ch, receiver, o, send_comm, send_mh, recv_comm, recv_mh, buffer, s.name);
  }
  return stream_gbps(o, receiver, plugin_round(*s.net, ch, receiver, o, s.comm, buffer, s.mh, s.name));
}

// One contender of the comparison and its figures, one per round.
struct Contender {
  std::string name;
  std::function<double()> round;
  std::vector<double> figures;
};

// A warm-up round of each, then `rounds` rounds in which every contender runs once, the first
// of each round rotating and the order reversed every other round, so that each runs after
// each of the others about as often (what one leaves behind, a warm cache or a socket still
// draining, falls on all alike).
void alternate(std::vector<Contender>& contenders, int rounds, bool receiver, const char* unit) {
  for (Contender& c : contenders) (void)c.round();
  const size_t n = contenders.size();
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (static_cast<size_t>(r / 2) + i) % n;
      Contender& c = contenders[r % 2 == 0 ? k : n - 1 - k];
      c.figures.push_back(c.round());
    }
    if (!receiver) continue;
    std::printf("round %d:", r);
    for (const Contender& c : contenders) std::printf(" %s %.4g %s", c.name.c_str(), c.figures.back(), unit);
    std::printf("\n");
  }
}

// Whether both processes have NCCL's socket transport: each says whether it loaded it, and it
// takes part only where both did (same binary and environment, but a failed load on one side
// must not leave the other waiting for a connection).
bool both_have(Channel& ch, bool mine) {
  ch.send({static_cast<uint8_t>(mine)});
  const std::vector<uint8_t> theirs = ch.receive();
  return mine && !theirs.empty() && theirs[0] != 0;
}

int run(bool receiver, const Options& o, OobChannel& oob) {
  Channel ch{oob};
  setenv("HMR_NCCL_PROVIDER", o.provider.c_str(), 1);
  std::string why;
  auto library = PluginLibrary::open(plugin_path(), &why);
  check(library != nullptr, why);
  auto plugin = library->table(11, &why);
  check(plugin != nullptr, why);
  // NCCL's own socket transport, unless --no-socket; where it cannot be loaded, the run goes on
  // without it and says why.
  std::unique_ptr<Net> socket;
  if (o.socket) {
    socket = open_nccl_socket_transport(&why);
    if (socket == nullptr) {
      std::printf("NCCL's socket transport is not compared (%s process): %s\n",
                  receiver ? "receiving" : "sending", why.c_str());
      std::fflush(stdout);
    }
  }
  const bool with_socket = both_have(ch, socket != nullptr);
  check(with_socket || !o.require_socket, "--require-socket: NCCL's socket transport could not be compared");

  const size_t bytes = o.size * static_cast<size_t>(o.window);
  HostBuffer buffer(bytes);
  std::memset(buffer.data(), receiver ? 0 : 0x5a, bytes);
  NetSide plugin_side = open_side("plugin", *plugin, ch, receiver, o, buffer.data(), bytes);
  std::optional<NetSide> socket_side;
  if (with_socket) socket_side = open_side("socket", *socket, ch, receiver, o, buffer.data(), bytes);

  // Raw libfabric on the same provider, in the same processes, with keys both ways for
  // --latency (the receiver's key goes to the sender, and the sender's back).
  RawFabric raw(o.provider);
  ch.send(raw.name());
  raw.insert(ch.receive());
  raw.reg(buffer.data(), bytes);
  uint64_t remote_base = 0, key = 0;
  exchange_raw_key(ch, raw, receiver, buffer.data(), &remote_base, &key);
  if (o.latency) exchange_raw_key(ch, raw, !receiver, buffer.data(), &remote_base, &key);

  std::vector<Contender> contenders;
  contenders.push_back({"plugin", [&] { return side_round(plugin_side, ch, receiver, o, buffer.data()); }, {}});
  contenders.push_back({"raw", [&] {
                          if (o.latency) return raw_round_trips(raw, ch, receiver, o, buffer.data(), remote_base, key);
                          return stream_gbps(o, receiver, raw_round(raw, ch, receiver, o, buffer.data(), remote_base, key));
                        }, {}});
  if (socket_side) {
    contenders.push_back({"socket", [&] { return side_round(*socket_side, ch, receiver, o, buffer.data()); }, {}});
  }
  // --only: that contender alone (for a profile of it), no RESULT line, since a profile has no
  // anchor beside it.
  if (!o.only.empty()) {
    const auto it = std::find_if(contenders.begin(), contenders.end(),
                                 [&](const Contender& c) { return c.name == o.only; });
    check(it != contenders.end(), "--only " + o.only + ": not in this run");
    contenders = {*it};
  }
  alternate(contenders, o.rounds, receiver, o.latency ? "us" : "GB/s");

  close_side(plugin_side, receiver);
  if (socket_side) close_side(*socket_side, receiver);
  if (!receiver || !o.only.empty()) return 0;
  // (The names of earlier sessions' records: MiB for a stream of whole MiB, else bytes.)
  const std::string size_name = !o.latency && o.size % (1u << 20) == 0 ? std::to_string(o.size >> 20) + "MiB"
                                                                       : std::to_string(o.size) + "B";
  const std::string metric = (o.latency ? "nccl_net_rtt_" : "nccl_net_bw_") + size_name;
  // The plugin's median beside an anchor's.  ratio: plugin over anchor, bandwidth over
  // bandwidth, or time over time for round trips (so above 1 is slower there, as in issue 30's
  // "within 1.2x").
  const double mine = median(contenders[0].figures);
  auto result = [&](const char* suffix, const Contender& anchor) {
    const double other = median(anchor.figures);
    const char* unit = o.latency ? "_us" : "";
    const int digits = o.latency ? 3 : 4;
    std::printf("RESULT metric=%s%s provider=%s plugin%s=%.*f %s%s=%.*f ratio=%.3f\n", metric.c_str(), suffix,
                o.provider.c_str(), unit, digits, mine, anchor.name.c_str(), unit, digits, other, mine / other);
  };
  result("", contenders[1]);
  if (socket_side) result("_vs_socket", contenders[2]);
  return 0;
}

}  // namespace
}  // namespace hmr::nccl::test

int main(int argc, char** argv) {
  using namespace hmr::nccl::test;
  Options o;
  bool peer = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--provider") o.provider = value();
    else if (arg == "--size") o.size = std::stoul(value());
    else if (arg == "--messages") o.messages = std::stoi(value());
    else if (arg == "--window") o.window = std::stoi(value());
    else if (arg == "--rounds") o.rounds = std::stoi(value());
    else if (arg == "--only") o.only = value();
    else if (arg == "--latency") o.latency = true;
    else if (arg == "--no-socket") o.socket = false;
    else if (arg == "--require-socket") o.require_socket = true;
    else if (arg == "--peer") peer = true;
    else die("unknown argument " + arg + " (--provider, --size, --messages, --window, --rounds, --only plugin|raw|socket, --latency, --no-socket, --require-socket)");
  }
  check(o.only.empty() || o.only == "plugin" || o.only == "raw" || o.only == "socket",
        "--only plugin, raw or socket");
  check(o.socket || !o.require_socket, "--no-socket and --require-socket together");
  check(!o.latency || o.window >= 2, "--latency needs --window 2 or more (a send and a receive buffer)");
  check(o.size > 0 && o.messages > 0 && o.window > 0 && o.window <= 32 && o.rounds > 0, "bad options");
  if (peer) {
    OobChannel oob(kPeerChannelFd);
    return run(false, o, oob);
  }
  std::string why;
  std::vector<std::string> peer_args = {
      self_executable(), "--peer", "--provider", o.provider, "--size", std::to_string(o.size),
      "--messages", std::to_string(o.messages), "--window", std::to_string(o.window),
      "--rounds", std::to_string(o.rounds), "--only", o.only};
  if (o.latency) peer_args.push_back("--latency");
  if (!o.socket) peer_args.push_back("--no-socket");
  if (o.require_socket) peer_args.push_back("--require-socket");
  auto sender = PeerProcess::start(peer_args, &why);
  check(sender.has_value(), why);
  const int rc = run(true, o, sender->channel());
  const auto status = sender->wait(Clock::now() + std::chrono::seconds(60));
  check(status == std::optional<int>(0), "the sending process failed");
  return rc;
}
