// SharedPersistence (session_persistence.h): a SessionTable over a shared store (docs/cluster.md):
// loading a session this replica does not hold, the version check before a turn, the fenced
// write-through after it, deletion from the store and dropping idle sessions from memory.
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint.h"
#include "server/sessions/session_persistence.h"
#include "server/sessions/session_table.h"

namespace flatstate::server {
namespace {

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

void SharedPersistence::NoteStore(const absl::Status& s) {
  Metrics* const metrics = table_->metrics_;
  if (metrics != nullptr) metrics->store_up = s.code() == absl::StatusCode::kUnavailable ? 0 : 1;
}

absl::StatusOr<std::pair<LoadedModel*, SessionState>> SharedPersistence::LoadStored(
    absl::string_view id, uint64_t* version) {
  SessionStore* const store = table_->store_;
  const ModelRegistry* const models = table_->models_;
  Metrics* const metrics = table_->metrics_;
  const absl::Time t0 = absl::Now();
  absl::StatusOr<StoredSession> stored = store->Load(id);
  NoteStore(stored.status());
  if (!stored.ok()) {
    if (stored.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("session_id: session '", id,
                                              "' not found (not in memory, not in the store ",
                                              store->address(), ")"));
    }
    return stored.status();
  }
  const std::string what = absl::StrCat("stored session ", id, ": ");
  absl::StatusOr<std::string> blob =
      JoinCheckpoint(stored->head, stored->chunk_tokens, stored->chunks);
  if (!blob.ok()) return Prefixed(blob.status(), what);
  absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(*blob);
  if (!header.ok()) return Prefixed(header.status(), what);
  LoadedModel* model = models != nullptr ? models->FindByFingerprint(header->fingerprint) : nullptr;
  if (model == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", id, " was written by a model (fingerprint ", absl::CEscape(header->fingerprint),
        ") that this replica has not loaded (loaded: ", models != nullptr ? models->Names() : "",
        ")"));
  }
  absl::StatusOr<SessionState> state = model->engine->Restore(*blob);
  if (!state.ok()) return Prefixed(state.status(), what);
  *version = stored->version;
  if (metrics != nullptr) {
    metrics->store_loads_total++;
    metrics->store_load_bytes_total += blob->size();
    metrics->store_load_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return std::make_pair(model, std::move(*state));
}

absl::StatusOr<Session*> SharedPersistence::FindMissing(absl::string_view id) {
  if (absl::Status s = table_->CheckCapacity(); !s.ok()) return s;
  uint64_t version = 0;
  absl::StatusOr<std::pair<LoadedModel*, SessionState>> loaded = LoadStored(id, &version);
  if (!loaded.ok()) return loaded.status();
  const int64_t position = loaded->second.position;
  Session* s = table_->Add(std::string(id), loaded->first, std::move(loaded->second), false);
  s->stored_version = version;
  s->stored_position = position;
  return s;
}

absl::Status SharedPersistence::Refresh(Session* s) {
  if (s->throwaway) return absl::OkStatus();
  SessionStore* const store = table_->store_;
  absl::StatusOr<uint64_t> version = store->Version(s->id);
  NoteStore(version.status());
  if (!version.ok()) {
    switch (version.status().code()) {
      case absl::StatusCode::kNotFound: {
        if (s->stored_version == 0) return absl::OkStatus();  // never reached the store yet
        const std::string id = s->id;
        table_->Erase(s);
        return absl::NotFoundError(absl::StrCat("session_id: session '", id,
                                                "' not found (deleted from the store ",
                                                store->address(), ")"));
      }
      case absl::StatusCode::kUnavailable:
        return absl::OkStatus();  // serve the in-memory copy while the store is away
      default:
        return version.status();
    }
  }
  if (*version == s->stored_version) return absl::OkStatus();
  // The copy in memory is stale, and can never be saved (the store's version moved on): free it
  // before loading, so the newer version's KV blocks need not fit beside the old ones.
  if (s->resident) {
    s->model->engine->ReleaseSession(&s->state);
    s->resident = false;
  }
  uint64_t loaded_version = 0;
  absl::StatusOr<std::pair<LoadedModel*, SessionState>> loaded = LoadStored(s->id, &loaded_version);
  if (!loaded.ok()) {
    table_->Erase(s);  // a later turn loads the stored version
    return loaded.status();
  }
  s->model = loaded->first;
  s->state = std::move(loaded->second);
  s->decoder = SessionTable::DecoderWithTail(s->model, s->state.text_tail);
  s->resident = true;
  s->stored_version = loaded_version;
  s->stored_position = s->state.position;
  s->unsaved = false;
  if (table_->metrics_ != nullptr) table_->metrics_->store_reloads_total++;
  return absl::OkStatus();
}

absl::Status SharedPersistence::Persist(Session* s) {
  if (s->throwaway) return absl::OkStatus();
  SessionStore* const store = table_->store_;
  Metrics* const metrics = table_->metrics_;
  const absl::Time t0 = absl::Now();
  s->state.text_tail = s->decoder.state();
  const int64_t from = s->stored_version == 0 ? 0 : s->stored_position;
  absl::StatusOr<CheckpointSplit> split = s->model->engine->CheckpointSplitFrom(s->state, from);
  absl::Status st = split.status();
  SessionImage image;
  if (split.ok()) {
    image.head = std::move(split->head);
    image.chunk_tokens = split->chunk_tokens;
    image.total_chunks = split->total_chunks;
    image.first_new_chunk = split->first_chunk;
    image.new_chunks = std::move(split->chunks);
    absl::StatusOr<uint64_t> version = store->Save(s->id, s->stored_version, image);
    NoteStore(version.status());
    st = version.status();
    if (version.ok()) {
      s->stored_version = *version;
      s->stored_position = s->state.position;
      s->unsaved = false;
      if (metrics != nullptr) {
        uint64_t bytes = image.head.size();
        for (const std::string& c : image.new_chunks) bytes += c.size();
        metrics->store_writes_total++;
        metrics->store_write_bytes_total += bytes;
        metrics->store_write_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
      }
      return absl::OkStatus();
    }
  }
  s->unsaved = true;
  if (metrics != nullptr) metrics->store_write_failures_total++;
  std::fprintf(stderr, "[flatstate] session %s: turn not persisted to %s: %s\n", s->id.c_str(),
               store->address().c_str(), st.ToString().c_str());
  return st;
}

absl::Status SharedPersistence::Delete(Session* s) {
  absl::Status st = table_->store_->Delete(s->id);
  NoteStore(st);
  if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;
  table_->Erase(s);
  return absl::OkStatus();
}

int SharedPersistence::EvictIdle(absl::Time now) {
  const SessionTableOptions& options = table_->options_;
  Metrics* const metrics = table_->metrics_;
  std::vector<Session*> idle;
  for (auto& [id, s] : table_->sessions_) {
    if (!s->resident || s->throwaway || s->generating) continue;
    if (now - s->last_used < options.idle_ttl) continue;
    if ((s->unsaved || s->stored_version == 0) && !Persist(s.get()).ok()) {
      s->last_used = now;  // never drop a session the store does not have: try after another ttl
      continue;
    }
    idle.push_back(s.get());
  }
  for (Session* s : idle) {
    if (options.log_evictions) {
      std::fprintf(stderr,
                   "[flatstate] dropped idle session %s from memory (stored as version %llu)\n",
                   s->id.c_str(), static_cast<unsigned long long>(s->stored_version));
    }
    table_->Erase(s);
    if (metrics != nullptr) metrics->sessions_evicted_total++;
  }
  return static_cast<int>(idle.size());
}

}  // namespace flatstate::server
