#include "peer_watch.h"

#include <optional>
#include <vector>

#include "peer_message.h"

namespace hmr::perftest {

std::string duration_text(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

PeerWatch::PeerWatch(PeerSocket& socket, int timeout_ms, bool tell_progress)
    : socket_(socket),
      timeout_(timeout_ms),
      deadline_(Clock::now() + timeout_),
      tell_progress_(tell_progress),
      last_told_(Clock::now()) {}

bool PeerWatch::check(std::string* why) {
  if (!peer_may_speak_ && socket_.readable()) {
    *why = what_the_peer_did();
    return false;
  }
  const Clock::time_point now = Clock::now();
  if (progressed_) {
    progressed_ = false;
    deadline_ = now + timeout_;
    if (tell_progress_ && now - last_told_ >= kTellProgressEvery) {
      last_told_ = now;
      std::string failed;
      if (!socket_.send(encode(Progress{++told_}), &failed)) {
        *why = "telling the peer of progress: " + failed;
        return false;
      }
    }
    return true;
  }
  if (now > deadline_) {
    *why = "no progress for " + duration_text(timeout_) +
           " (--timeout): the peer stopped answering, or the fabric cannot reach it";
    return false;
  }
  return true;
}

std::string PeerWatch::what_the_peer_did() {
  // Nothing but an error message is due in the middle of a block; the read is bounded in
  // case the peer sent half of one and stopped.
  std::string why;
  std::optional<std::vector<uint8_t>> body =
      socket_.receive(MessageType::error, static_cast<int>(timeout_.count()), &why);
  if (!body) return why + " in the middle of a block";
  std::optional<PeerError> error = decode_error(*body, &why);
  return error ? "the peer stopped: " + error->reason : why;
}

}  // namespace hmr::perftest
