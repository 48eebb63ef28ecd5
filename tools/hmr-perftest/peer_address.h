// Whether a peer's fabric address may be handed to fi_av_insert.  fi_av_insert takes no
// length: the provider reads as much as its address format says, so what a peer sent must be
// checked against that format first, or a hostile or broken peer makes it read past the
// bytes received (a heap overread, which valgrind showed for a string address without its
// NUL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace hmr::perftest {

// The longest string address accepted, its NUL included (shm's names are far shorter).
inline constexpr size_t kMaxStringAddress = 256;

// `format`: the provider's fi_info addr_format; `own`: this endpoint's address (fi_getname),
// the same provider's.  A fixed-size format (FI_SOCKADDR_IN, FI_ADDR_PSMX2, ...) needs
// exactly our size.  FI_ADDR_STR ("fi_shm://<pid>:0:0", whose length varies with the pid)
// needs one string of printable ASCII ended by its NUL, the last byte, within
// kMaxStringAddress.  False with the reason otherwise.
bool acceptable_peer_address(uint32_t format, std::span<const uint8_t> own,
                             std::span<const uint8_t> theirs, std::string* why);

}  // namespace hmr::perftest
