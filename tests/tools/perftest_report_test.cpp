// hmr-perftest's report: the RESULT line names the provider as the user did, gives the
// spread of repeated rounds (and calls one round a smoke run), and the table explains its
// columns.
#include "report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hmr::perftest {
namespace {

Measurement at_1mib(RegMode mode, double gbytes_per_second) {
  Measurement m;
  m.size = uint64_t{1} << 20;
  m.mode = mode;
  m.iterations = 100;
  m.gbytes_per_second = gbytes_per_second;
  return m;
}

RunInfo tcp_run() {
  RunInfo run;
  run.provider = "tcp";
  run.served_as = "tcp;ofi_rxm";
  run.fabric_version = "1.17";
  run.memory = "host";
  return run;
}

TEST(PerftestReport, TheMedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  // write_lat's t_typical took the upper middle sample of its default 1000.
  EXPECT_EQ(hmr::perftest::median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(hmr::perftest::median({3, 1, 2}), 2.0);
  EXPECT_EQ(hmr::perftest::median({}), 0.0);
}

// The bandwidth of a run is size * iterations bytes over its seconds.  That byte count was a
// u64 product, converted after: at the protocol's bounds (4 GiB messages, 2^32 of them, which
// the options allow with --max-size 4G) it is 2^64 and wrapped to 0, reported as 0 GB/s.
TEST(PerftestReport, BandwidthIsComputedInFloatingPointWhereTheByteCountPassesU64) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  const double bytes = 18446744073709551616.0;  // 2^64
  EXPECT_DOUBLE_EQ(rate_gbytes_per_second(4 * kGiB, uint64_t{1} << 32, 1.0), bytes / 1e9);
  // 9 * 2^61 bytes, which wrapped to 2^61.
  EXPECT_DOUBLE_EQ(rate_gbytes_per_second(3 * kGiB, uint64_t{3} << 31, 4.0),
                   9.0 * (uint64_t{1} << 61) / 4 / 1e9);
  // Small sizes and short runs keep their fractions.
  EXPECT_DOUBLE_EQ(rate_gbytes_per_second(2, 3, 1e-6), 6e-3);
  EXPECT_DOUBLE_EQ(rate_gbytes_per_second(1 << 20, 1000, 0.5), 2.097152);
  EXPECT_DOUBLE_EQ(rate_mmsgs_per_second(3, 2e-6), 1.5);
  EXPECT_DOUBLE_EQ(rate_mmsgs_per_second(uint64_t{1} << 32, 1.0), 4294.967296);
  // No rate from no time: --json must print a number, not inf.
  EXPECT_EQ(rate_gbytes_per_second(8, 10, 0.0), 0.0);
  EXPECT_EQ(rate_mmsgs_per_second(10, 0.0), 0.0);
}

TEST(PerftestReport, OneRoundIsASmokeRun) {
  const std::string result =
      format_results(tcp_run(), {at_1mib(RegMode::once, 2.0), at_1mib(RegMode::raw, 2.5)});
  EXPECT_EQ(result.rfind("RESULT metric=write_bw_1MiB provider=tcp hmr=2.000 raw=2.500 "
                         "ratio=0.80 rounds=1 spread=none\n", 0), 0u) << result;
  EXPECT_NE(result.find("smoke run"), std::string::npos) << result;
}

TEST(PerftestReport, RepeatedRoundsGiveMediansAndTheSpreadOfTheirRatios) {
  // Interleaved as --reg once,raw,once,raw,once,raw runs them.
  const std::vector<Measurement> rows = {
      at_1mib(RegMode::once, 1.0), at_1mib(RegMode::raw, 1.0),  // 1.00
      at_1mib(RegMode::once, 0.9), at_1mib(RegMode::raw, 1.0),  // 0.90
      at_1mib(RegMode::once, 1.1), at_1mib(RegMode::raw, 1.0)}; // 1.10
  const std::string result = format_results(tcp_run(), rows);
  EXPECT_EQ(result, "RESULT metric=write_bw_1MiB provider=tcp hmr=1.000 raw=1.000 ratio=1.00 "
                    "rounds=3 spread=0.90..1.10\n");
}

TEST(PerftestReport, NoResultWithoutBothSides) {
  EXPECT_EQ(format_results(tcp_run(), {at_1mib(RegMode::raw, 1.0)}), "");
  RunInfo latency = tcp_run();
  latency.test = TestKind::write_lat;
  EXPECT_EQ(format_results(latency, {at_1mib(RegMode::once, 1), at_1mib(RegMode::raw, 1)}), "");
}

TEST(PerftestReport, TheHeaderNamesTheProviderOnceAndTheColumnsAreExplained) {
  const std::string table = format_table(tcp_run(), {at_1mib(RegMode::once, 1.0)});
  EXPECT_NE(table.find("provider tcp (libfabric 1.17, served as tcp;ofi_rxm)"),
            std::string::npos) << table;
  EXPECT_NE(table.find("nic_regs, cache_hits: registrations that reached the provider"),
            std::string::npos) << table;
  EXPECT_NE(table.find("0 for once and raw"), std::string::npos) << table;
  // The legend fits the table's width.
  for (size_t start = 0, end; (end = table.find('\n', start)) != std::string::npos; start = end + 1) {
    if (table.compare(start, 14, " hmr-perftest ") == 0) continue;  // the header names things
    EXPECT_LE(end - start, 96u) << table.substr(start, end - start);
  }
  const std::string json = format_json(tcp_run(), {});
  EXPECT_NE(json.find("\"provider\": \"tcp\",\n  \"served_as\": \"tcp;ofi_rxm\""),
            std::string::npos) << json;
}

// docs/tools.md promised nic_regs and cache_hits for every test, but write_lat's table had
// no cache_hits column.
TEST(PerftestReport, TheLatencyTableHasCacheHitsToo) {
  RunInfo run = tcp_run();
  run.test = TestKind::write_lat;
  Measurement m = at_1mib(RegMode::cached, 0);
  m.lat_min_us = 12.5;
  m.lat_median_us = 13;
  m.lat_avg_us = 13.25;
  m.lat_max_us = 99999.5;
  m.nic_registrations = 1;
  m.cache_hits = 999;
  const std::string table = format_table(run, {m});
  EXPECT_NE(table.find(" t_max     nic_regs  cache_hits\n"), std::string::npos) << table;
  EXPECT_NE(table.find(" 12.50     13.00     13.25     99999.50  1         999\n"),
            std::string::npos) << table;
  EXPECT_NE(table.find("nic_regs, cache_hits: registrations that reached the provider"),
            std::string::npos) << table;
  for (size_t start = 0, end; (end = table.find('\n', start)) != std::string::npos; start = end + 1) {
    if (table.compare(start, 14, " hmr-perftest ") == 0) continue;
    EXPECT_LE(end - start, 96u) << table.substr(start, end - start);
  }
}

}  // namespace
}  // namespace hmr::perftest
