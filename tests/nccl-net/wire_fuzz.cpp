// libFuzzer entry point for the plugin's parsers of peer bytes (built with clang only):
//   hmr_nccl_net_wire_fuzz [corpus dir] -max_total_time=60
#include <cstdio>
#include <cstdlib>
#include <string>

#include "wire_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string broken = hmr::nccl::test::exercise_wire_parsers(data, size);
  if (!broken.empty()) {
    std::fprintf(stderr, "invariant broken: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
