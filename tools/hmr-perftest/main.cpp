// hmr-perftest: perftest-style RMA bandwidth and latency between two processes, with memory
// registered through hmr on the tool's own libfabric domain.  See `hmr-perftest --help`.
#include <cstdio>

#include "options.h"
#include "session.h"

int main(int argc, char** argv) {
  std::string why;
  bool help = false;
  std::optional<hmr::perftest::Options> options =
      hmr::perftest::parse_options(argc, argv, &why, &help);
  if (!options) {
    if (help) {
      std::fputs(hmr::perftest::usage().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "hmr-perftest: %s\n", why.c_str());
    return 2;
  }
  return options->server ? hmr::perftest::run_server(*options)
                         : hmr::perftest::run_client(*options);
}
