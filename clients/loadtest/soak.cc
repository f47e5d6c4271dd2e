#include "clients/loadtest/soak.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "clients/common/session_metadata.h"
#include "clients/loadtest/growth.h"

namespace flatstate::loadtest {

namespace pb = flatstate::v1;

namespace {

constexpr absl::Duration kCallDeadline = absl::Seconds(120);
constexpr size_t kKeepErrors = 10;

class Soak {
 public:
  Soak(const Client& client, const SoakOptions& o)
      : client_(client), o_(o), stub_(pb::Inference::NewStub(client.channel())) {
    // Prompts are token ids valid for every soaked model (growth.h, FitToVocab).
    for (const std::string& m : o_.models) vocab_ = std::min(vocab_, VocabOf(client_, m));
  }

  SoakResult Run(Progress* progress) {
    start_ = absl::Now();
    end_ = start_ + o_.duration;
    std::vector<std::thread> workers;
    for (int i = 0; i < o_.streams; ++i) workers.emplace_back([this, i] { Worker(i); });
    while (absl::Now() < end_) {
      Sample();
      if (progress != nullptr) {
        progress->Update("soak", absl::ToDoubleSeconds(absl::Now() - start_),
                         absl::ToDoubleSeconds(o_.duration));
      }
      absl::SleepFor(std::min(o_.sample_every, std::max(absl::ZeroDuration(), end_ - absl::Now())));
    }
    for (auto& t : workers) t.join();
    Sample();  // after the load: nothing in flight
    absl::MutexLock lock(&mu_);
    result_.elapsed_s = absl::ToDoubleSeconds(absl::Now() - start_);
    return result_;
  }

 private:
  enum Expect { kNothing = 0, kCancel = 1, kDeadline = 2 };

  // Deadline, auth token and, for a call that names a session, the affinity metadata.
  void Prepare(grpc::ClientContext* ctx, absl::Duration deadline,
               std::string_view session_id = {}) const {
    clients::AddSessionMetadata(session_id, ctx);
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMicroseconds(deadline));
    if (!client_.options().auth_token.empty()) {
      ctx->AddMetadata("authorization", absl::StrCat("Bearer ", client_.options().auth_token));
    }
  }

  // Counts one call; true iff it succeeded.
  bool Record(const std::string& kind, const grpc::Status& s, int expect = kNothing) {
    absl::MutexLock lock(&mu_);
    result_.calls[kind]++;
    if (s.ok()) return true;
    const std::string key = absl::StrCat(kind, " ", CodeName(s.error_code()));
    if ((s.error_code() == grpc::StatusCode::CANCELLED && (expect & kCancel)) ||
        (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && (expect & kDeadline))) {
      result_.expected[key]++;
    } else {
      result_.unexpected[key]++;
      if (result_.first_errors.size() < kKeepErrors) {
        result_.first_errors.push_back(absl::StrCat(key, ": ", s.error_message()));
      }
    }
    return false;
  }

  void Unexpected(const std::string& key, const std::string& detail) {
    absl::MutexLock lock(&mu_);
    result_.unexpected[key]++;
    if (result_.first_errors.size() < kKeepErrors) {
      result_.first_errors.push_back(absl::StrCat(key, ": ", detail));
    }
  }

  void Sample() {
    pb::ServerStats st;
    grpc::ClientContext ctx;
    Prepare(&ctx, absl::Seconds(30));
    const grpc::Status s = stub_->GetStats(&ctx, pb::GetStatsRequest(), &st);
    if (!Record("stats", s)) return;
    absl::MutexLock lock(&mu_);
    result_.rss.push_back({absl::ToDoubleSeconds(absl::Now() - start_), st.rss_bytes(),
                           st.active_sessions(), st.active_streams(), st.kv_blocks_used()});
  }

  // One Generate read to the end (or cancelled after `cancel_after` messages, if >= 0).
  struct Gen {
    grpc::Status status;
    std::vector<int32_t> tokens;
    uint64_t context_tokens = 0;
  };
  Gen Generate(const pb::GenerateRequest& req, absl::Duration deadline, int cancel_after = -1) {
    Gen g;
    grpc::ClientContext ctx;
    Prepare(&ctx, deadline, req.session_id());
    auto reader = stub_->Generate(&ctx, req);
    pb::GenerateResponse msg;
    int messages = 0;
    if (cancel_after == 0) ctx.TryCancel();
    while (reader->Read(&msg)) {
      g.tokens.insert(g.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
      if (msg.has_usage()) g.context_tokens = msg.usage().context_tokens();
      if (++messages == cancel_after) ctx.TryCancel();
    }
    g.status = reader->Finish();
    absl::MutexLock lock(&mu_);
    result_.tokens += g.tokens.size();
    return g;
  }

  std::string NewSession(const std::string& model) {
    pb::CreateSessionRequest req;
    req.set_model(model);  // greedy: a restored copy must continue exactly like the original
    pb::Session s;
    grpc::ClientContext ctx;
    Prepare(&ctx, kCallDeadline);
    Record("create", stub_->CreateSession(&ctx, req, &s));
    return s.session_id();
  }

  void Delete(const std::string& id) {
    pb::DeleteSessionRequest req;
    req.set_session_id(id);
    pb::DeleteSessionResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, kCallDeadline, id);
    Record("delete", stub_->DeleteSession(&ctx, req, &resp));
  }

  bool GetSession(const std::string& id, pb::Session* out) {
    pb::GetSessionRequest req;
    req.set_session_id(id);
    grpc::ClientContext ctx;
    Prepare(&ctx, kCallDeadline, id);
    return Record("get", stub_->GetSession(&ctx, req, out));
  }

  // After a cancelled or expired call the server stops the stream before its next step (or at
  // the session's next turn); a client waits for that (GetSession: generating == false) before
  // using the session again. Returns the session's context length.
  uint64_t WaitIdle(const std::string& id) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    pb::Session s;
    while (GetSession(id, &s) && s.generating()) {
      if (absl::Now() > give_up) {
        Unexpected("session STUCK_GENERATING", id);
        break;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return s.context_tokens();
  }

  static std::string Prompt(std::mt19937_64* rng) {
    std::string p(1 + (*rng)() % 48, ' ');
    for (char& c : p) c = static_cast<char>('a' + (*rng)() % 26);
    return p;
  }

  // `prompt` (ASCII) as token ids of the soaked models' vocabulary.
  void SetPrompt(const std::string& prompt, pb::GenerateRequest* req) const {
    for (char c : prompt) req->add_prompt_tokens(FitToVocab(static_cast<uint8_t>(c), vocab_));
  }

  pb::GenerateRequest OnSession(const std::string& id, const std::string& prompt, uint32_t n) {
    pb::GenerateRequest req;
    req.set_session_id(id);
    SetPrompt(prompt, &req);
    req.set_max_new_tokens(n);
    return req;
  }

  // Checkpoint, restore (inline data or by id), continue both copies: they must agree.
  void CheckpointRestore(const std::string& session, bool by_id) {
    pb::CheckpointSessionRequest creq;
    creq.set_session_id(session);
    pb::Checkpoint ck;
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, kCallDeadline, session);
      if (!Record("checkpoint", stub_->CheckpointSession(&ctx, creq, &ck))) return;
    }
    pb::RestoreSessionRequest rreq;
    if (by_id) {
      rreq.set_checkpoint_id(ck.checkpoint_id());
    } else {
      rreq.set_data(ck.data());
    }
    pb::Session copy;
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, kCallDeadline);
      if (!Record(by_id ? "restore_id" : "restore_data", stub_->RestoreSession(&ctx, rreq, &copy))) {
        return;
      }
    }
    // A one-character prompt: a fresh session has no context to continue from.
    const Gen a = Generate(OnSession(copy.session_id(), ".", 4), kCallDeadline);
    const Gen b = Generate(OnSession(session, ".", 4), kCallDeadline);
    if (Record("generate_restored", a.status) && Record("generate", b.status) &&
        a.tokens != b.tokens) {
      Unexpected("restore MISMATCH", absl::StrCat("checkpoint ", ck.checkpoint_id(),
                                                  ": restored copy [", absl::StrJoin(a.tokens, ","),
                                                  "] vs original [", absl::StrJoin(b.tokens, ","),
                                                  "]"));
    }
    Delete(copy.session_id());
  }

  void Worker(int index) {
    std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(index));
    const std::string model = o_.models[static_cast<size_t>(index) % o_.models.size()];
    std::string session = NewSession(model);
    uint64_t context = 0;
    while (absl::Now() < end_) {
      if (session.empty()) {  // creation failed (already counted): try again later
        absl::SleepFor(absl::Milliseconds(100));
        session = NewSession(model);
        continue;
      }
      const int r = static_cast<int>(rng() % 100);
      const uint32_t n = 1 + static_cast<uint32_t>(rng() % o_.max_new_tokens);
      if (r < 47) {
        const Gen g = Generate(OnSession(session, Prompt(&rng), n), kCallDeadline);
        if (Record("generate", g.status)) context = g.context_tokens;
      } else if (r < 59) {  // cancel after 0..2 messages
        const Gen g = Generate(OnSession(session, Prompt(&rng), 4 * o_.max_new_tokens),
                               kCallDeadline, static_cast<int>(rng() % 3));
        Record("cancel", g.status, kCancel);
        context = WaitIdle(session);
      } else if (r < 71) {  // a deadline of 1..30 ms
        const Gen g = Generate(OnSession(session, Prompt(&rng), 4 * o_.max_new_tokens),
                               absl::Milliseconds(1 + static_cast<int64_t>(rng() % 30)));
        Record("deadline", g.status, kDeadline);
        context = WaitIdle(session);
      } else if (r < 75) {  // rarer: every checkpoint is also a file the server keeps
        CheckpointRestore(session, rng() % 2 == 0);
      } else if (r < 89) {
        pb::GenerateRequest req;
        req.set_model(model);
        SetPrompt(Prompt(&rng), &req);
        req.set_max_new_tokens(n);
        Record("throwaway", Generate(req, kCallDeadline).status);
      } else {
        pb::Session s;
        if (GetSession(session, &s)) context = s.context_tokens();
      }
      if (context > o_.reset_context_tokens) {  // keep softmax KV use bounded
        Delete(session);
        session = NewSession(model);
        context = 0;
      }
    }
    if (!session.empty()) Delete(session);
  }

  const Client& client_;
  const SoakOptions o_;
  std::unique_ptr<pb::Inference::Stub> stub_;
  int64_t vocab_ = 256;  // the smallest vocab_size of the soaked models
  absl::Time start_, end_;
  absl::Mutex mu_;
  SoakResult result_ ABSL_GUARDED_BY(mu_);
};

double Mean(const std::vector<RssSample>& s, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += static_cast<double>(s[i].rss_bytes);
  return to > from ? sum / static_cast<double>(to - from) : 0;
}

std::string Counts(const std::map<std::string, uint64_t>& m) {
  if (m.empty()) return "none";
  return absl::StrJoin(m, ", ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, "=", kv.second);
  });
}

}  // namespace

SoakResult RunSoak(const Client& client, const SoakOptions& options, Progress* progress,
                   CheckList* checks) {
  SoakOptions o = options;
  if (o.warmup <= absl::ZeroDuration()) o.warmup = o.duration / 3;
  o.streams = std::max(1, o.streams);
  o.max_new_tokens = std::max<uint32_t>(1, o.max_new_tokens);
  if (o.models.empty()) {
    checks->Add(false, "soak", "no models to soak");
    return {};
  }
  checks->Info(absl::StrFormat("soak: %d streams for %s over %s (warm-up %s)", o.streams,
                               absl::FormatDuration(o.duration), absl::StrJoin(o.models, ","),
                               absl::FormatDuration(o.warmup)));
  SoakResult r = Soak(client, o).Run(progress);
  if (progress != nullptr) progress->Clear();

  uint64_t calls = 0;
  for (const auto& [kind, n] : r.calls) calls += n;
  checks->Add(r.unexpected.empty(), "soak errors",
              absl::StrCat(calls, " calls, ", r.tokens, " tokens; unexpected: ",
                           Counts(r.unexpected), "; expected: ", Counts(r.expected)));
  for (const std::string& e : r.first_errors) checks->Info(absl::StrCat("soak error: ", e));
  checks->Add(r.calls["generate"] > 0 && r.tokens > 0, "soak progress",
              absl::StrCat(r.calls["generate"], " Generate calls on sessions"));

  std::vector<RssSample> after;
  const double warm_s = absl::ToDoubleSeconds(o.warmup);
  for (const RssSample& s : r.rss) {
    if (s.t_s >= warm_s) after.push_back(s);
  }
  if (after.size() < 6) {
    checks->Add(false, "soak rss", absl::StrCat("only ", after.size(), " samples after warm-up"));
    return r;
  }
  const size_t third = after.size() / 3;
  const double first = Mean(after, 0, third);
  const double last = Mean(after, after.size() - third, after.size());
  uint64_t peak = 0;
  for (const RssSample& s : after) peak = std::max(peak, s.rss_bytes);
  const double allowed = std::max(o.rss_tolerance * first, static_cast<double>(o.rss_slack_bytes));
  checks->Add(last - first <= allowed, "soak rss",
              absl::StrFormat("after warm-up: first third %.1f MiB, last third %.1f MiB "
                              "(%+.2f%%, allowed %.1f MiB), peak %.1f MiB, %d samples",
                              first / (1 << 20), last / (1 << 20), 100 * (last - first) / first,
                              allowed / (1 << 20), static_cast<double>(peak) / (1 << 20),
                              static_cast<int>(after.size())));
  return r;
}

void PrintSoakReport(const SoakResult& r) {
  std::printf("soak: %.0f s, %llu tokens\n", r.elapsed_s,
              static_cast<unsigned long long>(r.tokens));
  std::printf("  calls:      %s\n", Counts(r.calls).c_str());
  std::printf("  expected:   %s\n", Counts(r.expected).c_str());
  std::printf("  unexpected: %s\n", Counts(r.unexpected).c_str());
  if (!r.rss.empty()) {
    std::printf("  rss MiB:   ");
    const size_t step = std::max<size_t>(1, r.rss.size() / 10);
    for (size_t i = 0; i < r.rss.size(); i += step) {
      std::printf(" %.0fs:%.1f", r.rss[i].t_s, static_cast<double>(r.rss[i].rss_bytes) / (1 << 20));
    }
    std::printf(" end:%.1f\n", static_cast<double>(r.rss.back().rss_bytes) / (1 << 20));
  }
  std::fflush(stdout);
}

absl::Status WriteSoakCsv(const std::string& dir, const SoakResult& r) {
  const std::string path = dir + "/soak_rss.csv";
  std::ofstream out(path);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  out << "t_s,rss_bytes,active_sessions,active_streams,kv_blocks_used\n";
  for (const RssSample& s : r.rss) {
    out << absl::StrFormat("%.3f,%d,%d,%d,%d\n", s.t_s, s.rss_bytes, s.active_sessions,
                           s.active_streams, s.kv_blocks_used);
  }
  return out.good() ? absl::OkStatus() : absl::UnavailableError(absl::StrCat("writing ", path));
}

}  // namespace flatstate::loadtest
