// EngineLoop: the unary session operations (create, get, delete, checkpoint, restore, stats).
// Each runs on the loop thread; the SessionTable keeps the sessions.
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint.h"
#include "server/loop/engine_loop.h"
#include "server/store/ids.h"

namespace flatstate::server {

absl::StatusOr<Session*> EngineLoop::FindForTurn(const std::string& id, TurnLease* lease,
                                                 absl::string_view busy) {
  auto busy_error = [&] {
    return absl::FailedPreconditionError(absl::StrCat("session ", id, " ", busy));
  };
  if (Session* local = sessions_.InMemory(id);
      local != nullptr && local->generating && !EndCancelledTurn(local)) {
    return busy_error();
  }
  if (sessions_.shared()) {
    absl::StatusOr<SessionLease> taken = store_->AcquireLease(id);
    if (taken.ok()) {
      lease->Hold(std::move(*taken));
    } else if (taken.status().code() == absl::StatusCode::kAborted) {
      metrics_->store_lease_conflicts_total++;
      return taken.status();
    } else if (taken.status().code() != absl::StatusCode::kUnavailable) {
      return taken.status();
    }
    // Unavailable: an in-memory session goes on without a lease; Find below fails naming the
    // store for one this replica does not hold.
  }
  // A session loaded by Find is the stored version already: only a held one needs the check.
  const bool held = sessions_.InMemory(id) != nullptr;
  absl::StatusOr<Session*> s = sessions_.Find(id);
  absl::Status st = s.status();
  if (st.ok() && (*s)->generating && !EndCancelledTurn(*s)) st = busy_error();
  if (st.ok() && held) st = sessions_.Refresh(*s);
  if (st.ok()) st = sessions_.EnsureResident(*s);
  if (!st.ok()) {
    lease->Release();
    return st;
  }
  return s;
}

bool EngineLoop::EndCancelledTurn(Session* session) {
  for (auto& st : streams_) {
    if (!st->done && st->session == session) return FinishIfCancelled(st.get());
  }
  return false;
}

void EngineLoop::EndStreamsThatLostTheirLease() {
  if (keeper_ == nullptr) return;
  for (const LostLease& lost : keeper_->TakeLost()) {
    for (auto& st : streams_) {
      Session* s = st->session;
      if (st->done || !s->lease.has_value() || s->lease->token != lost.lease.token) continue;
      s->lease.reset();  // no longer ours: never release someone else's
      FinishStream(
          st.get(), FinishReason::kEngineError,
          absl::AbortedError(absl::StrCat("session ", s->id, " lost its lease (",
                                          lost.status.message(), "); retry the Generate")));
    }
  }
}

void EngineLoop::CreateSession(std::string model, std::optional<SamplingParams> sampling,
                               Callback<SessionInfo> done) {
  Post([this, model = std::move(model), sampling, done = std::move(done)] {
    absl::StatusOr<LoadedModel*> m = models_.Resolve(model);
    if (!m.ok()) return done(m.status());
    absl::StatusOr<Session*> s =
        sessions_.Create(*m, sampling.value_or(SamplingParams{}), /*throwaway=*/false);
    if (!s.ok()) return done(s.status());
    (void)sessions_.Persist(*s);  // shared store: findable by every replica (failures counted)
    done(sessions_.Info(**s));
  });
}

void EngineLoop::GetSession(std::string session_id, Callback<SessionInfo> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    const bool held = sessions_.InMemory(id) != nullptr;  // else Find loads the stored version
    absl::StatusOr<Session*> s = sessions_.FindResident(id);
    if (!s.ok()) return done(s.status());
    if (held) {
      if (absl::Status st = sessions_.Refresh(*s); !st.ok()) return done(st);
    }
    done(sessions_.Info(**s));
  });
}

void EngineLoop::DeleteSession(std::string session_id, std::function<void(absl::Status)> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    TurnLease lease(store_.get());
    absl::StatusOr<Session*> s =
        FindForTurn(id, &lease, "is generating; cancel its Generate first");
    if (!s.ok()) return done(s.status());
    done(sessions_.Delete(*s));
  });
}

void EngineLoop::CheckpointSession(std::string session_id, Callback<CheckpointInfo> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    TurnLease lease(store_.get());
    absl::StatusOr<Session*> found =
        FindForTurn(id, &lease, "is generating; checkpoint it between Generate calls");
    if (!found.ok()) return done(found.status());
    Session* s = *found;
    absl::StatusOr<std::string> blob = sessions_.Checkpoint(s);
    if (!blob.ok()) return done(blob.status());
    CheckpointInfo info;
    info.checkpoint_id = NewId();
    if (absl::Status st = store_->PutCheckpoint(info.checkpoint_id, *blob); !st.ok()) {
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
    // ReadCheckpointHeader verifies the CRC before it trusts any header field (DataLoss).
    absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(*b);
    if (!header.ok()) return done(header.status());
    LoadedModel* model = models_.FindByFingerprint(header->fingerprint);
    if (model == nullptr) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          "checkpoint was written by a model (fingerprint ", absl::CEscape(header->fingerprint),
          ") that this server has not loaded (loaded: ", models_.Names(), ")")));
    }
    absl::StatusOr<Session*> s = sessions_.Restore(model, *b);
    if (!s.ok()) return done(s.status());
    (void)sessions_.Persist(*s);  // shared store: findable by every replica (failures counted)
    done(sessions_.Info(**s));
  });
}

void EngineLoop::ForkSession(std::string session_id, std::optional<SamplingParams> sampling,
                             Callback<SessionInfo> done) {
  Post([this, id = std::move(session_id), sampling, done = std::move(done)] {
    TurnLease lease(store_.get());
    absl::StatusOr<Session*> found =
        FindForTurn(id, &lease, "is generating; fork it between Generate calls");
    if (!found.ok()) return done(found.status());
    absl::StatusOr<Session*> fork = sessions_.Fork(*found, /*throwaway=*/false);
    if (!fork.ok()) return done(fork.status());
    if (sampling.has_value()) {
      (*fork)->state.sampling = *sampling;
      (*fork)->state.rng = Rng(sampling->seed);
    }
    (void)sessions_.Persist(*fork);  // shared store: findable by every replica (failures counted)
    done(sessions_.Info(**fork));
  });
}

absl::StatusOr<Session*> EngineLoop::StartFromState(LoadedModel* model, const std::string& blob,
                                                    const std::optional<SamplingParams>& sampling) {
  auto named = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("initial_state: ", s.message()));
  };
  absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(blob);
  if (!header.ok()) return named(header.status());
  if (header->fingerprint != model->fingerprint()) {
    const LoadedModel* owner = models_.FindByFingerprint(header->fingerprint);
    return absl::FailedPreconditionError(absl::StrCat(
        "initial_state: the checkpoint is of ",
        owner != nullptr ? absl::StrCat("model '", owner->name, "'")
                         : std::string("a model this server has not loaded"),
        ", not of model '", model->name, "' that the request runs on",
        owner != nullptr ? "; name its model" : ""));
  }
  absl::StatusOr<Session*> s = sessions_.Restore(model, blob, /*throwaway=*/true);
  if (!s.ok()) return named(s.status());
  if (sampling.has_value()) {
    (*s)->state.sampling = *sampling;
    (*s)->state.rng = Rng(sampling->seed);
  }
  return s;
}

void EngineLoop::GetStats(Callback<StatsInfo> done) {
  Post([this, done = std::move(done)] {
    StatsInfo st = Stats();
    const DeviceMemoryInfo mem = DeviceMemory();
    st.device_memory_used_bytes = mem.used_bytes;
    st.device_memory_total_bytes = mem.total_bytes;
    done(std::move(st));
  });
}

}  // namespace flatstate::server
