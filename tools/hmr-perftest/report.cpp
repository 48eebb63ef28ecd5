#include "report.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace hmr::perftest {
namespace {

__attribute__((format(printf, 1, 2))) std::string printf_string(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  return line;
}

bool is_latency(TestKind test) { return test == TestKind::write_lat; }

std::string rule() { return std::string(96, '-') + "\n"; }

}  // namespace

double rate_gbytes_per_second(uint64_t size, uint64_t iterations, double seconds) {
  if (!(seconds > 0)) return 0;
  return static_cast<double>(size) * static_cast<double>(iterations) / seconds / 1e9;
}

double rate_mmsgs_per_second(uint64_t iterations, double seconds) {
  if (!(seconds > 0)) return 0;
  return static_cast<double>(iterations) / seconds / 1e6;
}

double median_of_sorted(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return median_of_sorted(values);
}

std::string format_table(const RunInfo& run, const std::vector<Measurement>& rows) {
  std::string out = rule();
  const std::string served =
      run.served_as.empty() || run.served_as == run.provider ? "" : ", served as " + run.served_as;
  out += printf_string(" hmr-perftest %s   provider %s (libfabric %s%s)   memory %s   mr_mode 0x%llx\n",
                       test_name(run.test), run.provider.c_str(), run.fabric_version.c_str(),
                       served.c_str(), run.memory.c_str(),
                       static_cast<unsigned long long>(run.mr_mode));
  out += rule();
  if (is_latency(run.test)) {
    // (Microseconds, as the legend says: with units in each name the row would not fit.)
    out += " #bytes     #iterations  reg       t_min     t_typical t_avg     t_max     nic_regs  cache_hits\n";
    for (const Measurement& m : rows) {
      out += printf_string(" %-10llu %-12llu %-9s %-9.2f %-9.2f %-9.2f %-9.2f %-9llu %llu\n",
                           static_cast<unsigned long long>(m.size),
                           static_cast<unsigned long long>(m.iterations), reg_mode_name(m.mode),
                           m.lat_min_us, m.lat_median_us, m.lat_avg_us, m.lat_max_us,
                           static_cast<unsigned long long>(m.nic_registrations),
                           static_cast<unsigned long long>(m.cache_hits));
    }
  } else {
    out += " #bytes     #iterations  reg       BW average[GB/s]  MsgRate[Mpps]  nic_regs  cache_hits\n";
    for (const Measurement& m : rows) {
      out += printf_string(" %-10llu %-12llu %-9s %-17.3f %-14.4f %-9llu %llu\n",
                           static_cast<unsigned long long>(m.size),
                           static_cast<unsigned long long>(m.iterations), reg_mode_name(m.mode),
                           m.gbytes_per_second, m.mmsgs_per_second,
                           static_cast<unsigned long long>(m.nic_registrations),
                           static_cast<unsigned long long>(m.cache_hits));
    }
  }
  out += rule();
  out += column_legend(run.test);
  return out;
}

std::string column_legend(TestKind test) {
  std::string legend =
      " reg: once and raw register the buffer before the timed loop (raw with fi_mr_reg, no\n"
      "   hmr); cached and per-iter register every message inside it (per-iter: cache off)\n";
  if (is_latency(test)) {
    return legend +
           " t_*: one-way latency (half a round trip) in microseconds; t_typical is the median\n"
           " nic_regs, cache_hits: registrations that reached the provider, and those hmr's cache\n"
           "   served, in the timed loop only: 0 for once and raw, whose one registration comes\n"
           "   before it\n";
  }
  return legend +
         " BW average: GB/s of payload (10^9 bytes); MsgRate: millions of messages per second\n"
         " nic_regs, cache_hits: registrations that reached the provider, and those hmr's cache\n"
         "   served, in the timed loop only: 0 for once and raw, whose one registration comes\n"
         "   before it\n";
}

std::string format_json(const RunInfo& run, const std::vector<Measurement>& rows) {
  // Names are escaped; everything else is a number or this tool's own words.
  auto escaped = [](const std::string& text) {
    std::string out;
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out;
  };
  std::string out = "{\n";
  out += printf_string("  \"test\": \"%s\",\n  \"provider\": \"%s\",\n  \"served_as\": \"%s\",\n"
                       "  \"libfabric\": \"%s\",\n",
                       test_name(run.test), escaped(run.provider).c_str(),
                       escaped(run.served_as).c_str(), escaped(run.fabric_version).c_str());
  out += printf_string("  \"memory\": \"%s\",\n  \"mr_mode\": %llu,\n  \"results\": [",
                       escaped(run.memory).c_str(), static_cast<unsigned long long>(run.mr_mode));
  for (size_t i = 0; i < rows.size(); ++i) {
    const Measurement& m = rows[i];
    out += i == 0 ? "\n" : ",\n";
    out += printf_string(
        "    {\"bytes\": %llu, \"iterations\": %llu, \"reg\": \"%s\", \"seconds\": %.6f, "
        "\"gbytes_per_s\": %.4f, \"mmsgs_per_s\": %.4f, \"lat_min_us\": %.3f, "
        "\"lat_median_us\": %.3f, \"lat_avg_us\": %.3f, \"lat_max_us\": %.3f, "
        "\"nic_registrations\": %llu, \"cache_hits\": %llu}",
        static_cast<unsigned long long>(m.size), static_cast<unsigned long long>(m.iterations),
        reg_mode_name(m.mode), m.seconds, m.gbytes_per_second, m.mmsgs_per_second, m.lat_min_us,
        m.lat_median_us, m.lat_avg_us, m.lat_max_us,
        static_cast<unsigned long long>(m.nic_registrations),
        static_cast<unsigned long long>(m.cache_hits));
  }
  out += "\n  ]\n}\n";
  return out;
}

std::string format_results(const RunInfo& run, const std::vector<Measurement>& rows) {
  if (run.test != TestKind::write_bw) return {};
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  // A mode named several times (--reg cached,raw,cached,raw,...) runs interleaved with the
  // others; the median of its runs is what is compared, so one disturbed run does not decide.
  std::vector<double> raw, cached, once;
  for (const Measurement& m : rows) {
    if (m.size != kMiB) continue;
    if (m.mode == RegMode::raw) raw.push_back(m.gbytes_per_second);
    if (m.mode == RegMode::cached) cached.push_back(m.gbytes_per_second);
    if (m.mode == RegMode::once) once.push_back(m.gbytes_per_second);
  }
  // Like for like: memory registered once through hmr against memory registered once with
  // fi_mr_reg, so the figure is what hmr costs on the data path (nothing, if all is well).
  // Without a `once` run, `cached`: per-message registration served by hmr's cache.  (On a
  // small machine, per-message modes can even beat raw: the work between posts changes how
  // the two processes and the kernel share the cores.)
  std::vector<double>& through_hmr = once.empty() ? cached : once;
  if (raw.empty() || through_hmr.empty()) return {};
  // Rounds pair the n-th run of each mode (they ran interleaved, under the same conditions);
  // the spread of their ratios says how much of the median's ratio is noise.
  const size_t rounds = std::min(raw.size(), through_hmr.size());
  double low = 0, high = 0;
  for (size_t i = 0; i < rounds; ++i) {
    if (raw[i] <= 0) return {};
    const double ratio = through_hmr[i] / raw[i];
    low = i == 0 ? ratio : std::min(low, ratio);
    high = i == 0 ? ratio : std::max(high, ratio);
  }
  const double hmr = median(through_hmr);
  const double baseline = median(raw);
  if (baseline <= 0) return {};
  // The provider as the user named it, as in the table's header.
  std::string line = printf_string(
      "RESULT metric=write_bw_1MiB provider=%s hmr=%.3f raw=%.3f ratio=%.2f rounds=%zu",
      run.provider.c_str(), hmr, baseline, hmr / baseline, rounds);
  if (rounds == 1) {
    line += " spread=none\n"
            "note: one round is a smoke run: the ratio is within the noise of one run; name the "
            "modes\n      several times for a spread, e.g. --reg once,raw,once,raw,once,raw\n";
  } else {
    line += printf_string(" spread=%.2f..%.2f\n", low, high);
  }
  return line;
}

}  // namespace hmr::perftest
