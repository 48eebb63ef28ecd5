// hmr-perftest's command line: what a user types is understood, and what is wrong is refused
// with a reason before anything is opened.
#include "options.h"

#include <gtest/gtest.h>

#include <initializer_list>

namespace hmr::perftest {
namespace {

struct Parsed {
  std::optional<Options> options;
  std::string why;
  bool help = false;
};

Parsed parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"hmr-perftest"};
  argv.insert(argv.end(), args.begin(), args.end());
  Parsed parsed;
  parsed.options =
      parse_options(static_cast<int>(argv.size()), argv.data(), &parsed.why, &parsed.help);
  return parsed;
}

TEST(PerftestOptions, ServerAndClientDefaults) {
  Parsed server = parse({"--server"});
  ASSERT_TRUE(server.options) << server.why;
  EXPECT_TRUE(server.options->server);
  EXPECT_EQ(server.options->test, TestKind::write_bw);
  EXPECT_EQ(server.options->provider, "tcp");
  EXPECT_EQ(server.options->port, 18515);

  Parsed client = parse({"10.0.0.2", "--test", "read_bw", "--sizes", "4K:1M", "--iters", "50",
                         "--reg", "cached,per-iter", "--provider", "shm", "--mem", "cuda:1", "--json",
                         "--dmabuf", "--port", "9000", "--timeout", "5"});
  ASSERT_TRUE(client.options) << client.why;
  const Options& o = *client.options;
  EXPECT_EQ(o.host, "10.0.0.2");
  EXPECT_EQ(o.test, TestKind::read_bw);
  EXPECT_EQ(o.min_size, 4096u);
  EXPECT_EQ(o.max_size, 1u << 20);
  EXPECT_EQ(o.iterations, 50u);
  ASSERT_EQ(o.reg_modes.size(), 2u);
  EXPECT_EQ(o.reg_modes[0], RegMode::cached);
  EXPECT_EQ(o.reg_modes[1], RegMode::per_iter);
  EXPECT_EQ(o.provider, "shm");
  EXPECT_EQ(o.memory, "cuda:1");
  EXPECT_TRUE(o.json);
  EXPECT_TRUE(o.dmabuf);
  EXPECT_EQ(o.port, 9000);
  EXPECT_EQ(o.timeout_ms, 5000);
}

TEST(PerftestOptions, SizeSweepIsPowersOfTwoEndingAtMax) {
  Parsed parsed = parse({"h", "--sizes", "2:8"});
  ASSERT_TRUE(parsed.options);
  EXPECT_EQ(message_sizes(*parsed.options), (std::vector<uint64_t>{2, 4, 8}));
  parsed = parse({"h", "--sizes", "3:20"});
  ASSERT_TRUE(parsed.options);
  EXPECT_EQ(message_sizes(*parsed.options), (std::vector<uint64_t>{3, 6, 12, 20}));
  parsed = parse({"h", "--size", "1M"});
  ASSERT_TRUE(parsed.options);
  EXPECT_EQ(message_sizes(*parsed.options), (std::vector<uint64_t>{1u << 20}));
  // --help says it as it is: MIN times powers of two, not powers of two, and MAX at the end.
  EXPECT_NE(usage().find("MIN*2^k up to MAX"), std::string::npos) << usage();
  EXPECT_NE(usage().find("ending at MAX"), std::string::npos) << usage();
}

TEST(PerftestOptions, WriteLatTakesUpTo16MIterations) {
  Parsed parsed = parse({"h", "--test", "write_lat", "--iters", "16M"});
  EXPECT_TRUE(parsed.options) << parsed.why;
  parsed = parse({"h", "--iters", "32M"});  // the bandwidth tests keep no samples
  EXPECT_TRUE(parsed.options) << parsed.why;
  parsed = parse({"h", "--test", "write_lat", "--iters", "17M"});
  EXPECT_FALSE(parsed.options);
  EXPECT_NE(parsed.why.find("up to 16M"), std::string::npos) << parsed.why;
}

// A server takes its test, sizes, iterations and modes from the client: --help says which of
// its own options it ignores.
TEST(PerftestOptions, TheHelpSaysWhatAServerIgnores) {
  EXPECT_NE(usage().find("a server uses only --provider, --port, --timeout, --mem, --dmabuf"),
            std::string::npos) << usage();
}

TEST(PerftestOptions, BadInputIsRefusedWithAReason) {
  const std::initializer_list<const char*> bad[] = {
      {},                                    // neither server nor host
      {"--server", "host"},                  // both
      {"h", "--test", "send_bw"},            // unknown test
      {"h", "--size", "0"},                  // empty messages
      {"h", "--size", "12X"},                // bad suffix
      {"h", "--sizes", "8:4"},               // min > max
      {"h", "--sizes", "8"},                 // no colon
      {"h", "--size", "8G"},                 // over 4 GiB
      {"h", "--iters", "0"},
      {"h", "--iters", "-5"},
      {"h", "--mem", "cuda"},                // no device
      {"h", "--mem", "cuda:x"},
      {"h", "--mem", "tpu:0"},
      {"h", "--reg", "cached,sometimes"},
      {"h", "--provider", "tcp shm"},        // not a name
      {"h", "--port", "70000"},
      {"h", "--timeout", "0"},
      {"h", "--iters"},                      // missing value
      {"h", "extra"},                        // second host
      {"h", "--mem", "cuda:0", "--test", "write_lat"},  // polls device memory with the CPU
      {"h", "--mem", "cuda:0", "--reg", "once,raw"},    // fi_mr_reg of a device address
      // write_lat keeps every sample: refused with the option errors (exit 2), where the
      // client refused it only once it ran (exit 1).
      {"h", "--test", "write_lat", "--iters", "16777217"},
      {"h", "--iters", "32M", "--test", "write_lat"},
  };
  for (const auto& args : bad) {
    Parsed parsed = parse(args);
    EXPECT_FALSE(parsed.options);
    EXPECT_FALSE(parsed.why.empty());
    EXPECT_NE(parsed.why.find("--help"), std::string::npos) << parsed.why;
  }
  Parsed help = parse({"--help"});
  EXPECT_FALSE(help.options);
  EXPECT_TRUE(help.help);
  EXPECT_NE(usage().find("--reg"), std::string::npos);
}

// --max-size bounds the messages a side takes: the client's own, when its options are read,
// and (admission.h) what a client may ask of the server.
TEST(PerftestOptions, MaxSizeBoundsTheClientsOwnMessages) {
  Parsed parsed = parse({"h"});
  ASSERT_TRUE(parsed.options) << parsed.why;
  EXPECT_EQ(parsed.options->size_limit, uint64_t{1} << 30);  // 1G by default
  parsed = parse({"--server", "--max-size", "64K"});
  ASSERT_TRUE(parsed.options) << parsed.why;
  EXPECT_EQ(parsed.options->size_limit, 65536u);
  // A server's own --sizes are not its limit: it takes the client's (default 8M) and refuses
  // it only when a client asks.
  EXPECT_TRUE(parse({"--server", "--max-size", "1M"}).options);
  parsed = parse({"h", "--max-size", "4G", "--size", "4G"});  // the protocol's bound
  ASSERT_TRUE(parsed.options) << parsed.why;
  EXPECT_EQ(parsed.options->size_limit, uint64_t{4} << 30);
  EXPECT_EQ(parsed.options->max_size, uint64_t{4} << 30);
  parsed = parse({"h", "--sizes", "1K:1M", "--max-size", "1M"});  // at the limit
  EXPECT_TRUE(parsed.options) << parsed.why;
  parsed = parse({"h", "--max-size", "1048576", "--size", "1M"});  // plain bytes too
  EXPECT_TRUE(parsed.options) << parsed.why;

  // Over it: refused with the option errors (exit 2), naming both sizes and the way out.
  parsed = parse({"h", "--size", "2G"});
  EXPECT_FALSE(parsed.options);
  EXPECT_NE(parsed.why.find("messages up to 2G are over --max-size 1G"), std::string::npos)
      << parsed.why;
  EXPECT_NE(parsed.why.find("give a larger --max-size (up to 4G)"), std::string::npos)
      << parsed.why;
  parsed = parse({"h", "--max-size", "64K", "--sizes", "2:8M"});
  EXPECT_FALSE(parsed.options);
  EXPECT_NE(parsed.why.find("messages up to 8M are over --max-size 64K"), std::string::npos)
      << parsed.why;
  parsed = parse({"h", "--max-size", "1000", "--size", "1001"});
  EXPECT_FALSE(parsed.options);
  EXPECT_NE(parsed.why.find("messages up to 1001 bytes are over --max-size 1000 bytes"),
            std::string::npos) << parsed.why;

  const std::initializer_list<const char*> bad[] = {
      {"h", "--max-size"},                 // missing value
      {"h", "--max-size", "0"},            // no message fits
      {"h", "--max-size", "5G"},           // over the protocol's 4 GiB
      {"h", "--max-size", "4294967297"},
      {"h", "--max-size", "-1"},
      {"h", "--max-size", "1T"},           // not a suffix --size takes
      {"h", "--max-size", "12X"},
      {"h", "--max-size", ""},
      {"h", "--max-size", "99999999999999999999999"},  // over u64
      {"h", "--max-size", "18014398509481984K"},       // 2^64 once scaled
      {"--server", "--max-size", "0"},
      {"--server", "--max-size", "8G"},
  };
  for (const auto& args : bad) {
    parsed = parse(args);
    EXPECT_FALSE(parsed.options);
    EXPECT_NE(parsed.why.find("--max-size"), std::string::npos) << parsed.why;
    EXPECT_NE(parsed.why.find("--help"), std::string::npos) << parsed.why;
  }
  EXPECT_NE(usage().find("--max-size N"), std::string::npos) << usage();
  EXPECT_NE(usage().find("waits for the next one"), std::string::npos) << usage();
}

TEST(PerftestOptions, SizesAreSaidAsTheOptionsTakeThem) {
  EXPECT_EQ(size_text(uint64_t{1} << 30), "1G");
  EXPECT_EQ(size_text(uint64_t{4} << 30), "4G");
  EXPECT_EQ(size_text(uint64_t{3} << 29), "1536M");
  EXPECT_EQ(size_text(65536), "64K");
  EXPECT_EQ(size_text(1536), "1536 bytes");
  EXPECT_EQ(size_text(1), "1 byte");
  EXPECT_EQ(size_text(uint64_t{1} << 40), "1024G");
}

TEST(PerftestOptions, MemorySpecs) {
  EXPECT_EQ(parse_memory("host")->iface, "host");
  std::optional<MemorySpec> ze = parse_memory("ze:3");
  ASSERT_TRUE(ze);
  EXPECT_EQ(ze->iface, "ze");
  EXPECT_EQ(ze->device, 3);
  EXPECT_FALSE(parse_memory("ze:"));
  EXPECT_FALSE(parse_memory("ze:99999999"));
  EXPECT_FALSE(parse_memory(""));
}

}  // namespace
}  // namespace hmr::perftest
