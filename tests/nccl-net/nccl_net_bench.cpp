// hmr-nccl-net-bench: bandwidth of libnccl-net-hmr.so against raw libfabric RMA on the same
// provider, two processes on this host.
//
// Plugin: the receiver keeps `window` irecvs of `size` bytes posted (reposting each as it
// completes), the sender keeps `window` isends in flight, both through ncclNetPlugin_v11, as
// NCCL's proxy does for one channel.  Raw: the same two processes open their own libfabric
// endpoint on the same provider, the receiver registers its buffers with fi_mr_reg and hands
// the key over once, and the sender streams fi_writedata with remote CQ data at the same
// window, with no per-message announcement: the ceiling the plugin is measured against.
// Rounds alternate plugin and raw; each side's figure is the median of its rounds, timed on
// the receiver from a shared start to the last byte's completion.
//
//   hmr-nccl-net-bench [--provider tcp|shm] [--size BYTES] [--messages N] [--window W]
//                      [--rounds R]
// prints  RESULT metric=nccl_net_bw_1MiB provider=<p> plugin=<GB/s> raw=<GB/s> ratio=<r>
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
#include <string>
#include <vector>

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
  std::string only;  // "plugin" or "raw": run that one alone (for a profile of it), no RESULT
  bool latency = false;  // round trips of --size bytes instead of a stream
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

double plugin_round(Net& net, Channel& ch, bool receiver, const Options& o, void* comm,
                    uint8_t* buffer, void* mh) {
  std::vector<void*> requests(static_cast<size_t>(o.window), nullptr);
  ch.barrier();
  const auto start = Clock::now();
  int posted = 0, completed = 0;
  while (completed < o.messages) {
    check_deadline(receiver ? "plugin receives" : "plugin sends");
    for (int w = 0; w < o.window; ++w) {
      void*& request = requests[static_cast<size_t>(w)];
      void* data = buffer + static_cast<size_t>(w) * o.size;
      if (request == nullptr && posted < o.messages) {
        ncclResult_t rc;
        if (receiver) {
          size_t size = o.size;
          int tag = 0;
          void* mhs[1] = {mh};
          rc = net.irecv(comm, 1, &data, &size, &tag, mhs, &request);
        } else {
          rc = net.isend(comm, data, o.size, 0, mh, &request);
        }
        check(rc == ncclSuccess, receiver ? "plugin: irecv failed" : "plugin: isend failed");
        if (request != nullptr) ++posted;
      }
      if (request != nullptr) {
        int done = 0;
        int sizes[1] = {0};
        check(net.test(request, &done, sizes) == ncclSuccess, "plugin: test failed");
        if (done) {
          request = nullptr;
          ++completed;
        }
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
                          void* send_mh, void* recv_comm, void* recv_mh, uint8_t* buffer) {
  auto post_receive = [&] {
    void* request = nullptr;
    void* data = buffer + o.size;
    size_t size = o.size;
    int tag = 0;
    void* mhs[1] = {recv_mh};
    while (request == nullptr) {
      check(net.irecv(recv_comm, 1, &data, &size, &tag, mhs, &request) == ncclSuccess,
            "plugin: irecv failed");
      check_deadline("a plugin receive to be posted");
    }
    return request;
  };
  auto wait = [&](void* request, const char* what) {
    for (int done = 0; !done;) {
      int sizes[1] = {0};
      check(net.test(request, &done, sizes) == ncclSuccess, what);
      check_deadline("a plugin round trip");
    }
  };
  auto send = [&] {
    void* request = nullptr;
    while (request == nullptr) {
      check(net.isend(send_comm, buffer, o.size, 0, send_mh, &request) == ncclSuccess,
            "plugin: isend failed");
      check_deadline("a plugin send to be posted");
    }
    return request;
  };
  // A send's completion is tested after the reply came, as NCCL's proxy tests every request
  // it has posted in turn: waiting on it first would add the provider's delivery
  // acknowledgement to every round trip, which raw writes (never waited for) do not pay.
  void* receive = post_receive();
  ch.barrier();
  const auto start = Clock::now();
  void* sent = nullptr;  // tested once the next message came back
  for (int i = 0; i < o.messages; ++i) {
    if (first) sent = send();
    wait(receive, "plugin: test of a receive failed");
    if (sent != nullptr) wait(sent, "plugin: test of a send failed");
    if (i + 1 < o.messages) receive = post_receive();
    sent = first ? nullptr : send();
  }
  if (sent != nullptr) wait(sent, "plugin: test of a send failed");
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
    while (!raw.write(buffer, o.size, 0, remote_base + o.size, key, context)) (void)raw.arrivals();
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

// One plugin connection within 30 s: `listener` listens (its listen comm left in *listen)
// and sends the handle over `ch`; the other connects with it.  The comm; `what` names it.
void* connect_comm(Net& net, Channel& ch, bool listener, void** listen, const char* what) {
  void* comm = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  if (listener) {
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
    check(net.listen(0, handle, listen) == ncclSuccess, "plugin: listen failed");
    ch.send(std::vector<uint8_t>(handle, handle + sizeof handle));
    while (comm == nullptr && Clock::now() < deadline) {
      check(net.accept(*listen, &comm) == ncclSuccess, "plugin: accept failed");
    }
  } else {
    std::vector<uint8_t> handle = ch.receive();
    while (comm == nullptr && Clock::now() < deadline) {
      check(net.connect(0, handle.data(), &comm) == ncclSuccess, "plugin: connect failed");
    }
  }
  check(comm != nullptr, std::string("plugin: no ") + what + " within 30 s");
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

// --latency: a second connection the other way (the sender listens, the receiver connects),
// raw keys both ways, then round trips, the receiver sending first; plugin and raw rounds
// alternate, each figure the median.
int latency_rounds(Net& net, Channel& ch, bool receiver, const Options& o, void* comm, void* mh,
                   RawFabric& raw, uint8_t* buffer, uint64_t remote_base, uint64_t key) {
  void* listen = nullptr;
  void* back = connect_comm(net, ch, !receiver, &listen, "connection back");
  const size_t bytes = o.size * static_cast<size_t>(o.window);
  void* back_mh = nullptr;
  check(net.reg_mr(back, buffer, bytes, NCCL_PTR_HOST, &back_mh) == ncclSuccess, "plugin: regMr failed");
  // The raw key the other way (the receiver's went to the sender already).
  exchange_raw_key(ch, raw, !receiver, buffer, &remote_base, &key);
  // The receiver sends on `back` and receives on `comm`; the sender the other way round.
  void* send_comm = receiver ? back : comm;
  void* send_mh = receiver ? back_mh : mh;
  void* recv_comm = receiver ? comm : back;
  void* recv_mh = receiver ? mh : back_mh;
  (void)plugin_round_trips(net, ch, receiver, o, send_comm, send_mh, recv_comm, recv_mh, buffer);
  (void)raw_round_trips(raw, ch, receiver, o, buffer, remote_base, key);
  std::vector<double> plugin_us, raw_us;
  for (int r = 0; r < o.rounds; ++r) {
    if (r % 2 == 1) raw_us.push_back(raw_round_trips(raw, ch, receiver, o, buffer, remote_base, key));
    plugin_us.push_back(
        plugin_round_trips(net, ch, receiver, o, send_comm, send_mh, recv_comm, recv_mh, buffer));
    if (r % 2 == 0) raw_us.push_back(raw_round_trips(raw, ch, receiver, o, buffer, remote_base, key));
    if (receiver) {
      std::printf("round %d: plugin %.2f us, raw %.2f us per round trip\n", r, plugin_us.back(),
                  raw_us.back());
    }
  }
  check(net.dereg_mr(back, back_mh) == ncclSuccess, "plugin: deregMr failed");
  check(net.dereg_mr(comm, mh) == ncclSuccess, "plugin: deregMr failed");
  check((receiver ? net.close_send(back) : net.close_recv(back)) == ncclSuccess, "plugin: close failed");
  check((receiver ? net.close_recv(comm) : net.close_send(comm)) == ncclSuccess, "plugin: close failed");
  if (listen != nullptr) check(net.close_listen(listen) == ncclSuccess, "plugin: closeListen failed");
  check(net.finalize() == ncclSuccess, "plugin: finalize failed");
  if (receiver) {
    const double p = median(plugin_us), w = median(raw_us);
    std::printf("RESULT metric=nccl_net_rtt_%zuB provider=%s plugin_us=%.3f raw_us=%.3f ratio=%.3f\n",
                o.size, o.provider.c_str(), p, w, p / w);
  }
  return 0;
}

int run(bool receiver, const Options& o, OobChannel& oob) {
  Channel ch{oob};
  setenv("HMR_NCCL_PROVIDER", o.provider.c_str(), 1);
  std::string why;
  auto library = PluginLibrary::open(plugin_path(), &why);
  check(library != nullptr, why);
  auto net = library->table(11, &why);
  check(net != nullptr, why);
  check(net->init(nullptr) == ncclSuccess, "plugin: init failed");

  // The plugin's connection, receiver -> sender direction of the handle.
  void* listen = nullptr;
  void* comm = connect_comm(*net, ch, receiver, &listen, "connection");

  // Raw libfabric on the same provider, in the same processes.
  RawFabric raw(o.provider);
  ch.send(raw.name());
  raw.insert(ch.receive());

  const size_t bytes = o.size * static_cast<size_t>(o.window);
  HostBuffer buffer(bytes);
  std::memset(buffer.data(), receiver ? 0 : 0x5a, bytes);
  void* mh = nullptr;
  check(net->reg_mr(comm, buffer.data(), bytes, NCCL_PTR_HOST, &mh) == ncclSuccess,
        "plugin: regMr failed");
  raw.reg(buffer.data(), bytes);
  uint64_t remote_base = 0, key = 0;
  exchange_raw_key(ch, raw, receiver, buffer.data(), &remote_base, &key);

  if (o.latency) {
    return latency_rounds(*net, ch, receiver, o, comm, mh, raw, buffer.data(), remote_base, key);
  }
  // A warm-up of each, then alternating rounds.
  plugin_round(*net, ch, receiver, o, comm, buffer.data(), mh);
  raw_round(raw, ch, receiver, o, buffer.data(), remote_base, key);
  if (!o.only.empty()) {
    const double total = static_cast<double>(o.size) * o.messages;
    for (int r = 0; r < o.rounds; ++r) {
      const double t = o.only == "raw"
                           ? raw_round(raw, ch, receiver, o, buffer.data(), remote_base, key)
                           : plugin_round(*net, ch, receiver, o, comm, buffer.data(), mh);
      if (receiver) std::printf("round %d: %s %.2f GB/s\n", r, o.only.c_str(), total / t / 1e9);
    }
  }
  // (No alternating rounds and no RESULT line after --only: a profile has no anchor beside it.)
  const int rounds = o.only.empty() ? o.rounds : 0;
  std::vector<double> plugin_bw, raw_bw;
  const double total = static_cast<double>(o.size) * o.messages;
  for (int r = 0; r < rounds; ++r) {
    const bool raw_first = r % 2 == 1;
    if (raw_first) raw_bw.push_back(total / raw_round(raw, ch, receiver, o, buffer.data(), remote_base, key) / 1e9);
    plugin_bw.push_back(total / plugin_round(*net, ch, receiver, o, comm, buffer.data(), mh) / 1e9);
    if (!raw_first) raw_bw.push_back(total / raw_round(raw, ch, receiver, o, buffer.data(), remote_base, key) / 1e9);
    if (receiver) {
      std::printf("round %d: plugin %.2f GB/s, raw %.2f GB/s\n", r, plugin_bw.back(), raw_bw.back());
    }
  }
  check(net->dereg_mr(comm, mh) == ncclSuccess, "plugin: deregMr failed");
  check((receiver ? net->close_recv(comm) : net->close_send(comm)) == ncclSuccess, "plugin: close failed");
  if (listen != nullptr) check(net->close_listen(listen) == ncclSuccess, "plugin: closeListen failed");
  check(net->finalize() == ncclSuccess, "plugin: finalize failed");
  if (receiver && !plugin_bw.empty()) {
    const double p = median(plugin_bw), w = median(raw_bw);
    std::string size_name = o.size % (1u << 20) == 0 ? std::to_string(o.size >> 20) + "MiB"
                                                      : std::to_string(o.size) + "B";
    std::printf("RESULT metric=nccl_net_bw_%s provider=%s plugin=%.3f raw=%.3f ratio=%.3f\n",
                size_name.c_str(), o.provider.c_str(), p, w, p / w);
  }
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
    else if (arg == "--peer") peer = true;
    else die("unknown argument " + arg + " (--provider, --size, --messages, --window, --rounds, --only plugin|raw, --latency)");
  }
  check(o.only.empty() || o.only == "plugin" || o.only == "raw", "--only plugin or --only raw");
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
  auto sender = PeerProcess::start(peer_args, &why);
  check(sender.has_value(), why);
  const int rc = run(true, o, sender->channel());
  const auto status = sender->wait(Clock::now() + std::chrono::seconds(60));
  check(status == std::optional<int>(0), "the sending process failed");
  return rc;
}
