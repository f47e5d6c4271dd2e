// SessionTable: the shared-store half (docs/cluster.md): loading a session this replica does not
// hold, the version check before a turn, the fenced write-through after it, deletion from the
// store and dropping idle sessions from memory.
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint.h"
#include "server/session_table.h"

namespace flatstate::server {
namespace {

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

void SessionTable::NoteStore(const absl::Status& s) {
  if (metrics_ != nullptr) metrics_->store_up = s.code() == absl::StatusCode::kUnavailable ? 0 : 1;
}

absl::StatusOr<std::pair<LoadedModel*, SessionState>> SessionTable::LoadStored(absl::string_view id,
                                                                               uint64_t* version) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<StoredSession> stored = store_->Load(id);
  NoteStore(stored.status());
  if (!stored.ok()) {
    if (stored.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("session_id: session '", id,
                                              "' not found (not in memory, not in the store ",
                                              store_->address(), ")"));
    }
    return stored.status();
  }
  const std::string what = absl::StrCat("stored session ", id, ": ");
  absl::StatusOr<std::string> blob =
      JoinCheckpoint(stored->head, stored->chunk_tokens, stored->chunks);
  if (!blob.ok()) return Prefixed(blob.status(), what);
  absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(*blob);
  if (!header.ok()) return Prefixed(header.status(), what);
  LoadedModel* model =
      models_ != nullptr ? models_->FindByFingerprint(header->fingerprint) : nullptr;
  if (model == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", id, " was written by a model (fingerprint ", absl::CEscape(header->fingerprint),
        ") that this replica has not loaded (loaded: ", models_ != nullptr ? models_->Names() : "",
        ")"));
  }
  absl::StatusOr<SessionState> state = model->engine->Restore(*blob);
  if (!state.ok()) return Prefixed(state.status(), what);
  *version = stored->version;
  if (metrics_ != nullptr) {
    metrics_->store_loads_total++;
    metrics_->store_load_bytes_total += blob->size();
    metrics_->store_load_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return std::make_pair(model, std::move(*state));
}

absl::StatusOr<Session*> SessionTable::FindStored(absl::string_view id) {
  if (absl::Status s = CheckCapacity(); !s.ok()) return s;
  uint64_t version = 0;
  absl::StatusOr<std::pair<LoadedModel*, SessionState>> loaded = LoadStored(id, &version);
  if (!loaded.ok()) return loaded.status();
  const int64_t position = loaded->second.position;
  Session* s = Add(std::string(id), loaded->first, std::move(loaded->second), false);
  s->stored_version = version;
  s->stored_position = position;
  return s;
}

absl::Status SessionTable::Refresh(Session* s) {
  if (!store_->shared() || s->throwaway) return absl::OkStatus();
  absl::StatusOr<uint64_t> version = store_->Version(s->id);
  NoteStore(version.status());
  if (!version.ok()) {
    switch (version.status().code()) {
      case absl::StatusCode::kNotFound: {
        if (s->stored_version == 0) return absl::OkStatus();  // never reached the store yet
        const std::string id = s->id;
        Erase(s);
        return absl::NotFoundError(absl::StrCat("session_id: session '", id,
                                                "' not found (deleted from the store ",
                                                store_->address(), ")"));
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
    Erase(s);  // a later turn loads the stored version
    return loaded.status();
  }
  s->model = loaded->first;
  s->state = std::move(loaded->second);
  s->decoder = DecoderWithTail(s->model, s->state.text_tail);
  s->resident = true;
  s->stored_version = loaded_version;
  s->stored_position = s->state.position;
  s->unsaved = false;
  if (metrics_ != nullptr) metrics_->store_reloads_total++;
  return absl::OkStatus();
}

absl::Status SessionTable::Persist(Session* s) {
  if (!store_->shared() || s->throwaway) return absl::OkStatus();
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
    absl::StatusOr<uint64_t> version = store_->Save(s->id, s->stored_version, image);
    NoteStore(version.status());
    st = version.status();
    if (version.ok()) {
      s->stored_version = *version;
      s->stored_position = s->state.position;
      s->unsaved = false;
      if (metrics_ != nullptr) {
        uint64_t bytes = image.head.size();
        for (const std::string& c : image.new_chunks) bytes += c.size();
        metrics_->store_writes_total++;
        metrics_->store_write_bytes_total += bytes;
        metrics_->store_write_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
      }
      return absl::OkStatus();
    }
  }
  s->unsaved = true;
  if (metrics_ != nullptr) metrics_->store_write_failures_total++;
  std::fprintf(stderr, "[flatstate] session %s: turn not persisted to %s: %s\n", s->id.c_str(),
               store_->address().c_str(), st.ToString().c_str());
  return st;
}

absl::Status SessionTable::Delete(Session* s) {
  if (store_->shared()) {
    absl::Status st = store_->Delete(s->id);
    NoteStore(st);
    if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;
  }
  Erase(s);
  return absl::OkStatus();
}

int SessionTable::DropIdleShared(absl::Time now) {
  std::vector<Session*> idle;
  for (auto& [id, s] : sessions_) {
    if (!s->resident || s->throwaway || s->generating) continue;
    if (now - s->last_used < options_.idle_ttl) continue;
    if ((s->unsaved || s->stored_version == 0) && !Persist(s.get()).ok()) {
      s->last_used = now;  // never drop a session the store does not have: try after another ttl
      continue;
    }
    idle.push_back(s.get());
  }
  for (Session* s : idle) {
    if (options_.log_evictions) {
      std::fprintf(stderr,
                   "[flatstate] dropped idle session %s from memory (stored as version %llu)\n",
                   s->id.c_str(), static_cast<unsigned long long>(s->stored_version));
    }
    Erase(s);
    if (metrics_ != nullptr) metrics_->sessions_evicted_total++;
  }
  return static_cast<int>(idle.size());
}

}  // namespace flatstate::server
