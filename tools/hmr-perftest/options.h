// hmr-perftest's command line, parsed and checked before anything is opened.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "peer_message.h"

namespace hmr::perftest {

// How the buffers are registered for each run.
enum class RegMode {
  cached,    // through hmr, once per message (repeats hit hmr's cache)
  per_iter,  // through hmr with caching off: every message registers and deregisters
  once,      // through hmr, once for the whole run (the perftest default)
  raw,       // fi_mr_reg directly, once for the whole run: the baseline without hmr
};

const char* reg_mode_name(RegMode mode);

// write_lat keeps every sample (8 bytes each) to report the median: 16M is 128 MiB.
inline constexpr uint64_t kMaxLatencyIterations = uint64_t{1} << 24;
// --max-size's default: the largest message a side takes unless told otherwise.  A server
// allocates and registers a buffer of the client's largest message, so without a bound of
// its own any client could make it allocate up to the protocol's 4 GiB (kMaxMessageSize).
inline constexpr uint64_t kDefaultSizeLimit = uint64_t{1} << 30;

struct Options {
  bool server = false;
  std::string host;       // client: the server to connect to
  uint16_t port = 18515;  // perftest's default port
  TestKind test = TestKind::write_bw;
  uint64_t min_size = 2;
  uint64_t max_size = uint64_t{1} << 23;  // perftest's -a sweep: 2 B .. 8 MiB
  // --max-size: the largest message this side takes (a client: its own --size/--sizes; a
  // server: what a client may ask for), at most kMaxMessageSize.
  uint64_t size_limit = kDefaultSizeLimit;
  uint64_t iterations = 1000;
  std::string memory = "host";  // host | cuda:N | rocr:N | ze:N | neuron:N | synapseai:N
  bool dmabuf = false;          // insist on dma-buf for device memory
  std::vector<RegMode> reg_modes = {RegMode::once};  // several: compared in one run
  std::string provider = "tcp";
  bool json = false;
  int timeout_ms = 30000;  // connection, each message, and the data phase without progress
  bool quiet = false;      // no progress lines
};

// Parses argv; on failure returns nullopt with the reason and usage hint in `why`.
// `--help` sets `help` and returns nullopt with an empty `why`.
std::optional<Options> parse_options(int argc, const char* const* argv, std::string* why,
                                     bool* help);

std::string usage();

// A byte count as --size would take it ("64K", "1G"), and in bytes where that is not exact
// or not shorter ("1000 bytes"): for the reasons that name a size.
std::string size_text(uint64_t bytes);

// The message sizes of a run: min, 2*min, 4*min, ... (min * 2^k below max), and max.
std::vector<uint64_t> message_sizes(const Options& options);

// "cuda:1" -> ("cuda", 1); "host" -> ("host", 0).  Nullopt when malformed.
struct MemorySpec {
  std::string iface;
  int device = 0;
};
std::optional<MemorySpec> parse_memory(const std::string& text);

}  // namespace hmr::perftest
