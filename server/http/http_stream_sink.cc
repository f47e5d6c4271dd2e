#include "server/http/http_stream_sink.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "server/http/http_peer.h"

namespace flatstate::server {

void SinkWaker::Notify() {
  absl::MutexLock lock(&mu_);
  ++count_;
}

uint64_t SinkWaker::Wait(uint64_t seen, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto passed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ != seen; };
  mu_.AwaitWithTimeout(absl::Condition(&passed), timeout);
  return count_;
}

bool HttpStreamSink::Cancelled() const {
  if (cancelled_.load(std::memory_order_acquire)) return true;
  if (!PeerClosed(socket_.load(std::memory_order_acquire))) return false;
  cancelled_.store(true, std::memory_order_release);
  return true;
}

void HttpStreamSink::OnTokens(std::vector<int32_t> token_ids, std::string text) {
  absl::MutexLock lock(&mu_);
  tokens_ += token_ids.size();
  token_ids_.insert(token_ids_.end(), token_ids.begin(), token_ids.end());
  text_ += text;
  if (waker_ != nullptr) waker_->Notify();
}

void HttpStreamSink::OnLogprobs(const TokenLogprobs& logprobs) {
  absl::MutexLock lock(&mu_);
  logprobs_.push_back(logprobs);
  if (waker_ != nullptr) waker_->Notify();
}

void HttpStreamSink::OnFinish(const GenerateSummary& summary, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  finished_ = true;
  summary_ = summary;
  status_ = status;
  if (waker_ != nullptr) waker_->Notify();
}

size_t HttpStreamSink::SafeEndLocked() const {
  size_t end = text_.size();
  for (const std::string& s : stop_) {
    if (const size_t p = text_.find(s); p != std::string::npos) end = std::min(end, p);
  }
  if (finished_) return end;
  // Hold back the longest tail of text_ that some stop string starts with.
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, text_.size()); n > 0; --n) {
      if (absl::EndsWith(text_, absl::string_view(s).substr(0, n))) {
        end = std::min(end, text_.size() - n);
        break;
      }
    }
  }
  return end;
}

HttpStreamSink::Batch HttpStreamSink::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (finished_ && !finish_taken_) || tokens_ > 0 || !logprobs_.empty();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  Batch b;
  const size_t end = std::max(SafeEndLocked(), shown_);
  b.text = text_.substr(shown_, end - shown_);
  shown_ = end;
  b.logprobs.swap(logprobs_);
  b.tokens = std::exchange(tokens_, 0);
  b.token_ids.swap(token_ids_);
  if (finished_ && !finish_taken_) {
    finish_taken_ = true;
    b.finished = true;
    b.summary = summary_;
    b.status = status_;
  }
  return b;
}

}  // namespace flatstate::server
