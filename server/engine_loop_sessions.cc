// EngineLoop: the unary session operations (create, get, delete, checkpoint, restore, stats).
// Each runs on the loop thread; the SessionTable keeps the sessions.
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint.h"
#include "server/engine_loop.h"
#include "server/ids.h"

namespace flatstate::server {

void EngineLoop::CreateSession(std::string model, std::optional<SamplingParams> sampling,
                               Callback<SessionInfo> done) {
  Post([this, model = std::move(model), sampling, done = std::move(done)] {
    absl::StatusOr<LoadedModel*> m = models_.Resolve(model);
    if (!m.ok()) return done(m.status());
    absl::StatusOr<Session*> s =
        sessions_.Create(*m, sampling.value_or(SamplingParams{}), /*throwaway=*/false);
    if (!s.ok()) return done(s.status());
    done(sessions_.Info(**s));
  });
}

void EngineLoop::GetSession(std::string session_id, Callback<SessionInfo> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    absl::StatusOr<Session*> s = sessions_.FindResident(id);
    if (!s.ok()) return done(s.status());
    done(sessions_.Info(**s));
  });
}

void EngineLoop::DeleteSession(std::string session_id, std::function<void(absl::Status)> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    absl::StatusOr<Session*> s = sessions_.Find(id);
    if (!s.ok()) return done(s.status());
    if ((*s)->generating) {
      return done(absl::FailedPreconditionError(
          absl::StrCat("session ", id, " is generating; cancel its Generate first")));
    }
    sessions_.Erase(*s);
    done(absl::OkStatus());
  });
}

void EngineLoop::CheckpointSession(std::string session_id, Callback<CheckpointInfo> done) {
  Post([this, id = std::move(session_id), done = std::move(done)] {
    absl::StatusOr<Session*> found = sessions_.Find(id);
    if (!found.ok()) return done(found.status());
    Session* s = *found;
    if (s->generating) {
      return done(absl::FailedPreconditionError(
          absl::StrCat("session ", id, " is generating; checkpoint it between Generate calls")));
    }
    if (absl::Status st = sessions_.EnsureResident(s); !st.ok()) return done(st);
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
    done(sessions_.Info(**s));
  });
}

void EngineLoop::GetStats(Callback<StatsInfo> done) {
  Post([this, done = std::move(done)] { done(Stats()); });
}

}  // namespace flatstate::server
