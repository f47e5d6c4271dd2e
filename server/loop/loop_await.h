// Await: runs one of EngineLoop's asynchronous unary operations from a transport thread that may
// block (an HTTP handler thread; never the loop thread) and returns its result.
//
// Thread-safe. Fails with Unavailable when the loop does not answer within `timeout` (it answers
// every operation it runs, also while shutting down; the timeout only guards a stopped loop).
#ifndef FLATSTATE_SERVER_LOOP_LOOP_AWAIT_H_
#define FLATSTATE_SERVER_LOOP_LOOP_AWAIT_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace flatstate::server {

template <typename T>
absl::StatusOr<T> Await(const std::function<void(std::function<void(absl::StatusOr<T>)>)>& start,
                        absl::Duration timeout = absl::Seconds(120)) {
  struct State {
    absl::Notification done;
    absl::StatusOr<T> result;
  };
  auto st = std::make_shared<State>();
  start([st](absl::StatusOr<T> r) {
    st->result = std::move(r);
    st->done.Notify();
  });
  if (!st->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::UnavailableError("the engine loop did not answer");
  }
  return std::move(st->result);
}

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_LOOP_LOOP_AWAIT_H_
