#include "clients/loadtest/concurrency_sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "clients/loadtest/growth.h"
#include "clients/loadtest/stats.h"

namespace flatstate::loadtest {

namespace pb = flatstate::v1;

int ConcurrencyRow::error_count() const {
  int n = 0;
  for (const auto& [code, count] : errors) n += count;
  return n;
}

std::string ConcurrencyRow::ErrorsString() const {
  std::vector<std::string> parts;
  for (const auto& [code, count] : errors) parts.push_back(absl::StrCat(code, ":", count));
  return absl::StrJoin(parts, ";");
}

namespace {

struct Shared {
  absl::Mutex mu;
  std::vector<double> ttft, itl;
  std::map<std::string, int> errors;
  std::string first_error;
  int ok = 0;
  int requests = 0;
  uint64_t tokens = 0;
  std::chrono::steady_clock::time_point last_finish;  // of any worker
};

void Worker(const Client& client, const ConcurrencyOptions& o, const std::string& model,
            int64_t vocab, int id,
            Shared* sh, std::atomic<int>* done_requests) {
  auto record_error = [sh](const grpc::Status& s) {
    absl::MutexLock lock(&sh->mu);
    sh->errors[CodeName(s.error_code())]++;
    if (sh->first_error.empty()) {
      sh->first_error = absl::StrCat(CodeName(s.error_code()), ": ", s.error_message());
    }
  };
  pb::Session session;
  if (grpc::Status s = client.CreateSession(model, &session); !s.ok()) {
    record_error(s);
    done_requests->fetch_add(o.requests_per_session);
    absl::MutexLock lock(&sh->mu);
    sh->last_finish = std::max(sh->last_finish, std::chrono::steady_clock::now());
    return;
  }
  for (int k = 0; k < o.requests_per_session; ++k) {
    pb::GenerateRequest req;
    req.set_session_id(session.session_id());
    req.set_max_new_tokens(o.new_tokens);
    for (int i = 0; i < o.prompt_tokens; ++i) {
      req.add_prompt_tokens(FitToVocab('a' + (id * 7 + k * 3 + i) % 26, vocab));
    }
    GenerateResult r = client.Generate(req);
    {
      absl::MutexLock lock(&sh->mu);
      sh->requests++;
      sh->tokens += r.tokens;
      if (r.ttft_s >= 0) sh->ttft.push_back(r.ttft_s);
      sh->itl.insert(sh->itl.end(), r.itl_s.begin(), r.itl_s.end());
      if (r.ok()) sh->ok++;
    }
    if (!r.ok()) record_error(r.status);
    done_requests->fetch_add(1);
  }
  if (grpc::Status s = client.DeleteSession(session.session_id()); !s.ok()) record_error(s);
  absl::MutexLock lock(&sh->mu);
  sh->last_finish = std::max(sh->last_finish, std::chrono::steady_clock::now());
}

ConcurrencyRow RunLevel(const Client& client, const ConcurrencyOptions& o,
                        const std::string& model, int level, Progress* progress) {
  Shared sh;
  std::atomic<int> done{0};
  const int total = level * o.requests_per_session;
  const int64_t vocab = VocabOf(client, model);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  threads.reserve(level);
  for (int i = 0; i < level; ++i) {
    threads.emplace_back(Worker, std::cref(client), std::cref(o), std::cref(model), vocab, i, &sh,
                         &done);
  }
  const std::string label = absl::StrFormat("concurrency %s x%d", model, level);
  while (done.load() < total) {
    progress->Update(label, done.load(), total);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (std::thread& t : threads) t.join();
  progress->Update(label, total, total);
  ConcurrencyRow row;
  row.model = model;
  row.concurrency = level;
  absl::MutexLock lock(&sh.mu);
  row.wall_s = std::chrono::duration<double>(sh.last_finish - start).count();
  row.requests = sh.requests;
  row.ok = sh.ok;
  row.errors = sh.errors;
  row.tokens = sh.tokens;
  row.tokens_per_s = row.wall_s > 0 ? sh.tokens / row.wall_s : 0;
  row.ttft_p50_ms = Percentile(sh.ttft, 50) * 1e3;
  row.ttft_p99_ms = Percentile(sh.ttft, 99) * 1e3;
  row.itl_p50_ms = Percentile(sh.itl, 50) * 1e3;
  row.itl_p99_ms = Percentile(sh.itl, 99) * 1e3;
  row.first_error = sh.first_error;
  return row;
}

}  // namespace

std::vector<ConcurrencyRow> RunConcurrencySweep(const Client& client,
                                                const ConcurrencyOptions& options,
                                                Progress* progress, CheckList* checks) {
  std::vector<ConcurrencyRow> rows;
  for (const std::string& model : options.models) {
    for (int level : options.levels) {
      if (level < 1) continue;
      ConcurrencyRow row = RunLevel(client, options, model, level, progress);
      pb::ServerStats stats;
      if (client.GetStats(&stats).ok()) row.rss_bytes = stats.rss_bytes();
      const int errors = row.error_count();
      const std::string detail = absl::StrFormat(
          "%d/%d requests ok, %.1f tokens/s, TTFT p50 %.1f ms p99 %.1f ms, ITL p50 %.2f ms "
          "p99 %.2f ms%s",
          row.ok, level * options.requests_per_session, row.tokens_per_s, row.ttft_p50_ms,
          row.ttft_p99_ms, row.itl_p50_ms, row.itl_p99_ms,
          errors > 0
              ? absl::StrCat(", errors ", row.ErrorsString(), " (first: ", row.first_error, ")")
                     : "");
      const std::string name = absl::StrFormat("%s concurrency %d", model, level);
      if (options.allow_errors) {
        checks->Info(absl::StrCat(name, ": ", detail));
      } else {
        checks->Add(errors == 0 && row.ok == level * options.requests_per_session, name,
                    detail);
      }
      rows.push_back(std::move(row));
    }
  }
  progress->Clear();
  return rows;
}

}  // namespace flatstate::loadtest
