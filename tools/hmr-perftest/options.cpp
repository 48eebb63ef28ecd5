#include "options.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace hmr::perftest {
namespace {

// A size with an optional K/M/G suffix (binary).
std::optional<uint64_t> parse_size(const std::string& text) {
  if (text.empty() || text[0] == '-') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str()) return std::nullopt;
  uint64_t scale = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") scale = uint64_t{1} << 10;
  else if (suffix == "M" || suffix == "m") scale = uint64_t{1} << 20;
  else if (suffix == "G" || suffix == "g") scale = uint64_t{1} << 30;
  else if (!suffix.empty()) return std::nullopt;
  if (value > UINT64_MAX / scale) return std::nullopt;
  return value * scale;
}

std::optional<TestKind> parse_test(const std::string& text) {
  if (text == "write_bw") return TestKind::write_bw;
  if (text == "read_bw") return TestKind::read_bw;
  if (text == "write_lat") return TestKind::write_lat;
  return std::nullopt;
}

std::optional<RegMode> parse_reg_mode(const std::string& text) {
  if (text == "cached") return RegMode::cached;
  if (text == "per-iter") return RegMode::per_iter;
  if (text == "once") return RegMode::once;
  if (text == "raw") return RegMode::raw;
  return std::nullopt;
}

bool is_printable_name(const std::string& text, size_t max) {
  if (text.empty() || text.size() > max) return false;
  for (char c : text) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

const char* reg_mode_name(RegMode mode) {
  switch (mode) {
    case RegMode::cached: return "cached";
    case RegMode::per_iter: return "per-iter";
    case RegMode::once: return "once";
    case RegMode::raw: return "raw";
  }
  return "unknown";
}

std::string usage() {
  return R"(usage: hmr-perftest --server [options]        (one shell)
       hmr-perftest HOST [options]            (another shell; HOST runs the server)

  --test write_bw|read_bw|write_lat   what to measure (default write_bw)
  --size N                            one message size (K, M, G suffixes)
  --sizes MIN:MAX                     sweep MIN, 2*MIN, 4*MIN, ... (MIN*2^k up to MAX),
                                      ending at MAX (default 2:8M)
  --iters N                           messages per size (default 1000; write_lat: up to 16M)
  --max-size N                        the largest message this side takes, up to 4G (default
                                      1G): a client refuses a larger --size/--sizes, a server
                                      a client that asks for larger, before allocating for it
  --mem host|cuda:N|rocr:N|ze:N|neuron:N|synapseai:N   memory to register (default host)
  --dmabuf                            device memory must go through dma-buf
  --reg cached|per-iter|once|raw[,..] registration: through hmr per message (cached),
                                      per message with caching off (per-iter), once per run
                                      (once, default), or fi_mr_reg without hmr (raw);
                                      several modes are run and compared in one run
  --provider NAME                     libfabric provider: tcp, shm, verbs, efa, ... (default tcp)
  --port N                            out-of-band TCP port (default 18515)
  --timeout SECONDS                   how long a side waits for its peer (default 30): to
                                      connect, for each message, and in the data phase
                                      without progress; a peer that hangs up ends it at once
  --json                              one JSON document instead of the table
  --quiet                             no progress lines

The server checks its options and opens the provider before it waits for a client; a side
that gives up tells the other why.  The client names the test, the sizes, the iterations and
the registration modes: a server uses only --provider, --port, --timeout, --mem, --dmabuf,
--max-size and --quiet, and ignores the rest (it registers its buffer once, as --reg once).
A client the server refuses before allocating for it (another --provider, messages over the
server's --max-size, a test its --mem cannot serve, a malformed or missing hello) is told why
and the server waits for the next one; it serves one client, then exits.  Both sides must name
the same --provider; the table and the RESULT line report it by that name (the header adds
what libfabric serves it as, e.g. tcp is served as tcp;ofi_rxm).

Columns: reg is the registration mode; BW average is payload GB/s (10^9 bytes), MsgRate
millions of messages per second; t_min/t_typical (median)/t_avg/t_max are one-way latencies
in microseconds; nic_regs and cache_hits count the registrations that reached the provider and
those hmr's cache served during the timed loop only, so they read 0 for once and raw, which
register before it.  With write_bw at 1 MiB in raw and once (or cached), a RESULT line gives
the medians and their ratio; name the modes several times (--reg once,raw,once,raw,once,raw)
to get the spread of the per-round ratios: one round is a smoke run.
)";
}

std::string size_text(uint64_t bytes) {
  static constexpr struct {
    uint64_t scale;
    char suffix;
  } kUnits[] = {{uint64_t{1} << 30, 'G'}, {uint64_t{1} << 20, 'M'}, {uint64_t{1} << 10, 'K'}};
  for (const auto& unit : kUnits) {
    if (bytes >= unit.scale && bytes % unit.scale == 0) {
      return std::to_string(bytes / unit.scale) + unit.suffix;
    }
  }
  return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
}

std::optional<MemorySpec> parse_memory(const std::string& text) {
  if (text == "host") return MemorySpec{"host", 0};
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::string iface = text.substr(0, colon);
  if (iface != "cuda" && iface != "rocr" && iface != "ze" && iface != "neuron" &&
      iface != "synapseai") {
    return std::nullopt;
  }
  const std::string number = text.substr(colon + 1);
  if (number.empty() || number.size() > 6 ||
      number.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return MemorySpec{iface, std::atoi(number.c_str())};
}

std::optional<Options> parse_options(int argc, const char* const* argv, std::string* why,
                                     bool* help) {
  Options options;
  *help = false;
  auto fail = [why](std::string reason) -> std::optional<Options> {
    *why = std::move(reason) + " (hmr-perftest --help shows the options)";
    return std::nullopt;
  };
  bool have_host = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      *help = true;
      why->clear();
      return std::nullopt;
    } else if (arg == "--server") {
      options.server = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--quiet") {
      options.quiet = true;
    } else if (arg == "--dmabuf") {
      options.dmabuf = true;
    } else if (arg == "--test") {
      if (!value(&v)) return fail("--test needs a value");
      std::optional<TestKind> test = parse_test(v);
      if (!test) return fail("unknown --test '" + v + "'");
      options.test = *test;
    } else if (arg == "--size") {
      if (!value(&v)) return fail("--size needs a value");
      std::optional<uint64_t> size = parse_size(v);
      if (!size || *size == 0) return fail("bad --size '" + v + "'");
      options.min_size = options.max_size = *size;
    } else if (arg == "--sizes") {
      if (!value(&v)) return fail("--sizes needs MIN:MAX");
      const size_t colon = v.find(':');
      std::optional<uint64_t> low, high;
      if (colon != std::string::npos) {
        low = parse_size(v.substr(0, colon));
        high = parse_size(v.substr(colon + 1));
      }
      if (!low || !high || *low == 0 || *low > *high) return fail("bad --sizes '" + v + "'");
      options.min_size = *low;
      options.max_size = *high;
    } else if (arg == "--max-size") {
      if (!value(&v)) return fail("--max-size needs a value");
      std::optional<uint64_t> limit = parse_size(v);
      if (!limit || *limit == 0 || *limit > kMaxMessageSize) {
        return fail("bad --max-size '" + v + "' (1 byte up to 4G)");
      }
      options.size_limit = *limit;
    } else if (arg == "--iters") {
      if (!value(&v)) return fail("--iters needs a value");
      std::optional<uint64_t> iterations = parse_size(v);
      if (!iterations || *iterations == 0 || *iterations > kMaxIterations) {
        return fail("bad --iters '" + v + "'");
      }
      options.iterations = *iterations;
    } else if (arg == "--mem") {
      if (!value(&v)) return fail("--mem needs a value");
      if (!parse_memory(v)) return fail("bad --mem '" + v + "'");
      options.memory = v;
    } else if (arg == "--reg") {
      if (!value(&v)) return fail("--reg needs a value");
      options.reg_modes.clear();
      size_t start = 0;
      for (;;) {
        const size_t comma = v.find(',', start);
        const std::string part = v.substr(start, comma - start);
        std::optional<RegMode> mode = parse_reg_mode(part);
        if (!mode) return fail("unknown --reg mode '" + part + "'");
        options.reg_modes.push_back(*mode);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (arg == "--provider") {
      if (!value(&v)) return fail("--provider needs a value");
      if (!is_printable_name(v, kMaxProviderName)) return fail("bad --provider '" + v + "'");
      options.provider = v;
    } else if (arg == "--port") {
      if (!value(&v)) return fail("--port needs a value");
      std::optional<uint64_t> port = parse_size(v);
      if (!port || *port > 65535) return fail("bad --port '" + v + "'");
      options.port = static_cast<uint16_t>(*port);
    } else if (arg == "--timeout") {
      if (!value(&v)) return fail("--timeout needs a value");
      std::optional<uint64_t> seconds = parse_size(v);
      if (!seconds || *seconds == 0 || *seconds > 3600) return fail("bad --timeout '" + v + "'");
      options.timeout_ms = static_cast<int>(*seconds * 1000);
    } else if (!arg.empty() && arg[0] != '-' && !have_host) {
      options.host = arg;
      have_host = true;
    } else {
      return fail("unexpected argument '" + arg + "'");
    }
  }
  if (options.server == have_host) {
    return fail(options.server ? "a server takes no HOST" : "give --server, or the server's HOST");
  }
  if (options.max_size > kMaxMessageSize) return fail("messages are limited to 4 GiB");
  // The client's own bound, as the server applies it to a client's hello (admission.h).
  if (!options.server && options.max_size > options.size_limit) {
    return fail("messages up to " + size_text(options.max_size) + " are over --max-size " +
                size_text(options.size_limit) + ": give a larger --max-size (up to 4G), or "
                "smaller --size/--sizes");
  }
  // Refused with the other option errors (exit 2), not once the run has begun.
  if (!options.server && options.test == TestKind::write_lat &&
      options.iterations > kMaxLatencyIterations) {
    return fail("write_lat keeps every sample: use --iters up to 16M");
  }
  // Refused here, on both sides, rather than by a server that then drops the connection.
  if (options.memory != "host") {
    if (options.test == TestKind::write_lat) {
      return fail("write_lat polls memory with the CPU: use --mem host");
    }
    for (RegMode mode : options.reg_modes) {
      if (mode == RegMode::raw) {
        return fail("--reg raw registers with plain fi_mr_reg, which hands the provider a " +
                    options.memory + " address as host memory: use --mem host (hmr's modes "
                    "register device memory)");
      }
    }
  }
  return options;
}

// MIN * 2^k while it is below MAX, then MAX itself (3:20 is 3, 6, 12, 20).
std::vector<uint64_t> message_sizes(const Options& options) {
  std::vector<uint64_t> sizes;
  for (uint64_t size = options.min_size; size <= options.max_size; size *= 2) {
    sizes.push_back(size);
    if (size > options.max_size / 2) break;
  }
  if (sizes.back() != options.max_size) sizes.push_back(options.max_size);
  return sizes;
}

}  // namespace hmr::perftest
