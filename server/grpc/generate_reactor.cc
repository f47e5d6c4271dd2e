#include "server/grpc/generate_reactor.h"

#include "server/grpc/grpc_api.h"

namespace flatstate::server {

namespace pb = flatstate::v1;

std::shared_ptr<GenerateReactor> GenerateReactor::Create(Metrics* metrics) {
  std::shared_ptr<GenerateReactor> r(new GenerateReactor(metrics));
  r->self_ = r;
  return r;
}

void GenerateReactor::FinishWithError(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    finish_requested_ = true;
    finish_called_ = true;
    status_ = status;
  }
  Finish(status);
}

void GenerateReactor::OnTokens(std::vector<int32_t> token_ids, std::string text) {
  Action a;
  {
    absl::MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    for (int32_t t : token_ids) pending_.add_token_ids(t);
    pending_.mutable_text()->append(text);
    has_pending_ = true;
    a = NextLocked();
  }
  Perform(a);
}

void GenerateReactor::OnFinish(const GenerateSummary& summary, const absl::Status& status) {
  Action a;
  {
    absl::MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    finish_requested_ = true;
    status_ = ToGrpcStatus(status);
    // Streams that ran and ended for a server-side reason get their final message too.
    send_final_on_error_ = false;
    switch (summary.reason) {
      case FinishReason::kLength:
        final_.set_finish_reason(pb::LENGTH);
        break;
      case FinishReason::kStop:
        final_.set_finish_reason(pb::STOP);
        break;
      case FinishReason::kEos:
        final_.set_finish_reason(pb::EOS);
        break;
      case FinishReason::kCancelled:
        final_.set_finish_reason(pb::CANCELLED);
        break;
      case FinishReason::kShutdown:
        final_.set_finish_reason(pb::SHUTDOWN);
        send_final_on_error_ = true;
        break;
      case FinishReason::kKvPoolFull:
        final_.set_finish_reason(pb::KV_POOL_FULL);
        send_final_on_error_ = true;
        break;
      case FinishReason::kEngineError:
        final_.set_finish_reason(pb::ENGINE_ERROR);
        send_final_on_error_ = true;
        break;
      case FinishReason::kRejected:
        break;  // nothing ran: no final message
    }
    pb::Usage* u = final_.mutable_usage();
    u->set_prompt_tokens(summary.prompt_tokens);
    u->set_cached_prompt_tokens(summary.cached_prompt_tokens);
    u->set_generated_tokens(summary.generated_tokens);
    u->set_context_tokens(summary.context_tokens);
    u->set_state_bytes(summary.state_bytes);
    u->set_decode_us(summary.decode_us);
    final_.set_session_id(summary.session_id);
    a = NextLocked();
  }
  Perform(a);
}

GenerateReactor::Action GenerateReactor::NextLocked() {
  if (write_in_flight_ || finish_called_ || done_) return Action::kNone;
  const bool broken = write_failed_ || Cancelled();
  if (!broken && has_pending_) {
    in_flight_.Swap(&pending_);
    pending_.Clear();
    has_pending_ = false;
    write_in_flight_ = true;
    return Action::kWrite;
  }
  if (!finish_requested_) return Action::kNone;
  if (!broken && (status_.ok() || send_final_on_error_) && !final_sent_) {
    in_flight_.Swap(&final_);
    final_sent_ = true;
    write_in_flight_ = true;
    return Action::kWrite;
  }
  if (broken && status_.ok()) {
    status_ = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }
  finish_called_ = true;
  return Action::kFinish;
}

void GenerateReactor::Perform(Action a) {
  if (a == Action::kWrite) {
    StartWrite(&in_flight_);
  } else if (a == Action::kFinish) {
    grpc::Status s;
    {
      absl::MutexLock lock(&mu_);
      s = status_;
    }
    Finish(s);
  }
}

void GenerateReactor::OnWriteDone(bool ok) {
  Action a;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      write_failed_ = true;
      cancelled_.store(true, std::memory_order_release);
    }
    a = NextLocked();
  }
  Perform(a);
}

void GenerateReactor::OnCancel() {
  cancelled_.store(true, std::memory_order_release);
  Action a;
  {
    absl::MutexLock lock(&mu_);
    a = NextLocked();
  }
  Perform(a);
}

void GenerateReactor::OnDone() {
  grpc::StatusCode code;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    code = status_.error_code();
  }
  cancelled_.store(true, std::memory_order_release);
  metrics_->RecordRequest("Generate", GrpcCodeName(code));
  std::shared_ptr<GenerateReactor> keep = std::move(self_);  // may delete this on return
}

}  // namespace flatstate::server
