#include "server/sessions/session_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/sessions/session_persistence.h"
#include "server/store/ids.h"

namespace flatstate::server {

TokenDecoder SessionTable::DecoderWithTail(const LoadedModel* model, const std::string& tail) {
  return TokenDecoder(&model->tokenizer(), tail);
}

SessionTable::SessionTable(SessionStore* store, const ModelRegistry* models,
                           const SessionTableOptions& options, Metrics* metrics)
    : store_(store),
      models_(models),
      options_(options),
      metrics_(metrics),
      persistence_(SessionPersistence::For(this)) {}

SessionTable::~SessionTable() = default;

absl::Status SessionTable::NotFound(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("session_id: session '", id, "' not found"));
}

absl::Status SessionTable::CheckCapacity() const {
  if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat("max_sessions reached: the server holds ",
                                                     sessions_.size(), " sessions (limit ",
                                                     options_.max_sessions, "); delete some"));
  }
  return absl::OkStatus();
}

Session* SessionTable::Add(std::string id, LoadedModel* model, SessionState state, bool throwaway) {
  auto s = std::make_unique<Session>();
  s->id = std::move(id);
  s->model = model;
  s->state = std::move(state);
  s->decoder = DecoderWithTail(s->model, s->state.text_tail);
  s->throwaway = throwaway;
  s->last_used = absl::Now();
  Session* raw = s.get();
  sessions_[raw->id] = std::move(s);
  return raw;
}

absl::StatusOr<Session*> SessionTable::Create(LoadedModel* model, const SamplingParams& sampling,
                                              bool throwaway) {
  if (absl::Status s = CheckCapacity(); !s.ok()) return s;
  return Add(model, model->engine->NewSession(sampling), throwaway);
}

absl::StatusOr<Session*> SessionTable::Restore(LoadedModel* model, absl::string_view blob,
                                               bool throwaway) {
  if (absl::Status s = CheckCapacity(); !s.ok()) return s;
  absl::StatusOr<SessionState> state =
      model->engine->Restore(std::string_view(blob.data(), blob.size()));
  if (!state.ok()) return state.status();
  return Add(model, std::move(*state), throwaway);
}

absl::StatusOr<Session*> SessionTable::Fork(Session* s, bool throwaway) {
  if (absl::Status st = CheckCapacity(); !st.ok()) return st;
  absl::StatusOr<SessionState> state = s->model->engine->Fork(&s->state);
  if (!state.ok()) return state.status();
  state->text_tail = s->decoder.state();  // the original's incomplete character, if any
  return Add(s->model, std::move(*state), throwaway);
}

Session* SessionTable::Add(LoadedModel* model, SessionState state, bool throwaway) {
  return Add(NewId(), model, std::move(state), throwaway);
}

absl::StatusOr<Session*> SessionTable::Find(absl::string_view id) {
  auto it = sessions_.find(id);
  if (it != sessions_.end() && !it->second->throwaway) return it->second.get();
  if (it == sessions_.end() && IsValidId(id)) return persistence_->FindMissing(id);
  return NotFound(id);
}

Session* SessionTable::InMemory(absl::string_view id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() || it->second->throwaway ? nullptr : it->second.get();
}

absl::StatusOr<Session*> SessionTable::FindResident(absl::string_view id) {
  absl::StatusOr<Session*> s = Find(id);
  if (!s.ok()) return s;
  if (absl::Status st = EnsureResident(*s); !st.ok()) return st;
  return s;
}

absl::Status SessionTable::EnsureResident(Session* s) {
  s->last_used = absl::Now();
  if (s->resident) return absl::OkStatus();
  absl::StatusOr<std::string> blob = store_->GetEvicted(s->id);
  if (!blob.ok()) return blob.status();
  absl::StatusOr<SessionState> state = s->model->engine->Restore(*blob);
  if (!state.ok()) {
    return absl::Status(state.status().code(), absl::StrCat("restoring evicted session ", s->id,
                                                            ": ", state.status().message()));
  }
  s->state = std::move(*state);
  s->resident = true;
  s->decoder = DecoderWithTail(s->model, s->state.text_tail);
  store_->RemoveEvicted(s->id);
  if (metrics_ != nullptr) metrics_->sessions_restored_total++;
  return absl::OkStatus();
}

void SessionTable::Erase(Session* s) {
  if (s->resident) {
    s->model->engine->ReleaseSession(&s->state);
  } else {
    store_->RemoveEvicted(s->id);
  }
  sessions_.erase(s->id);
}

absl::StatusOr<std::string> SessionTable::Checkpoint(Session* s) {
  s->state.text_tail = s->decoder.state();
  return s->model->engine->Checkpoint(s->state);
}

int SessionTable::EvictIdle(absl::Time now) {
  if (options_.idle_ttl <= absl::ZeroDuration()) return 0;
  return persistence_->EvictIdle(now);
}

absl::Status SessionTable::Refresh(Session* s) { return persistence_->Refresh(s); }

absl::Status SessionTable::Persist(Session* s) { return persistence_->Persist(s); }

absl::Status SessionTable::Delete(Session* s) { return persistence_->Delete(s); }

void SessionTable::MaybeEvictIdle(absl::Time now) {
  if (options_.idle_ttl <= absl::ZeroDuration()) return;
  const absl::Duration every =
      std::min(absl::Seconds(1), std::max(absl::Milliseconds(50), options_.idle_ttl / 4));
  if (now - last_evict_scan_ < every) return;
  last_evict_scan_ = now;
  EvictIdle(now);
}

SessionInfo SessionTable::Info(const Session& s) const {
  SessionInfo i;
  i.session_id = s.id;
  i.model = s.model->name;
  i.attention_kind = ModelKindName(s.model->config());
  i.context_tokens =
      s.resident ? static_cast<uint64_t>(s.state.context_tokens()) : s.evicted_context_tokens;
  i.state_bytes = s.resident ? s.model->engine->SessionBytes(s.state) : 0;
  i.generating = s.generating;
  i.evicted = !s.resident;
  return i;
}

SessionTable::Counts SessionTable::Count() const {
  Counts c;
  for (const auto& [id, s] : sessions_) {
    if (s->resident) {
      ++c.resident;
      c.state_bytes += s->model->engine->SessionBytes(s->state);
    } else {
      ++c.evicted;
    }
  }
  return c;
}

}  // namespace flatstate::server
