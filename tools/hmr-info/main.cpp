// hmr-info: what hmr finds on this machine (memory runtimes and their devices, the NIC side,
// cache monitors, the settings in force) and why anything is missing.  See `hmr-info --help`.
#include <hmr/hmr.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "json_value.h"
#include "report.h"
#include "text_report.h"

namespace {

constexpr const char* kUsage =
    "usage: hmr-info [--json | --version | --help]\n"
    "\n"
    "Reports what hmr finds here: each memory interface (loaded or not, library, version,\n"
    "why not), each device (PCI bus id, dma-buf, peer-direct and P2P answers with reasons),\n"
    "the NIC side (kernel, dma-buf import, peer-memory clients, RLIMIT_MEMLOCK, RDMA devices\n"
    "through libibverbs, libfabric providers, and which memory operations each of hmr's NICs\n"
    "has), the cache monitors, and the settings in force.\n"
    "\n"
    "  --json   one JSON document with the keys hmr, ifaces, devices, nics, monitors, config\n"
    "  --version  hmr's version (the library's, and the headers this was built with)\n"
    "  --help   this text\n"
    "\n"
    "HMR_<VENDOR>_LIBRARY (CUDA, ROCR, ZE, NEURON, SYNAPSEAI, HLTHUNK, IBVERBS, OFI) point hmr\n"
    "at a runtime library of your choice, exactly as for applications.\n";

bool write_all(const std::string& text) {
  return std::fwrite(text.data(), 1, text.size(), stdout) == text.size() &&
         std::fflush(stdout) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
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
  const std::string text = json ? report.to_json(2) : hmr::info::render_text(report);
  if (!write_all(text)) {
    std::fprintf(stderr, "hmr-info: cannot write the report: %s\n", std::strerror(errno));
    return 1;
  }
  return 0;
}
