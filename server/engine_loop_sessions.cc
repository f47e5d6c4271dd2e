// EngineLoop: session bookkeeping, unary session operations, idle eviction, gauges.
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint.h"
#include "engine/util/crc32c.h"
#include "server/engine_loop.h"
#include "server/ids.h"

namespace flatstate::server {
namespace {

// Verifies the trailing CRC-32C before anything else trusts the header: a corrupt checkpoint
// must be DataLoss, even when the damage hits the fingerprint.
absl::Status CheckBlob(std::string_view blob) {
  absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(blob);
  if (!header.ok()) return header.status();
  uint32_t stored = 0;
  std::memcpy(&stored, blob.data() + blob.size() - 4, 4);  // little-endian hosts only
  if (Crc32c(blob.data(), blob.size() - 4) != stored) {
    return absl::DataLossError("checkpoint checksum mismatch: the data is corrupted");
  }
  return absl::OkStatus();
}

// A detokenizer holding `tail` (the incomplete character a checkpoint carried), so the text of a
// restored session continues exactly where the original left off.
IncrementalDecoder DecoderWithTail(const std::string& tail) {
  IncrementalDecoder d;
  for (char c : tail) d.Push(static_cast<uint8_t>(c));
  return d;
}

}  // namespace

absl::StatusOr<EngineLoop::Session*> EngineLoop::FindSession(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->throwaway) {
    return absl::NotFoundError(absl::StrCat("session_id: session '", id, "' not found"));
  }
  return it->second.get();
}

absl::Status EngineLoop::CheckCapacity() const {
  if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_sessions reached: the server holds ", sessions_.size(), " sessions (limit ",
        options_.max_sessions, "); delete some"));
  }
  return absl::OkStatus();
}

EngineLoop::Session* EngineLoop::AddSession(LoadedModel* model, SessionState state,
                                            bool throwaway) {
  auto s = std::make_unique<Session>();
  s->id = NewId();
  s->model = model;
  s->state = std::move(state);
  s->throwaway = throwaway;
  s->last_used = absl::Now();
  Session* raw = s.get();
  sessions_[raw->id] = std::move(s);
  return raw;
}

void EngineLoop::EraseSession(Session* s) {
  if (s->resident) {
    s->model->engine->ReleaseSession(&s->state);
  } else {
    store_.Remove(store_.EvictedPath(s->id));
  }
  sessions_.erase(s->id);
}

absl::Status EngineLoop::EnsureResident(Session* s) {
  s->last_used = absl::Now();
  if (s->resident) return absl::OkStatus();
  const std::string path = store_.EvictedPath(s->id);
  absl::StatusOr<std::string> blob =
      store_.Read(path, absl::StrCat("evicted state of session ", s->id));
  if (!blob.ok()) return blob.status();
  absl::StatusOr<SessionState> state = s->model->engine->Restore(*blob);
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat("restoring evicted session ", s->id, ": ",
                                     state.status().message()));
  }
  s->state = std::move(*state);
  s->resident = true;
  s->decoder = DecoderWithTail(s->state.text_tail);
  store_.Remove(path);
  metrics_->sessions_restored_total++;
  return absl::OkStatus();
}

SessionInfo EngineLoop::Info(const Session& s) const {
  SessionInfo i;
  i.session_id = s.id;
  i.model = s.model->name;
  i.attention_kind = std::string(AttentionKindName(s.model->config().attention_kind));
  i.context_tokens =
      s.resident ? static_cast<uint64_t>(s.state.context_tokens()) : s.evicted_context_tokens;
  i.state_bytes = s.resident ? s.model->engine->SessionBytes(s.state) : 0;
  i.generating = s.stream != nullptr;
  i.evicted = !s.resident;
  return i;
}

void EngineLoop::CreateSession(std::string model, std::optional<SamplingParams> sampling,
                               Callback<SessionInfo> done) {
  Post([this, model = std::move(model), sampling, done = std::move(done)] {
    LoadedModel* m = const_cast<LoadedModel*>(FindModel(model.empty() ? default_model_ : model));
    if (m == nullptr) {
      return done(absl::InvalidArgumentError(
          absl::StrCat("model: unknown model '", model, "' (loaded: ", ModelNames(), ")")));
    }
    if (absl::Status s = CheckCapacity(); !s.ok()) return done(s);
    Session* s = AddSession(m, m->engine->NewSession(sampling.value_or(SamplingParams{})),
                            /*throwaway=*/false);
    done(Info(*s));
  });
}

void EngineLoop::GetSession(std::string session_id, Callback<SessionInfo> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    absl::StatusOr<Session*> s = FindSession(id);
    if (!s.ok()) return done(s.status());
    if (absl::Status st = EnsureResident(*s); !st.ok()) return done(st);
    done(Info(**s));
  });
}

void EngineLoop::DeleteSession(std::string session_id, std::function<void(absl::Status)> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    absl::StatusOr<Session*> s = FindSession(id);
    if (!s.ok()) return done(s.status());
    if ((*s)->stream != nullptr) {
      return done(absl::FailedPreconditionError(
          absl::StrCat("session ", id, " is generating; cancel its Generate first")));
    }
    EraseSession(*s);
    done(absl::OkStatus());
  });
}

void EngineLoop::CheckpointSession(std::string session_id, Callback<CheckpointInfo> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    absl::StatusOr<Session*> found = FindSession(id);
    if (!found.ok()) return done(found.status());
    Session* s = *found;
    if (s->stream != nullptr) {
      return done(absl::FailedPreconditionError(
          absl::StrCat("session ", id, " is generating; checkpoint it between Generate calls")));
    }
    if (absl::Status st = EnsureResident(s); !st.ok()) return done(st);
    s->state.text_tail = s->decoder.pending_bytes();
    absl::StatusOr<std::string> blob = s->model->engine->Checkpoint(s->state);
    if (!blob.ok()) return done(blob.status());
    CheckpointInfo info;
    info.checkpoint_id = NewId();
    if (absl::Status st = store_.WriteAtomic(store_.CheckpointPath(info.checkpoint_id), *blob);
        !st.ok()) {
      return done(st);
    }
    info.data = std::move(*blob);
    info.context_tokens = static_cast<uint64_t>(s->state.context_tokens());
    info.model_fingerprint = s->model->fingerprint();
    info.model = s->model->name;
    done(std::move(info));
  });
}

void EngineLoop::RestoreSession(std::string blob, Callback<SessionInfo> done) {
  auto b = std::make_shared<std::string>(std::move(blob));
  Post([this, b, done = std::move(done)] {
    if (absl::Status st = CheckBlob(*b); !st.ok()) return done(st);
    absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(*b);
    if (!header.ok()) return done(header.status());
    LoadedModel* model = nullptr;
    for (const auto& m : models_) {
      if (m->fingerprint() == header->fingerprint) model = m.get();
    }
    if (model == nullptr) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          "checkpoint was written by a model (fingerprint ", absl::CEscape(header->fingerprint),
          ") that this server has not loaded (loaded: ", ModelNames(), ")")));
    }
    if (absl::Status st = CheckCapacity(); !st.ok()) return done(st);
    absl::StatusOr<SessionState> state = model->engine->Restore(*b);
    if (!state.ok()) return done(state.status());
    Session* s = AddSession(model, std::move(*state), /*throwaway=*/false);
    s->decoder = DecoderWithTail(s->state.text_tail);
    done(Info(*s));
  });
}

void EngineLoop::GetStats(Callback<StatsInfo> done) {
  Post([this, done = std::move(done)] {
    StatsInfo st;
    for (const auto& [id, s] : sessions_) {
      if (s->resident) {
        ++st.active_sessions;
        st.state_bytes_total += s->model->engine->SessionBytes(s->state);
      } else {
        ++st.evicted_sessions;
      }
    }
    for (const auto& m : models_) {
      if (const KvBlockPool* pool = m->engine->kv_pool(); pool != nullptr) {
        st.kv_blocks_used += pool->blocks_used();
        st.kv_blocks_total += pool->blocks_total();
      }
    }
    for (const auto& s : streams_) st.active_streams += s->done ? 0 : 1;
    st.tokens_generated_total = tokens_generated_;
    done(st);
  });
}

void EngineLoop::MaybeEvictIdle() {
  if (options_.session_idle_ttl <= absl::ZeroDuration()) return;
  const absl::Time now = absl::Now();
  const absl::Duration every =
      std::min(absl::Seconds(1), std::max(absl::Milliseconds(50), options_.session_idle_ttl / 4));
  if (now - last_evict_scan_ < every) return;
  last_evict_scan_ = now;
  for (auto& [id, s] : sessions_) {
    if (!s->resident || s->throwaway || s->stream != nullptr) continue;
    if (now - s->last_used < options_.session_idle_ttl) continue;
    s->state.text_tail = s->decoder.pending_bytes();
    absl::StatusOr<std::string> blob = s->model->engine->Checkpoint(s->state);
    absl::Status st = blob.ok() ? store_.WriteAtomic(store_.EvictedPath(id), *blob) : blob.status();
    if (!st.ok()) {
      // Never drop a session: keep it in memory and try again after another ttl.
      std::fprintf(stderr, "[flatstate] cannot evict idle session %s: %s\n", id.c_str(),
                   st.ToString().c_str());
      s->last_used = now;
      continue;
    }
    s->evicted_context_tokens = static_cast<uint64_t>(s->state.context_tokens());
    s->model->engine->ReleaseSession(&s->state);
    s->state = SessionState();
    s->resident = false;
    metrics_->sessions_evicted_total++;
    if (options_.log_requests) {
      std::fprintf(stderr, "[flatstate] evicted idle session %s (%llu context tokens) to %s\n",
                   id.c_str(), static_cast<unsigned long long>(s->evicted_context_tokens),
                   store_.EvictedPath(id).c_str());
    }
  }
}

void EngineLoop::UpdateGauges() {
  uint64_t resident = 0, evicted = 0, bytes = 0, used = 0, free_blocks = 0, streams = 0;
  for (const auto& [id, s] : sessions_) {
    if (s->resident) {
      ++resident;
      bytes += s->model->engine->SessionBytes(s->state);
    } else {
      ++evicted;
    }
  }
  for (const auto& m : models_) {
    if (const KvBlockPool* pool = m->engine->kv_pool(); pool != nullptr) {
      used += pool->blocks_used();
      free_blocks += pool->blocks_free();
    }
  }
  for (const auto& s : streams_) streams += s->done ? 0 : 1;
  metrics_->active_sessions = resident;
  metrics_->evicted_sessions = evicted;
  metrics_->state_bytes = bytes;
  metrics_->kv_blocks_used = used;
  metrics_->kv_blocks_free = free_blocks;
  metrics_->active_streams = streams;
}

}  // namespace flatstate::server
