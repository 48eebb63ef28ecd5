// NCCL 2.28 dlcloses its net plugin when the last communicator is destroyed ("Unloading plugin
// hmr", seen on an H100 with PyTorch 2.11: docs/gpu.md), and the process goes on.  hmr leaves
// things behind that outlive a plugin's finalize (the memory monitor's hooks in munmap and free,
// its threads, thread-local destructors), so unloading the code would crash the process at its
// next munmap.  This program plays that NCCL: it loads the plugin by path, registers memory
// through a connected pair of comms (which starts hmr's cache monitor), closes everything,
// finalizes, dlcloses, and then keeps using memory and threads.  It exits 0, or 1 with the
// step that failed; a crash fails the test too.  (Before libhmr and the plugin were linked
// with -z nodelete, it died with SIGSEGV in the first munmap after dlclose.)
#include <dlfcn.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "abi/nccl_net_v11.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "FAILED: %s\n", what);
  std::exit(1);
}

void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) fail(what);
}

void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* format, ...)
    __attribute__((format(printf, 5, 6)));
void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* format, ...) {
  if (level > NCCL_LOG_WARN) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
}

// Connects a send comm to a receive comm of the same listener, polling both sides as NCCL does.
void connect_pair(const ncclNet_v11_t* net, void* context, void** send, void** recv,
                  void** listen) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  check(net->listen(context, 0, handle, listen), "listen");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  ncclNetDeviceHandle_t* device_handle = nullptr;
  while (*send == nullptr || *recv == nullptr) {
    if (*send == nullptr) check(net->connect(context, 0, handle, send, &device_handle), "connect");
    if (*recv == nullptr) check(net->accept(*listen, recv, &device_handle), "accept");
    if (std::chrono::steady_clock::now() > deadline) fail("connect/accept did not finish in 30 s");
    std::this_thread::yield();
  }
}

void use_the_plugin(const ncclNet_v11_t* net) {
  void* context = nullptr;
  ncclNetCommConfig_t config{};
  check(net->init(&context, 1, &config, logger, nullptr), "init");
  int devices = 0;
  check(net->devices(&devices), "devices");
  if (devices < 1) fail("no device");
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
  connect_pair(net, context, &send, &recv, &listen);
  std::vector<char> buffer(1 << 20, 1);
  for (int round = 0; round < 2; ++round) {  // the second one is a cache hit
    void* memory = nullptr;
    check(net->regMr(send, buffer.data(), buffer.size(), NCCL_PTR_HOST, &memory), "regMr");
    check(net->deregMr(send, memory), "deregMr");
  }
  check(net->closeSend(send), "closeSend");
  check(net->closeRecv(recv), "closeRecv");
  check(net->closeListen(listen), "closeListen");
  check(net->finalize(context), "finalize");
}

// What the process does after NCCL unloaded the plugin: map and unmap, allocate and free large
// blocks (glibc mmaps them), start and join threads.
void carry_on() {
  for (int i = 0; i < 64; ++i) {
    void* mapped = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (mapped == MAP_FAILED) fail("mmap after dlclose");
    std::memset(mapped, 2, 1 << 20);
    if (munmap(mapped, 1 << 20) != 0) fail("munmap after dlclose");
    void* block = std::malloc(8 << 20);
    if (block == nullptr) fail("malloc after dlclose");
    std::memset(block, 3, 8 << 20);
    std::free(block);
  }
  std::thread worker([] { std::vector<char> scratch(4 << 20, 4); });
  worker.join();
}

}  // namespace

int main() {
  void* plugin = dlopen(HMR_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) fail(dlerror());
  const auto* net = static_cast<const ncclNet_v11_t*>(dlsym(plugin, "ncclNetPlugin_v11"));
  if (net == nullptr) fail("no ncclNetPlugin_v11");
  use_the_plugin(net);
  if (dlclose(plugin) != 0) fail(dlerror());
  carry_on();
  // Loaded again, as NCCL does for the next communicator: it must work as the first time.
  plugin = dlopen(HMR_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) fail(dlerror());
  net = static_cast<const ncclNet_v11_t*>(dlsym(plugin, "ncclNetPlugin_v11"));
  if (net == nullptr) fail("no ncclNetPlugin_v11 after reloading");
  use_the_plugin(net);
  if (dlclose(plugin) != 0) fail(dlerror());
  carry_on();
  std::puts("the plugin was used, unloaded, reloaded and unloaded; the process carried on");
  return 0;
}
