#include "session.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "admission.h"
#include "buffer.h"
#include "fabric.h"
#include "landing.h"
#include "peer_socket.h"
#include "peer_watch.h"
#include "registrar.h"
#include "report.h"

namespace hmr::perftest {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kAccess = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr size_t kWindow = 64;  // RMA operations in flight in the bandwidth tests

int fail(const char* role, const std::string& why) {
  std::fprintf(stderr, "hmr-perftest %s: %s\n", role, why.c_str());
  return 1;
}

// Fails as fail() does, and first tells the peer why, so its user reads the reason and not
// only that the connection closed.  Best effort: the peer may be gone already.
int give_up(const char* role, PeerSocket& socket, const std::string& why) {
  std::string ignored;
  (void)socket.send(encode(PeerError{std::string(role) + ": " + why}), &ignored);
  return fail(role, why);
}

// The peer's buffer as this side addresses it.
struct Remote {
  uint64_t base = 0;  // address of byte 0 in RMA calls
  uint64_t key = 0;
  uint64_t length = 0;
};

std::optional<Remote> adopt_remote(Fabric& fabric, const BufferInfo& info, std::string* why) {
  Remote remote;
  remote.base = info.address;
  remote.length = info.length;
  if (info.key_is_raw) {
    if (!fabric.map_raw(info.address, info.key, &remote.key, why)) return std::nullopt;
  } else {
    std::memcpy(&remote.key, info.key.data(), sizeof remote.key);
  }
  if (!fabric.insert_peer(info.fabric_address, why)) return std::nullopt;
  return remote;
}

BufferInfo describe(const Fabric& fabric, const Registered& registered, uint64_t address,
                    uint64_t length) {
  BufferInfo info;
  info.address = address;
  info.length = length;
  info.mr_mode = fabric.mr_mode();
  info.key_is_raw = !registered.raw_key.empty();
  if (info.key_is_raw) {
    info.key = registered.raw_key;
  } else {
    info.key.resize(sizeof registered.key);
    std::memcpy(info.key.data(), &registered.key, sizeof registered.key);
  }
  info.fabric_address = fabric.address();
  return info;
}

template <typename T>
std::optional<T> receive_as(PeerSocket& socket, MessageType type,
                            std::optional<T> (*decode)(std::span<const uint8_t>, std::string*),
                            int timeout_ms, std::string* why) {
  std::optional<std::vector<uint8_t>> body = socket.receive(type, timeout_ms, why);
  if (!body) return std::nullopt;
  return decode(*body, why);
}

// Waits until byte `at` of `buffer` reads `tag`, progressing the CQ meanwhile (the provider
// lands the peer's bytes only while someone reads the CQ), until `watch` says the peer stopped.
bool wait_for_tag(Fabric& fabric, PeerWatch& watch, const uint8_t* at, uint8_t tag,
                  std::string* why) {
  std::atomic_ref<const uint8_t> byte(*at);
  while (byte.load(std::memory_order_acquire) != tag) {
    if (fabric.poll(nullptr, why) < 0 || !watch.fine(why)) return false;
  }
  watch.progressed();
  return true;
}

// Reads the CQ (a manual-progress provider moves what is still in flight only while this side
// does) until the peer's socket has something to read, an error completion comes, or
// `deadline` passes; the socket and the clock are looked at every PeerWatch::kCheckEvery reads.
enum class Heard { readable, failed, nothing };
Heard progress_until_readable(Fabric& fabric, const PeerSocket& socket,
                              Clock::time_point deadline, std::string* why) {
  for (uint64_t polls = 1;; ++polls) {
    if (fabric.poll(nullptr, why) < 0) return Heard::failed;
    if (polls % PeerWatch::kCheckEvery != 0) continue;
    if (socket.readable()) return Heard::readable;
    if (Clock::now() > deadline) return Heard::nothing;
  }
}

// Waits for the peer's next message, of type `type`, while progressing the fabric.
std::optional<std::vector<uint8_t>> receive_while_progressing(Fabric& fabric, PeerSocket& socket,
                                                              MessageType type, int timeout_ms,
                                                              std::string* why) {
  const std::chrono::milliseconds timeout(timeout_ms);
  switch (progress_until_readable(fabric, socket, Clock::now() + timeout, why)) {
    case Heard::readable: return socket.receive(type, timeout_ms, why);
    case Heard::failed: return std::nullopt;
    case Heard::nothing: break;
  }
  *why = "no answer from the peer within " + duration_text(timeout) + " (--timeout)";
  return std::nullopt;
}

uint8_t tag_for(uint64_t sequence) { return static_cast<uint8_t>(sequence % 255 + 1); }

// ---- server ----------------------------------------------------------------------------

int serve_latency(PeerSocket& socket, Fabric& fabric, Buffer& buffer, const Registered& mine,
                  const Remote& client, const Hello& hello, int timeout_ms) {
  std::string why;
  uint64_t sequence = 0;
  for (;;) {
    std::optional<Done> barrier = receive_as(socket, MessageType::done, decode_done, timeout_ms, &why);
    if (!barrier) return give_up("server", socket, why);
    PeerWatch watch(socket, timeout_ms);  // one per block: the last write ends it (below)
    const uint64_t size = barrier->value;
    if (size == 0) return 0;  // the client is finished
    if (size > buffer.size() || size > client.length) {
      return give_up("server", socket, "the client asked for a " + std::to_string(size) +
                                "-byte block, beyond the buffers agreed");
    }
    std::memset(buffer.data(), 0, size);
    if (!socket.send(encode(Done{size}), &why)) return give_up("server", socket, why);
    for (uint64_t i = 0; i < hello.iterations; ++i) {
      const uint8_t tag = tag_for(sequence++);
      if (!wait_for_tag(fabric, watch, buffer.data() + size - 1, tag, &why)) {
        return give_up("server", socket, why);
      }
      if (!fabric.post_write(mine.local, size, mine.desc, client.base, client.key, nullptr,
                             nullptr, watch, &why)) {
        return give_up("server", socket, why);
      }
      // The client may see this block's last write land, and send its next barrier, before
      // the completion is read here.
      if (i + 1 == hello.iterations) watch.expect_peer_message();
      if (!fabric.wait(1, watch, &why)) {
        return give_up("server", socket, why);
      }
    }
  }
}

// Bandwidth: the client drives; this side progresses the fabric (a manual-progress provider
// lands the client's bytes only then) until the client's Done.  It sees no completion of the
// client's operations, so the client's Progress messages (peer_watch.h) are how it tells a
// long run from a client that stalled: silence for --timeout ends the run, and so does the
// client's socket closing.
std::optional<Done> await_client_done(PeerSocket& socket, Fabric& fabric, int timeout_ms,
                                      std::string* why) {
  const std::chrono::milliseconds timeout(timeout_ms);
  for (;;) {  // a Progress message starts the deadline again
    const Heard heard = progress_until_readable(fabric, socket, Clock::now() + timeout, why);
    if (heard == Heard::failed) return std::nullopt;
    if (heard == Heard::nothing) {
      *why = "the client reported no progress for " + duration_text(timeout) +
             " (--timeout): it stalled, or it cannot reach this side";
      return std::nullopt;
    }
    std::optional<PeerSocket::Received> message =
        socket.receive_one_of({MessageType::progress, MessageType::done}, timeout_ms, why);
    if (!message) return std::nullopt;
    if (message->type == MessageType::done) return decode_done(message->body, why);
    if (!decode_progress(message->body, why)) return std::nullopt;
  }
}

int serve_bandwidth(PeerSocket& socket, Fabric& fabric, Buffer& buffer, Registrar& registrar,
                    const Registered& mine, const Hello& hello, int timeout_ms) {
  std::string why;
  std::optional<Done> done = await_client_done(socket, fabric, timeout_ms, &why);
  if (!done) return give_up("server", socket, why);
  // What the client wrote into a host shadow belongs in the device memory.
  if (hello.test == TestKind::write_bw && !registrar.sync(mine, buffer.size(), true, &why)) {
    return give_up("server", socket, why);
  }
  uint64_t held = buffer.host() ? buffer.checksum(hello.max_size) : 0;
  std::string late;
  if (hello.test == TestKind::write_bw && buffer.host() && done->value != 0 && done->value != held) {
    // Not a mismatch yet: the bytes may still be on their way (landing.h).  Half of
    // --timeout leaves the client, which waits its own for this answer, time to hear it.
    PeerWatch watch(socket, std::max(timeout_ms / 2, 1));
    held = await_landing(
        done->value, [&] { return buffer.checksum(hello.max_size); },
        [&](std::string* failed) { return fabric.poll(nullptr, failed) >= 0; }, watch, &late);
  }
  if (!socket.send(encode(Done{held}), &why)) return give_up("server", socket, why);
  if (hello.test == TestKind::write_bw && buffer.host() && done->value != 0 && done->value != held) {
    return give_up("server", socket, "the bytes written into this buffer differ from what the "
                                     "client sent, after waiting for them to land: " + late);
  }
  return 0;
}

// The client the server serves: the first whose Hello it admits (admission.h).  One refused
// before anything was allocated for it (its Hello missing, malformed, or not admitted) is
// told why and hung up on, and the next one is awaited: no client can make the server
// allocate more than its --max-size, nor end it by asking.  Each wait for a client lasts
// --timeout; the server gives up when one passes with nobody.
std::optional<Hello> admit_client(PeerSocket& socket, const Options& options, std::string* why) {
  for (;;) {
    if (!socket.accept(options.timeout_ms, why)) return std::nullopt;
    std::string refusal;
    std::optional<Hello> hello =
        receive_as(socket, MessageType::hello, decode_hello, options.timeout_ms, &refusal);
    if (!hello) {
      refusal = "the client's hello: " + refusal;
    } else {
      std::optional<std::string> refused = admission_refusal(*hello, options);
      if (!refused) {
        socket.stop_listening();  // one client at a time: the next is refused, not queued
        return hello;
      }
      refusal = std::move(*refused);
    }
    std::string ignored;  // (best effort: the client may be gone already)
    (void)socket.send(encode(PeerError{"server: " + refusal}), &ignored);
    socket.hang_up();
    // Not --quiet's to silence: the server's user should learn why a client went unserved.
    std::fprintf(stderr, "hmr-perftest server: refused a client: %s; waiting for the next one\n",
                 refusal.c_str());
  }
}

}  // namespace

int run_server(const Options& options) {
  std::string why;
  // Checked before any client is awaited: a provider this host cannot open fails now, with
  // libfabric's reason, not when a client arrives.
  std::optional<Fabric> fabric = Fabric::open(options.provider, &why);
  if (!fabric) return fail("server", why);
  fabric->watch_calls(options.timeout_ms, "server");
  std::optional<PeerSocket> socket = PeerSocket::listen(options.port, &why);
  if (!socket) return fail("server", why);
  if (!options.quiet) {
    std::fprintf(stderr, "hmr-perftest server: provider %s (served as %s); waiting for a client "
                 "on port %u\n", options.provider.c_str(), fabric->provider_name().c_str(),
                 socket->listening_port());
  }
  // Nothing is allocated for a client before it is admitted.
  std::optional<Hello> hello = admit_client(*socket, options, &why);
  if (!hello) return fail("server", why);
  fabric->watch_peer(socket->fd());
  std::optional<Buffer> buffer = Buffer::allocate(options.memory, hello->max_size, &why);
  if (!buffer) return give_up("server", *socket, why);
  if (hello->test == TestKind::read_bw && buffer->host()) buffer->fill_pattern(buffer->size());
  std::optional<Registrar> registrar = Registrar::open(*fabric, RegMode::once, options.dmabuf, &why);
  if (!registrar) return give_up("server", *socket, why);
  std::optional<Registered> mine = registrar->reg(buffer->data(), buffer->size(), kAccess, &why);
  if (!mine) return give_up("server", *socket, why);
  int status = 0;
  // A host shadow must hold the device's bytes before the client reads them.
  if (hello->test == TestKind::read_bw && !registrar->sync(*mine, buffer->size(), false, &why)) {
    status = give_up("server", *socket, why);
  } else if (!socket->send(encode(describe(*fabric, *mine, mine->base, buffer->size())), &why)) {
    status = fail("server", why);
  } else if (std::optional<BufferInfo> theirs = receive_as(
                 *socket, MessageType::buffer, decode_buffer, options.timeout_ms, &why);
             !theirs) {
    status = give_up("server", *socket, why);
  } else if (std::optional<Remote> client = adopt_remote(*fabric, *theirs, &why); !client) {
    status = give_up("server", *socket, why);
  } else if (hello->test == TestKind::write_lat) {
    status = serve_latency(*socket, *fabric, *buffer, *mine, *client, *hello, options.timeout_ms);
  } else {
    status = serve_bandwidth(*socket, *fabric, *buffer, *registrar, *mine, *hello,
                             options.timeout_ms);
  }
  mine.reset();  // (before the registrar's domain: it owns an MR of it)
  if (status == 0 && !options.quiet) std::fprintf(stderr, "hmr-perftest server: done\n");
  return status;
}

// ---- client ----------------------------------------------------------------------------

namespace {

struct Client {
  const Options& options;
  PeerSocket& socket;
  Fabric& fabric;
  Buffer& buffer;  // write_lat: [send area | landing area], each max_size
  Remote server;
  std::vector<Registrar>& registrars;   // one per --reg mode, in order
  std::vector<Registered>& whole;       // each mode's whole-buffer registration (once/raw)
  PeerWatch& watch;                     // one for the whole data phase
  Clock::time_point last_progress = Clock::now();

  void progress(uint64_t size, RegMode mode) {
    if (options.quiet || options.json) return;
    const Clock::time_point now = Clock::now();
    if (now - last_progress < std::chrono::seconds(1)) return;
    last_progress = now;
    std::fprintf(stderr, "hmr-perftest: %s %llu bytes (%s) done\n", test_name(options.test),
                 static_cast<unsigned long long>(size), reg_mode_name(mode));
  }

  bool per_message(RegMode mode) const {
    return mode == RegMode::cached || mode == RegMode::per_iter;
  }

  // One bandwidth block: `iterations` RMA operations of `size` bytes, kWindow in flight.
  std::optional<Measurement> bandwidth(uint64_t size, size_t mode_index, std::string* why) {
    Registrar& registrar = registrars[mode_index];
    const RegMode mode = registrar.mode();
    const bool write = options.test == TestKind::write_bw;
    const hmr_domain_stats before = registrar.stats();
    struct Slot {
      std::optional<Registered> own;          // a per-message registration, given back at retire
      const Registered* registered = nullptr;  // it, or the mode's whole-buffer one
      bool busy = false;
    };
    std::vector<Slot> slots(kWindow);
    std::vector<size_t> free_slots;
    for (size_t i = kWindow; i-- > 0;) free_slots.push_back(i);
    std::vector<void*> done;
    uint64_t posted = 0, completed = 0;
    bool synced = true;
    auto retire = [&](void* context) {
      Slot& slot = *static_cast<Slot*>(context);
      if (per_message(mode)) {
        // What a read landed in a host shadow belongs in the device memory.
        if (!write) synced = synced && registrar.sync(*slot.registered, size, true, why);
        slot.own.reset();
      }
      slot.busy = false;
      free_slots.push_back(static_cast<size_t>(&slot - slots.data()));
      ++completed;
    };
    // What a read must fill is cleared first: the buffer holds the server's pattern from the
    // start (write_bw sends it), so a read that landed nothing passed the check after it.
    if (!write && buffer.host()) std::memset(buffer.data(), 0, size);
    const Clock::time_point start = Clock::now();
    if (write && !per_message(mode) && !registrar.sync(whole[mode_index], size, false, why)) {
      return std::nullopt;
    }
    while (completed < options.iterations && synced) {
      if (!watch.fine(why)) return std::nullopt;
      while (posted < options.iterations && !free_slots.empty()) {
        Slot& slot = slots[free_slots.back()];
        free_slots.pop_back();
        if (per_message(mode)) {
          slot.own = registrar.reg(buffer.data(), size, kAccess, why);
          if (!slot.own) return std::nullopt;
          slot.registered = &*slot.own;
          if (write && !registrar.sync(*slot.registered, size, false, why)) return std::nullopt;
        } else {
          slot.registered = &whole[mode_index];
        }
        slot.busy = true;
        const Registered& r = *slot.registered;
        const bool ok = write ? fabric.post_write(r.local, size, r.desc, server.base, server.key,
                                                  &slot, &done, watch, why)
                              : fabric.post_read(r.local, size, r.desc, server.base, server.key,
                                                 &slot, &done, watch, why);
        if (!ok) return std::nullopt;
        ++posted;
      }
      if (fabric.poll(&done, why) < 0) return std::nullopt;
      if (!done.empty()) watch.progressed();
      for (void* context : done) retire(context);
      done.clear();
    }
    if (!synced) return std::nullopt;
    if (!write && !per_message(mode) && !registrar.sync(whole[mode_index], size, true, why)) {
      return std::nullopt;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!write && buffer.host() && !buffer.matches_pattern(size)) {
      *why = "read_bw: the bytes read differ from the server's pattern at size " +
             std::to_string(size);
      return std::nullopt;
    }
    const hmr_domain_stats after = registrar.stats();
    Measurement m;
    m.size = size;
    m.mode = mode;
    m.iterations = options.iterations;
    m.seconds = seconds;
    m.gbytes_per_second = rate_gbytes_per_second(size, options.iterations, seconds);
    m.mmsgs_per_second = rate_mmsgs_per_second(options.iterations, seconds);
    m.nic_registrations = after.nic_registrations - before.nic_registrations;
    m.cache_hits = after.cache_hits - before.cache_hits;
    return m;
  }

  // One latency block: ping-pong of `size` bytes; the answer lands in the landing area.
  std::optional<Measurement> latency(uint64_t size, size_t mode_index, uint64_t* sequence,
                                     std::string* why) {
    Registrar& registrar = registrars[mode_index];
    const RegMode mode = registrar.mode();
    uint8_t* send = buffer.data();
    uint8_t* landing = buffer.data() + options.max_size;
    std::memset(landing, 0, size);
    if (!socket.send(encode(Done{size}), why)) return std::nullopt;
    std::optional<Done> ack =
        receive_as(socket, MessageType::done, decode_done, options.timeout_ms, why);
    if (!ack) return std::nullopt;
    if (ack->value != size) {
      *why = "the server answered the barrier for a different block";
      return std::nullopt;
    }
    watch.progressed();
    const hmr_domain_stats before = registrar.stats();
    std::vector<double> samples;
    samples.reserve(options.iterations);
    for (uint64_t i = 0; i < options.iterations; ++i) {
      const uint8_t tag = tag_for((*sequence)++);
      send[size - 1] = tag;
      const Clock::time_point start = Clock::now();
      std::optional<Registered> own;  // per message: given back inside the sample, as it costs
      if (per_message(mode)) {
        own = registrar.reg(send, size, kAccess, why);
        if (!own) return std::nullopt;
      }
      const Registered& registered = own ? *own : whole[mode_index];
      if (!fabric.post_write(send, size, registered.desc, server.base, server.key, nullptr,
                             nullptr, watch, why) ||
          !wait_for_tag(fabric, watch, landing + size - 1, tag, why) ||
          !fabric.wait(1, watch, why)) {
        return std::nullopt;
      }
      own.reset();
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                        2);
    }
    const hmr_domain_stats after = registrar.stats();
    std::sort(samples.begin(), samples.end());
    Measurement m;
    m.size = size;
    m.mode = mode;
    m.iterations = options.iterations;
    for (double s : samples) m.seconds += 2 * s / 1e6;
    m.lat_min_us = samples.front();
    m.lat_max_us = samples.back();
    m.lat_median_us = median_of_sorted(samples);  // (t_typical: the mean of the middle two)
    m.lat_avg_us = m.seconds * 1e6 / 2 / static_cast<double>(samples.size());
    m.nic_registrations = after.nic_registrations - before.nic_registrations;
    m.cache_hits = after.cache_hits - before.cache_hits;
    return m;
  }
};

}  // namespace

int run_client(const Options& options) {
  std::string why;
  const bool latency = options.test == TestKind::write_lat;
  // The provider first: one this host cannot open fails before the server is bothered.
  std::optional<Fabric> fabric = Fabric::open(options.provider, &why);
  if (!fabric) return fail("client", why);
  fabric->watch_calls(options.timeout_ms, "client");
  std::optional<PeerSocket> socket =
      PeerSocket::connect(options.host, options.port, options.timeout_ms, &why);
  if (!socket) return fail("client", why);
  fabric->watch_peer(socket->fd());
  Hello hello;
  hello.test = options.test;
  hello.min_size = options.min_size;
  hello.max_size = options.max_size;
  hello.iterations = options.iterations;
  hello.provider = options.provider;
  hello.memory = options.memory;
  if (!socket->send(encode(hello), &why)) return fail("client", why);
  // From here on, a failure on this side is told to the server too (give_up).
  std::optional<BufferInfo> theirs =
      receive_as(*socket, MessageType::buffer, decode_buffer, options.timeout_ms, &why);
  if (!theirs) return give_up("client", *socket, why);
  if (theirs->length < options.max_size) {
    return give_up("client", *socket, "the server's buffer is smaller than the largest message");
  }

  std::optional<Remote> server = adopt_remote(*fabric, *theirs, &why);
  if (!server) return give_up("client", *socket, why);
  const size_t length = latency ? 2 * options.max_size : options.max_size;
  std::optional<Buffer> buffer = Buffer::allocate(options.memory, length, &why);
  if (!buffer) return give_up("client", *socket, why);
  if (buffer->host()) buffer->fill_pattern(options.max_size);

  std::vector<Registrar> registrars;
  std::vector<Registered> whole;  // (after `registrars`: each goes before its hmr domain)
  for (RegMode mode : options.reg_modes) {
    std::optional<Registrar> registrar = Registrar::open(*fabric, mode, options.dmabuf, &why);
    if (!registrar) return give_up("client", *socket, why);
    registrars.push_back(std::move(*registrar));
    std::optional<Registered> r =
        registrars.back().reg(buffer->data(), buffer->size(), kAccess, &why);
    if (!r) return give_up("client", *socket, why);
    whole.push_back(std::move(*r));
  }
  // The landing area for write_lat answers, published through the first mode's registration.
  const uint64_t landing = whole.front().base + options.max_size;
  if (!socket->send(encode(describe(*fabric, whole.front(), landing, options.max_size)), &why)) {
    return give_up("client", *socket, why);
  }

  // The data phase ends once --timeout passes without progress, or at once when the server
  // gives up or dies (peer_watch.h); in the bandwidth tests it also hears that this side
  // still moves bytes.
  PeerWatch watch(*socket, options.timeout_ms, /*tell_progress=*/!latency);
  Client client{options, *socket, *fabric, *buffer, *server, registrars, whole, watch};
  std::vector<Measurement> rows;
  uint64_t sequence = 0;
  int status = 0;
  // Warm-up: the first operation sets up the provider's connection to the peer, which no
  // measurement should include.  (write_lat pays it once, in its first sample: t_max.)
  if (!latency) {
    const bool ok = options.test == TestKind::write_bw
                        ? fabric->post_write(whole.front().local, 1, whole.front().desc, server->base,
                                             server->key, nullptr, nullptr, watch, &why)
                        : fabric->post_read(static_cast<uint8_t*>(whole.front().local) +
                                                options.max_size - 1, 1,
                                            whole.front().desc, server->base, server->key,
                                            nullptr, nullptr, watch, &why);
    if (!ok || !fabric->wait(1, watch, &why)) return give_up("client", *socket, "warm-up: " + why);
  }
  // Sizes outer, modes inner: the modes of one size run back to back, under the same
  // conditions, so their comparison is fair.
  for (uint64_t size : message_sizes(options)) {
    for (size_t mode = 0; mode < registrars.size() && status == 0; ++mode) {
      std::optional<Measurement> m = latency ? client.latency(size, mode, &sequence, &why)
                                             : client.bandwidth(size, mode, &why);
      if (!m) {
        status = give_up("client", *socket, why);
        break;
      }
      rows.push_back(*m);
      client.progress(size, registrars[mode].mode());
    }
    if (status != 0) break;
  }
  if (status == 0) {
    if (latency) {
      if (!socket->send(encode(Done{0}), &why)) status = fail("client", why);
    } else {
      const uint64_t sent = buffer->host() && options.test == TestKind::write_bw
                                ? buffer->checksum(options.max_size) : 0;
      // The answer is awaited progressing: what this side's provider still has to send
      // moves only then (manual progress), and the server's check waits for it.
      std::optional<std::vector<uint8_t>> body;
      std::optional<Done> answer;
      if (!socket->send(encode(Done{sent}), &why) ||
          !(body = receive_while_progressing(*fabric, *socket, MessageType::done,
                                             options.timeout_ms, &why)) ||
          !(answer = decode_done(*body, &why))) {
        status = fail("client", why);
      } else if (sent != 0 && answer->value != 0 && answer->value != sent) {
        // (0 from the server: it cannot read its buffer, device memory; nothing to compare.)
        status = fail("client", "the server's buffer does not hold the bytes written");
      }
    }
  }
  whole.clear();  // (each gives its registration back, before its registrar's domain goes)
  if (status != 0) return status;

  RunInfo run;
  run.test = options.test;
  run.provider = options.provider;
  run.served_as = fabric->provider_name();
  run.fabric_version = fabric->fabric_version();
  run.memory = options.memory;
  run.mr_mode = fabric->mr_mode();
  std::fputs(options.json ? format_json(run, rows).c_str() : format_table(run, rows).c_str(),
             stdout);
  if (!options.json) std::fputs(format_results(run, rows).c_str(), stdout);
  return 0;
}

}  // namespace hmr::perftest
