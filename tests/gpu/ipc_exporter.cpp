#include "tests/gpu/ipc_exporter.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

extern char** environ;

namespace hmr::testing {

std::optional<IpcExporter> IpcExporter::start(const std::string& program,
                                              const std::string& driver, std::string* why) {
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    *why = std::string("socketpair: ") + std::strerror(errno);
    return std::nullopt;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDOUT_FILENO);
  std::vector<std::string> env_storage;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (std::strncmp(*variable, "HMR_CUDA_LIBRARY=", 17) != 0) env_storage.emplace_back(*variable);
  }
  if (!driver.empty()) env_storage.push_back("HMR_CUDA_LIBRARY=" + driver);
  std::vector<char*> envp;
  for (std::string& variable : env_storage) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::string path = program;
  char* argv[] = {path.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(ends[1]);
  if (rc != 0) {
    *why = "posix_spawn " + program + ": " + std::strerror(rc);
    close(ends[0]);
    return std::nullopt;
  }
  return IpcExporter(pid, ends[0]);
}

IpcExporter::IpcExporter(IpcExporter&& other) noexcept
    : pid_(other.pid_), socket_(other.socket_), failed_(other.failed_) {
  other.pid_ = -1;
  other.socket_ = -1;
}

IpcExporter::~IpcExporter() {
  if (pid_ < 0) return;
  static const char kQuit[] = "quit\n";
  if (failed_ || send(socket_, kQuit, sizeof kQuit - 1, MSG_NOSIGNAL) < 0) kill(pid_, SIGKILL);
  close(socket_);
  // At most 10 s for it to quit (it frees nothing itself: the driver does at exit), then
  // killed: a test never waits on a stuck exporter.
  int status = 0;
  for (int waited_ms = 0; waitpid(pid_, &status, WNOHANG) == 0; waited_ms += 10) {
    if (waited_ms == 10000) {
      kill(pid_, SIGKILL);
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    usleep(10000);
  }
}

// One command, one answer line; a 30 s limit so a stuck exporter fails the test, not hangs it.
std::optional<std::string> IpcExporter::ask(const std::string& command, std::string* why) {
  const std::string line = command + "\n";
  if (send(socket_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    failed_ = true;
    *why = "the exporter is gone (send: " + std::string(std::strerror(errno)) + ")";
    return std::nullopt;
  }
  std::string answer;
  char c = 0;
  while (true) {
    pollfd ready{socket_, POLLIN, 0};
    if (poll(&ready, 1, 30000) <= 0) {
      failed_ = true;
      *why = "no answer to '" + command + "' within 30 s";
      return std::nullopt;
    }
    if (recv(socket_, &c, 1, 0) <= 0) {
      failed_ = true;
      *why = "the exporter exited while answering '" + command + "': " + answer;
      return std::nullopt;
    }
    if (c == '\n') break;
    answer.push_back(c);
  }
  if (answer.rfind("error ", 0) == 0) {
    *why = "exporter: " + answer;
    return std::nullopt;
  }
  return answer;
}

std::optional<IpcExporter::Export> IpcExporter::allocate(size_t bytes, int fill,
                                                         std::string* why) {
  auto answer = ask("alloc " + std::to_string(bytes) + " " + std::to_string(fill), why);
  if (!answer) return std::nullopt;
  char hex[129] = {};
  unsigned long long address = 0;
  if (std::sscanf(answer->c_str(), "handle %128s %llx", hex, &address) != 2 ||
      std::strlen(hex) != 128) {
    *why = "unexpected answer: " + *answer;
    return std::nullopt;
  }
  Export out{};
  for (size_t i = 0; i < out.handle.size(); ++i) {
    unsigned byte = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &byte) != 1) {
      *why = "not a handle in hex: " + *answer;
      return std::nullopt;
    }
    out.handle[i] = static_cast<char>(byte);
  }
  out.address = address;
  return out;
}

bool IpcExporter::free(std::string* why) {
  auto answer = ask("free", why);
  return answer && *answer == "freed";
}

std::optional<int> IpcExporter::open_in_exporter(std::string* why) {
  auto answer = ask("selfopen", why);
  int result = 0;
  if (!answer || std::sscanf(answer->c_str(), "selfopen %d", &result) != 1) {
    if (answer) *why = "unexpected answer: " + *answer;
    return std::nullopt;
  }
  return result;
}

}  // namespace hmr::testing
