#include "server/sessions/session_persistence.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/sessions/session_table.h"

namespace flatstate::server {

std::unique_ptr<SessionPersistence> SessionPersistence::For(SessionTable* table) {
  if (table->store_->shared()) return std::make_unique<SharedPersistence>(table);
  return std::make_unique<LocalPersistence>(table);
}

absl::StatusOr<Session*> LocalPersistence::FindMissing(absl::string_view id) {
  return SessionTable::NotFound(id);
}

absl::Status LocalPersistence::Delete(Session* s) {
  table_->Erase(s);
  return absl::OkStatus();
}

int LocalPersistence::EvictIdle(absl::Time now) {
  const SessionTableOptions& options = table_->options_;
  Metrics* const metrics = table_->metrics_;
  int evicted = 0;
  for (auto& [id, s] : table_->sessions_) {
    if (!s->resident || s->throwaway || s->generating) continue;
    if (now - s->last_used < options.idle_ttl) continue;
    absl::StatusOr<std::string> blob = table_->Checkpoint(s.get());
    absl::Status st = blob.ok() ? table_->store_->PutEvicted(id, *blob) : blob.status();
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
    ++evicted;
    if (metrics != nullptr) metrics->sessions_evicted_total++;
    if (options.log_evictions) {
      std::fprintf(stderr, "[flatstate] evicted idle session %s (%llu context tokens)\n",
                   id.c_str(), static_cast<unsigned long long>(s->evicted_context_tokens));
    }
  }
  return evicted;
}

}  // namespace flatstate::server
