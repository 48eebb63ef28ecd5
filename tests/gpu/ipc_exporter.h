// The test side of tests/gpu/cuda_ipc_exporter.c: a process of its own that allocates CUDA
// memory and exports it (cuIpcGetMemHandle), so a test imports a peer's buffer as an
// application does (cuIpcOpenMemHandle).  Talks to it over a Unix socket (its stdin and
// stdout), one line each way: sends never raise SIGPIPE in the test when it died, every
// answer is awaited at most 30 s, and a stuck or dead exporter is killed and reaped.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace hmr::testing {

class IpcExporter {
 public:
  struct Export {
    std::array<char, 64> handle;  // the CUipcMemHandle bytes
    uint64_t address;              // in the exporter's process
  };

  // Starts `program` (with HMR_CUDA_LIBRARY = `driver` when not empty); nullopt and *why when
  // it cannot.
  static std::optional<IpcExporter> start(const std::string& program, const std::string& driver,
                                          std::string* why);
  IpcExporter(IpcExporter&& other) noexcept;
  IpcExporter& operator=(IpcExporter&&) = delete;
  IpcExporter(const IpcExporter&) = delete;
  IpcExporter& operator=(const IpcExporter&) = delete;
  ~IpcExporter();  // quits it and waits

  // A new allocation of `bytes`, each byte `fill`, exported; nullopt and *why on failure.
  std::optional<Export> allocate(size_t bytes, int fill, std::string* why);
  // Frees the allocation; false and *why on failure.
  bool free(std::string* why);
  // What the driver answers when the exporting process opens its own handle (a CUresult), or
  // nullopt and *why.
  std::optional<int> open_in_exporter(std::string* why);

 private:
  IpcExporter(pid_t pid, int socket) : pid_(pid), socket_(socket) {}
  std::optional<std::string> ask(const std::string& command, std::string* why);

  pid_t pid_ = -1;
  int socket_ = -1;     // its stdin and stdout
  bool failed_ = false;  // it stopped answering: killed at once on destruction
};

}  // namespace hmr::testing
