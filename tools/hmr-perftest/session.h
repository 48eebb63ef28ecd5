// hmr-perftest's two roles.  The client drives every measurement; the server registers one
// buffer, publishes it, and keeps its side progressing (and, for write_lat, answers).
//
// Schedule, over the out-of-band socket:
//   client -> server  Hello        the test, sizes, iterations, provider, memory
//   server -> client  BufferInfo   the server's registered buffer and endpoint address; or
//   server -> client  PeerError    to a client it does not admit (admission.h), before it
//                                  allocated anything, and it hangs up and awaits the next
//   client -> server  BufferInfo   the client's (where write_lat's answers land)
//   bandwidth: the client measures every (size, reg mode), then sends Done{checksum of what it
//              wrote}; the server answers Done{checksum of its buffer} and both compare.
//   write_lat: before each (size, reg mode) block, Done{size} both ways as a barrier (each
//              side clears its landing area first); Done{0} ends the run.
#pragma once

#include "options.h"

namespace hmr::perftest {

int run_server(const Options& options);
int run_client(const Options& options);

}  // namespace hmr::perftest
