// hmr-info: what hmr finds on this machine (memory runtimes and their devices, the NIC side,
// cache monitors, the settings in force) and why anything is missing.  See `hmr-info --help`.
#include <hmr/hmr.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "first_screen.h"
#include "json_value.h"
#include "report.h"
#include "text_report.h"

namespace {

constexpr const char* kUsage =
    "usage: hmr-info [--full | --json | --version | --help]\n"
    "\n"
    "Says what works on this machine: which NIC and options to pass hmr_domain_open, which\n"
    "memory hmr can register, and what is missing with the one thing to do about it.\n"
    "\n"
    "  (none)     that first screen (lines of at most 100 columns)\n"
    "  --full     the first screen, then the whole report: each memory interface (loaded or\n"
    "             not, library, version, why not), each device (PCI bus id, dma-buf,\n"
    "             peer-direct and P2P answers with reasons), the NIC side (kernel, dma-buf\n"
    "             import, peer-memory clients, RLIMIT_MEMLOCK, RDMA devices, libfabric\n"
    "             providers and the name to pass for each, the memory operations of each NIC),\n"
    "             the cache monitors, and every environment variable hmr reads\n"
    "  --json     the whole report as one JSON document (keys hmr, summary, ifaces, devices,\n"
    "             nics, monitors, config); summary holds the first screen's words\n"
    "  --version  hmr's version (the library's, and the headers this was built with)\n"
    "  --help     this text\n"
    "\n"
    "HMR_<VENDOR>_LIBRARY (CUDA, ROCR, ZE, NEURON, SYNAPSEAI, HLTHUNK, IBVERBS, MLX5, OFI)\n"
    "point hmr at a runtime library of your choice, exactly as for applications.\n";

bool write_all(const std::string& text) {
  return std::fwrite(text.data(), 1, text.size(), stdout) == text.size() &&
         std::fflush(stdout) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  enum class Output { first_screen, full, json } output = Output::first_screen;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      output = Output::json;
    } else if (std::strcmp(argv[i], "--full") == 0) {
      output = Output::full;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      return write_all(kUsage) ? 0 : 1;
    } else if (std::strcmp(argv[i], "--version") == 0) {
      const uint32_t version = hmr_version();
      char line[96];
      std::snprintf(line, sizeof line, "hmr-info: hmr %u.%u.%u (built with hmr.h %d.%d.%d)\n",
                    version >> 16, (version >> 8) & 0xff, version & 0xff, HMR_VERSION_MAJOR,
                    HMR_VERSION_MINOR, HMR_VERSION_PATCH);
      return write_all(line) ? 0 : 1;
    } else {
      std::fprintf(stderr, "hmr-info: unknown argument '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  const hmr::info::JsonValue report = hmr::info::build_report();
  const std::string text = output == Output::json   ? report.to_json(2)
                           : output == Output::full ? hmr::info::render_text(report)
                                                    : hmr::info::render_first_screen(report);
  if (!write_all(text)) {
    std::fprintf(stderr, "hmr-info: cannot write the report: %s\n", std::strerror(errno));
    return 1;
  }
  return 0;
}
