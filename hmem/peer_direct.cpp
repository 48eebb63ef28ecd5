#include "hmem/peer_direct.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/unique_fd.h"

namespace hmr::hmem {
namespace {

struct HintFile {
  const char* client;
  const char* relative_path;
  const char* what;
};

constexpr HintFile kHintFiles[] = {
    {"nvidia_peermem", "sys/module/nvidia_peermem/version", "nvidia-peermem module"},
    {"nv_mem", "sys/kernel/mm/memory_peers/nv_mem/version", "nv_peer_mem client nv_mem"},
    {"nv_mem_nc", "sys/kernel/mm/memory_peers/nv_mem_nc/version",
     "nv_peer_mem non-coherent client nv_mem_nc"},
};

std::string trimmed(std::string text) {
  const size_t end = text.find_last_not_of(" \t\r\n");
  text.erase(end == std::string::npos ? 0 : end + 1);
  const size_t begin = text.find_first_not_of(" \t\r\n");
  return begin == std::string::npos ? std::string() : text.substr(begin);
}

// The file's first bytes (sysfs version files are one short line), or the errno of the failure.
int read_small_file(const std::string& path, std::string* contents) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno;
  char buffer[256];
  ssize_t got;
  do {
    got = ::read(fd.get(), buffer, sizeof buffer);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return errno;
  contents->assign(buffer, static_cast<size_t>(got));
  return 0;
}

std::string join_path(const std::string& root, const char* relative) {
  if (root.empty() || root == "/") return std::string("/") + relative;
  return root.back() == '/' ? root + relative : root + "/" + relative;
}

}  // namespace

PeerDirectReport probe_peer_direct(const std::string& root) {
  PeerDirectReport report;
  std::string looked_at;
  std::string unreadable;
  for (const HintFile& hint : kHintFiles) {
    const std::string path = join_path(root, hint.relative_path);
    looked_at += looked_at.empty() ? path : ", " + path;
    std::string contents;
    if (const int err = read_small_file(path, &contents); err != 0) {
      // ENOENT is the ordinary "not loaded"; anything else is worth saying.
      if (err != ENOENT && err != ENOTDIR) {
        unreadable += "; " + path + " exists but cannot be read (" + std::strerror(err) + ")";
      }
      continue;
    }
    PeerMemoryClient client{hint.client, path, trimmed(contents)};
    if (!report.clients.empty()) report.reason += "; ";
    report.reason += std::string(hint.what) + " loaded (version " +
                     (client.version.empty() ? "unknown" : client.version) + ", " + path + ")";
    report.clients.push_back(std::move(client));
  }
  report.available = !report.clients.empty();
  if (report.available) {
    report.reason = "peer-direct registration of CUDA memory available: " + report.reason;
  } else {
    report.reason = "no NVIDIA peer-memory client: none of " + looked_at +
                    " exists; load nvidia-peermem (modprobe nvidia-peermem) to register GPU "
                    "virtual addresses directly, or register GPU memory through dma-buf" +
                    unreadable;
  }
  return report;
}

}  // namespace hmr::hmem
