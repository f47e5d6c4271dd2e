// HttpStreamSink: the TokenSink of one HTTP completion. The engine loop pushes into it (never
// blocking); the HTTP handler thread that owns the request pulls what arrived with Next and
// writes it out (whole body or SSE chunks). It holds back text that may be the start of a stop
// string and cuts the text at the stop string, as OpenAI does (the session keeps the whole text).
//
// Thread-safety: all methods are thread-safe (one mutex); only Next waits. Shared by the handler
// and the engine loop (shared_ptr). Cancel (client gone) makes the loop end the stream before its
// next step. With WatchSocket, Cancelled (asked by the loop before every step) also peeks at the
// request's socket (http_peer.h), so a client that closed its connection is noticed within one
// engine step, before any write fails; the handler stops the watch (StopWatchingSocket) before
// the HTTP server may close that descriptor.
#ifndef FLATSTATE_SERVER_HTTP_HTTP_STREAM_SINK_H_
#define FLATSTATE_SERVER_HTTP_HTTP_STREAM_SINK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/loop_types.h"

namespace flatstate::server {

// Wakes the one handler thread that reads several sinks (the choices of an n > 1 request): every
// sink sharing it bumps a counter when output arrives, and Wait returns once the counter passes
// what the reader saw. Thread-safe.
class SinkWaker {
 public:
  void Notify();
  // Waits up to `timeout` for the counter to pass `seen`; returns its value.
  uint64_t Wait(uint64_t seen, absl::Duration timeout);

 private:
  absl::Mutex mu_;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

class HttpStreamSink final : public TokenSink {
 public:
  // What arrived since the previous Next.
  struct Batch {
    std::string text;  // safe to show: no stop string, no possible start of one
    std::vector<TokenLogprobs> logprobs;
    uint64_t tokens = 0;
    std::vector<int32_t> token_ids;  // the `tokens` ids, in order
    bool finished = false;           // then summary and status are set, and this is the last batch
    GenerateSummary summary;
    absl::Status status;
  };

  // `waker` (may be null) is notified whenever output or the end arrives.
  explicit HttpStreamSink(std::vector<std::string> stop,
                          std::shared_ptr<SinkWaker> waker = nullptr)
      : stop_(std::move(stop)), waker_(std::move(waker)) {}

  // Waits up to `timeout` for output or the end; returns at once when some is there.
  Batch Next(absl::Duration timeout);
  void Cancel() { cancelled_.store(true, std::memory_order_release); }
  // Watch connected socket `fd` (-1: none) for the peer closing it; stop watching.
  void WatchSocket(int fd) { socket_.store(fd, std::memory_order_release); }
  void StopWatchingSocket() { socket_.store(-1, std::memory_order_release); }

  bool Cancelled() const override;
  void OnTokens(std::vector<int32_t> token_ids, std::string text) override;
  void OnLogprobs(const TokenLogprobs& logprobs) override;
  void OnFinish(const GenerateSummary& summary, const absl::Status& status) override;

 private:
  // Where shown text may end now: before the first stop string, and (until finished) before a
  // tail that a stop string starts with.
  size_t SafeEndLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<std::string> stop_;
  const std::shared_ptr<SinkWaker> waker_;
  mutable std::atomic<bool> cancelled_{false};
  std::atomic<int> socket_{-1};
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);  // all text generated
  size_t shown_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of text_ handed out
  std::vector<TokenLogprobs> logprobs_ ABSL_GUARDED_BY(mu_);
  uint64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int32_t> token_ids_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_taken_ ABSL_GUARDED_BY(mu_) = false;
  GenerateSummary summary_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_HTTP_STREAM_SINK_H_
