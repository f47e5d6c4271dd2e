// Helpers of the SessionTable tests (session_table_test.cc, session_table_shared_test.cc): an
// in-memory SessionStore, a small random model with its engine, a generation loop.
#ifndef FLATSTATE_TESTS_SERVER_SESSION_TABLE_TEST_UTIL_H_
#define FLATSTATE_TESTS_SERVER_SESSION_TABLE_TEST_UTIL_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "server/sessions/session_table.h"
#include "tests/util/model_writer.h"

namespace flatstate::server {

// An in-memory SessionStore. Not shared: evicted blobs (Put fails while `fail_puts` is set).
// Shared (`shared_mode`): versions with the fencing check and chunked images, as the Redis store
// keeps them (the real one is tested in redis_session_store_test and tests/system/cluster_*).
class MemoryStore final : public SessionStore {
 public:
  bool shared() const override { return shared_mode; }
  std::string address() const override { return "memory:"; }
  absl::StatusOr<SessionLease> AcquireLease(absl::string_view id) override {
    return SessionLease{std::string(id), "t"};
  }
  absl::Status RenewLease(const SessionLease&) override { return absl::OkStatus(); }
  void ReleaseLease(const SessionLease&) override {}
  absl::StatusOr<uint64_t> Version(absl::string_view id) override {
    if (down) return absl::UnavailableError("memory store is down");
    auto it = stored.find(std::string(id));
    if (it == stored.end()) return absl::NotFoundError("no such session");
    return it->second.version;
  }
  absl::StatusOr<StoredSession> Load(absl::string_view id) override {
    if (down) return absl::UnavailableError("memory store is down");
    auto it = stored.find(std::string(id));
    if (it == stored.end()) return absl::NotFoundError("no such session");
    return it->second;
  }
  absl::StatusOr<uint64_t> Save(absl::string_view id, uint64_t expected,
                                const SessionImage& image) override {
    if (down) return absl::UnavailableError("memory store is down");
    StoredSession& s = stored[std::string(id)];
    if (s.version != expected) return absl::AbortedError("stale version");
    if (image.first_new_chunk > static_cast<int64_t>(s.chunks.size())) {
      return absl::InternalError("chunks missing");
    }
    s.chunks.resize(image.first_new_chunk);
    for (const std::string& c : image.new_chunks) s.chunks.push_back(c);
    s.head = image.head;
    s.chunk_tokens = image.chunk_tokens;
    last_new_chunks = image.new_chunks.size();
    return ++s.version;
  }
  absl::Status Delete(absl::string_view id) override {
    return stored.erase(std::string(id)) ? absl::OkStatus() : absl::NotFoundError("none");
  }
  absl::Status PutEvicted(absl::string_view id, absl::string_view blob) override {
    if (fail_puts) return absl::ResourceExhaustedError("store is full");
    evicted[std::string(id)] = std::string(blob);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> GetEvicted(absl::string_view id) const override {
    auto it = evicted.find(std::string(id));
    if (it == evicted.end()) return absl::NotFoundError("no such blob");
    return it->second;
  }
  void RemoveEvicted(absl::string_view id) override { evicted.erase(std::string(id)); }
  absl::Status PutCheckpoint(absl::string_view, absl::string_view) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<std::string> GetCheckpoint(absl::string_view) const override {
    return absl::UnimplementedError("not used");
  }
  std::map<std::string, std::string> evicted;
  bool fail_puts = false;
  bool shared_mode = false;
  bool down = false;
  std::map<std::string, StoredSession> stored;
  size_t last_new_chunks = 0;
};

inline LoadedModel MakeModel(AttentionKind kind) {
  const std::string dir =
      testing::TempDir() + "/session_table_" + std::string(AttentionKindName(kind));
  EXPECT_TRUE(testing::WriteRandomModel(dir, testing::SmallConfig(kind), 5).ok());
  auto model = Model::Load(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  EngineOptions o;
  o.threads = 1;
  o.kv_blocks = 64;
  auto engine = Engine::Create(std::move(*model), o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return LoadedModel{"m", std::move(*engine)};
}

// Appends `prompt` and generates `n` tokens.
inline std::vector<int32_t> Generate(Engine* e, SessionState* s, std::vector<int32_t> prompt,
                                     int n) {
  EXPECT_TRUE(e->Append(s, prompt).ok());
  std::vector<int32_t> out;
  std::vector<StepResult> res;
  while (static_cast<int>(out.size()) < n) {
    StepRequest r{s, 1 << 30, true};
    if (!e->Step(std::span<const StepRequest>(&r, 1), &res).ok()) break;
    if (res[0].sampled) out.push_back(res[0].token);
  }
  return out;
}

inline SessionTableOptions Options(int max_sessions = 8) {
  return SessionTableOptions{max_sessions, absl::Seconds(60), /*log_evictions=*/false};
}

}  // namespace flatstate::server

#endif  // FLATSTATE_TESTS_SERVER_SESSION_TABLE_TEST_UTIL_H_
