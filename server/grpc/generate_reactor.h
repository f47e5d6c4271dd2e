// GenerateReactor: the server-streaming reactor of one Generate call, and the TokenSink the
// engine loop writes that call's tokens to.
//
// Ownership: created as a shared_ptr that owns itself until gRPC calls OnDone; the engine loop
// may hold another reference, so calls arriving after OnDone are harmless no-ops.
// Thread-safety: OnTokens/OnFinish come from the loop thread, reactions from gRPC threads; all
// state is guarded by one mutex and no method blocks. One write is in flight at a time; tokens
// that arrive meanwhile are coalesced into the next message. The final message (finish_reason,
// usage) is written last, then Finish: with status OK (LENGTH, STOP) or, for a stream that ran
// and ended with SHUTDOWN, KV_POOL_FULL or ENGINE_ERROR, with its error status. A cancelled call,
// and a request refused before it ran, are finished without it.
#ifndef FLATSTATE_SERVER_GRPC_GENERATE_REACTOR_H_
#define FLATSTATE_SERVER_GRPC_GENERATE_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flatstate/v1/inference.pb.h"
#include "server/core/loop_types.h"
#include "server/core/metrics.h"

namespace flatstate::server {

class GenerateReactor final : public grpc::ServerWriteReactor<flatstate::v1::GenerateResponse>,
                              public TokenSink {
 public:
  // Returns the reactor to hand to gRPC; it keeps itself alive until OnDone.
  static std::shared_ptr<GenerateReactor> Create(Metrics* metrics);

  // Finishes at once with an error (validation failures), no message written.
  void FinishWithError(const grpc::Status& status);

  // TokenSink (loop thread).
  bool Cancelled() const override { return cancelled_.load(std::memory_order_acquire); }
  void OnTokens(std::vector<int32_t> token_ids, std::string text) override;
  void OnFinish(const GenerateSummary& summary, const absl::Status& status) override;

  // Reactions (gRPC threads).
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  explicit GenerateReactor(Metrics* metrics) : metrics_(metrics) {}
  // Decides the next action under mu_; the caller performs it after unlocking.
  enum class Action { kNone, kWrite, kFinish };
  Action NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Perform(Action a);

  Metrics* const metrics_;
  std::shared_ptr<GenerateReactor> self_;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  flatstate::v1::GenerateResponse pending_ ABSL_GUARDED_BY(mu_);  // coalesced tokens
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  flatstate::v1::GenerateResponse in_flight_;  // owned by gRPC while a write is in flight
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  flatstate::v1::GenerateResponse final_ ABSL_GUARDED_BY(mu_);
  bool final_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool send_final_on_error_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_GRPC_GENERATE_REACTOR_H_
