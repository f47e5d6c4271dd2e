#include "engine/speculate/draft_model.h"

#include <utility>

namespace flatstate {

DraftModelDrafter::DraftModelDrafter(Engine* engine, int max_draft)
    : engine_(engine), pacer_(max_draft), session_(engine->NewSession(SamplingParams{})) {}

DraftModelDrafter::~DraftModelDrafter() {
  engine_->ReleaseSession(&session_);
  if (fork_.has_value()) engine_->ReleaseSession(&*fork_);
}

void DraftModelDrafter::Rewind() {
  if (!fork_.has_value()) return;
  engine_->ReleaseSession(&session_);
  session_ = std::move(*fork_);
  fork_.reset();
}

bool DraftModelDrafter::Run(int64_t max_tokens, bool sample) {
  const StepRequest r{&session_, max_tokens, sample};
  if (!engine_->Step(std::span<const StepRequest>(&r, 1), &results_).ok() ||
      !results_[0].status.ok()) {
    failed_ = true;
  }
  return !failed_;
}

void DraftModelDrafter::Append(std::span<const int32_t> tokens) {
  Rewind();
  session_.pending.insert(session_.pending.end(), tokens.begin(), tokens.end());
}

std::vector<int32_t> DraftModelDrafter::Draft(int limit, std::span<const double> cost) {
  Rewind();
  if (failed_ || session_.pending.empty()) return {};
  const int k = pacer_.Next(limit, cost);
  if (k < 1) return {};
  // The context (in chunks), then the first draw.
  do {
    if (!Run(1 << 30, true)) return {};
  } while (!results_[0].sampled);
  std::vector<int32_t> draft = {results_[0].token};
  // What to come back to: the context run, nothing of the draft (its first token is only pending).
  absl::StatusOr<SessionState> fork = engine_->Fork(&session_);
  if (!fork.ok()) {
    failed_ = true;
    return {};
  }
  fork->pending.clear();
  fork_ = std::move(*fork);
  while (static_cast<int>(draft.size()) < k) {
    if (!Run(1 << 30, true)) break;  // what was drafted so far is still a draft
    if (results_[0].sampled) draft.push_back(results_[0].token);
  }
  return draft;
}

void DraftModelDrafter::Feedback(int drafted, int accepted) {
  pacer_.Feedback(drafted, accepted);
  Rewind();
}

std::unique_ptr<Drafter> DraftModelDrafter::Clone() {
  Rewind();
  absl::StatusOr<SessionState> fork = engine_->Fork(&session_);
  if (!fork.ok()) return nullptr;
  auto c = std::make_unique<DraftModelDrafter>(engine_, 1);
  engine_->ReleaseSession(&c->session_);
  c->session_ = std::move(*fork);
  c->pacer_ = pacer_;
  c->failed_ = failed_;
  return c;
}

}  // namespace flatstate
