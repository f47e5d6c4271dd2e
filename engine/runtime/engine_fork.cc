// Engine: forks (Engine::Fork) and the n > 1 choices a step forks (StepRequest::choices).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/engine.h"
#include "engine/util/status_macros.h"

namespace flatstate {

void Engine::ForkChoices(const StepRequest& request, StepResult* result) {
  result->choices.assign(request.choices.size(), ChoiceDraw{});
  for (size_t k = 0; k < request.choices.size(); ++k) {
    SessionState* c = request.choices[k];
    if (c == nullptr || c->position != 0 || !c->pending.empty() || !c->kv_blocks.empty()) {
      result->choices[k].status =
          absl::InvalidArgumentError(absl::StrCat("choice ", k, " is not a fresh session"));
      continue;
    }
    absl::StatusOr<SessionState> f = Fork(request.session);
    if (!f.ok()) {
      result->choices[k].status = f.status();
      continue;
    }
    SamplingParams sampling = c->sampling;
    Rng rng = c->rng;
    ReleaseSession(c);
    *c = std::move(*f);
    c->sampling = sampling;
    c->rng = rng;
  }
}

absl::StatusOr<SessionState> Engine::Fork(SessionState* s) {
  RETURN_IF_ERROR(SyncToHost(s));
  SessionState f = *s;  // DeviceSlot's copy holds no slot
  f.kv_blocks.clear();
  f.prefix_marks.clear();  // the original stores the snapshots
  if (kv_ == nullptr || s->kv_blocks.empty()) return f;
  const int bs = kv_->block_size();
  const int64_t full = std::min<int64_t>(s->position / bs, static_cast<int64_t>(s->kv_blocks.size()));
  const int64_t tail = s->position - full * bs;  // tokens in the partly filled block
  kv_->Share(std::span<const int32_t>(s->kv_blocks).first(static_cast<size_t>(full)),
             &f.kv_blocks);
  if (tail == 0 || full >= static_cast<int64_t>(s->kv_blocks.size())) return f;
  if (absl::Status st = kv_->Reserve(&f.kv_blocks, s->position); !st.ok()) {
    kv_->Release(&f.kv_blocks);
    return st;
  }
  const int32_t from = s->kv_blocks[static_cast<size_t>(full)];
  const int32_t to = f.kv_blocks.back();
  std::vector<float> row(static_cast<size_t>(kv_->hidden()));
  for (int layer = 0; layer < kv_->num_layers(); ++layer) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int slot = 0; slot < tail; ++slot) {
        kv_->ReadRow(from, layer, kv, slot, row.data());
        kv_->WriteRow(to, layer, kv, slot, row.data());
      }
    }
  }
  if (absl::Status st = forward_->SyncKvToDevice(std::span<const int32_t>(&to, 1)); !st.ok()) {
    kv_->Release(&f.kv_blocks);
    return st;
  }
  return f;
}

}  // namespace flatstate
