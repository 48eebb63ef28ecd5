// Whether hmr-perftest's server takes a client: the client's Hello against the server's own
// options, decided before the server allocates or registers anything for it.
//
// A step of its own because the Hello says how much memory the server is to allocate and
// register (its largest message) and what that memory must do (the test): every check of it
// must come before Buffer::allocate, and a client asking for 4 GiB was once served 4 GiB
// before anything looked.  In one place, so that a check added later cannot land after the
// allocation again.  A refused client is told the reason; the server has spent nothing on
// it and waits for the next one (run_server, session.cpp).
#pragma once

#include <optional>
#include <string>

#include "options.h"
#include "peer_message.h"

namespace hmr::perftest {

// Why `server` refuses `hello` (what the client will print after "the peer stopped: server:"),
// or nullopt when it serves it.  `hello` has passed decode_hello: its fields are within the
// protocol's bounds (4 GiB messages at most), not yet within this server's.
std::optional<std::string> admission_refusal(const Hello& hello, const Options& server);

}  // namespace hmr::perftest
