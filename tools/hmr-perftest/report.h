// hmr-perftest's results: one row per (message size, registration mode), printed as a table
// in the style of ib_write_bw / ib_write_lat, or as one JSON document.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"

namespace hmr::perftest {

struct Measurement {
  uint64_t size = 0;
  RegMode mode = RegMode::once;
  uint64_t iterations = 0;
  double seconds = 0;
  // Bandwidth tests.
  double gbytes_per_second = 0;  // 10^9 bytes per second
  double mmsgs_per_second = 0;
  // Latency test: one-way latency (half a round trip), in microseconds.
  double lat_avg_us = 0, lat_min_us = 0, lat_median_us = 0, lat_max_us = 0;
  // hmr's work during the run (zeros for the raw mode).
  uint64_t nic_registrations = 0;
  uint64_t cache_hits = 0;
};

struct RunInfo {
  TestKind test = TestKind::write_bw;
  std::string provider;   // the name the user gave (--provider), the one name reported
  std::string served_as;  // what libfabric serves it as ("tcp;ofi_rxm" for tcp)
  std::string fabric_version;
  std::string memory;
  uint64_t mr_mode = 0;
};

// A bandwidth test's rates: payload in 10^9 bytes per second, and millions of messages per
// second, for `iterations` messages of `size` bytes in `seconds`.  Floating point from the
// first operation: the byte count size * iterations reaches 2^64 within the protocol's bounds
// (4 GiB messages, 2^32 of them), where a u64 product wraps (to 0 there).  0 for a duration
// of 0, which a rate cannot be computed from (and --json could not print as a number).
double rate_gbytes_per_second(uint64_t size, uint64_t iterations, double seconds);
double rate_mmsgs_per_second(uint64_t iterations, double seconds);

// The median of `values` (the mean of the two middle ones when there are an even number);
// 0 for none.
double median(std::vector<double> values);
// The same of values already in ascending order (no copy: write_lat keeps up to 16M samples).
double median_of_sorted(const std::vector<double>& sorted);

std::string format_table(const RunInfo& run, const std::vector<Measurement>& rows);
std::string format_json(const RunInfo& run, const std::vector<Measurement>& rows);
// What each column means, for the end of the table (and --help).
std::string column_legend(TestKind test);
// RESULT lines for the hmr-versus-raw comparison at 1 MiB, when the run has both: the medians,
// their ratio, and the spread of the per-round ratios when the modes were repeated (one
// round is a smoke run, and says so).
std::string format_results(const RunInfo& run, const std::vector<Measurement>& rows);

}  // namespace hmr::perftest
