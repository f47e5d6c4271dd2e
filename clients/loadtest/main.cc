// flatstate-loadtest: load tester of a running flatstate-server (docs/loadtest.md).
//
//   flatstate-loadtest --server localhost:50051 --mode memory --csv_dir loadtest-out
//       --models shakespeare-linear-elu,shakespeare-softmax --contexts 1k,4k,16k,64k,256k
//   flatstate-loadtest --mode concurrency --concurrency 1,2,4,8,16,32,64 --csv_dir loadtest-out
//   flatstate-loadtest --mode health --deadline 3s      # exit 0 iff the server is SERVING
//   flatstate-loadtest --mode soak --duration 10m --streams 64   # docs/reliability.md
//   flatstate-loadtest --mode migration --server A --target B --contexts 1k,16k,64k
//   flatstate-loadtest --mode multiturn --server A [--target B] --conversations 8 --turns 10
//       # two replicas sharing a session store (docs/cluster.md)
//
// Prints one PASS/FAIL line per check; exits 0 when all pass, 1 when one fails, 2 on bad usage
// or an unreachable server. Talks only to --server (and, in migration mode, --target).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clients/loadtest/checks.h"
#include "clients/loadtest/client.h"
#include "clients/loadtest/concurrency_sweep.h"
#include "clients/loadtest/memory_sweep.h"
#include "clients/loadtest/migration.h"
#include "clients/loadtest/multiturn.h"
#include "clients/loadtest/plots.h"
#include "clients/loadtest/progress.h"
#include "clients/loadtest/report.h"
#include "clients/loadtest/soak.h"

ABSL_FLAG(std::string, server, "localhost:50051", "flatstate-server address (host:port)");
ABSL_FLAG(std::string, mode, "memory",
          "memory | concurrency | all | health | soak | migration | multiturn");
ABSL_FLAG(std::string, target, "",
          "migration mode: the replica sessions move to (shares --server's session store); "
          "multiturn mode: a second server to run the same conversations on (e.g. without the "
          "prefix cache)");
ABSL_FLAG(std::vector<std::string>, multiturn_labels,
          std::vector<std::string>({"server", "target"}),
          "multiturn mode: names of --server and --target in the report");
ABSL_FLAG(int, conversations, 8, "multiturn mode: concurrent conversations");
ABSL_FLAG(int, turns, 10, "multiturn mode: turns per conversation");
ABSL_FLAG(int, message_tokens, 200, "multiturn mode: user message tokens per turn");
ABSL_FLAG(int, reply_tokens, 64, "multiturn mode: max_new_tokens per turn");
ABSL_FLAG(std::string, auth_token, "", "bearer token (the server's --auth_token)");
ABSL_FLAG(absl::Duration, deadline, absl::Minutes(10), "deadline of every RPC");
ABSL_FLAG(bool, tls, false, "connect with TLS (system roots, or --tls_ca)");
ABSL_FLAG(std::string, tls_ca, "", "PEM root certificates for TLS (implies --tls)");
ABSL_FLAG(absl::Duration, wait_for_server, absl::ZeroDuration(),
          "first wait up to this long for the health service to say SERVING");
ABSL_FLAG(std::vector<std::string>, models, {},
          "models to sweep (default: every model the server lists)");
ABSL_FLAG(std::vector<std::string>, contexts, std::vector<std::string>({"1k", "4k", "16k", "64k",
                                                                          "256k"}),
          "memory and migration modes: context lengths in tokens (k = 1024)");
ABSL_FLAG(int, sessions, 1, "memory mode: sessions grown per model");
ABSL_FLAG(int, chunk_tokens, 4096,
          "memory and migration modes: prompt tokens per growth Generate");
ABSL_FLAG(int, decode_tokens, 64, "memory mode: tokens decoded at each context to time decode");
ABSL_FLAG(bool, exhaust, true,
          "memory mode: grow softmax models past the last context until RESOURCE_EXHAUSTED");
ABSL_FLAG(double, rss_tolerance, 0.02,
          "memory mode: allowed RSS change for linear kinds; soak mode: allowed RSS growth");
ABSL_FLAG(int, rss_slack_mib, 4, "memory and soak modes: allowed RSS change floor (MiB)");
ABSL_FLAG(std::vector<std::string>, concurrency,
          std::vector<std::string>({"1", "2", "4", "8", "16", "32", "64"}),
          "concurrency mode: concurrent session counts");
ABSL_FLAG(std::vector<std::string>, concurrency_models, {},
          "concurrency mode: models (default: the first of --models)");
ABSL_FLAG(int, requests_per_session, 4, "concurrency mode: Generates per session");
ABSL_FLAG(int, prompt_tokens, 64, "concurrency mode: prompt tokens per Generate");
ABSL_FLAG(int, new_tokens, 64, "concurrency mode: max_new_tokens per Generate");
ABSL_FLAG(bool, allow_errors, false, "concurrency mode: report errors without failing");
ABSL_FLAG(absl::Duration, duration, absl::Minutes(10), "soak mode: how long to run");
ABSL_FLAG(int, streams, 64, "soak mode: concurrent client streams");
ABSL_FLAG(absl::Duration, warmup, absl::ZeroDuration(),
          "soak mode: RSS is judged after this (0: a third of --duration)");
ABSL_FLAG(std::string, csv_dir, "", "write CSV files (and plots) into this folder");
ABSL_FLAG(bool, plots, true, "with --csv_dir: draw PNG plots with gnuplot");
ABSL_FLAG(bool, progress, true, "progress bar on stderr (only when stderr is a terminal)");

namespace fl = flatstate::loadtest;

namespace {

bool ParseCount(const std::string& text, int64_t* out) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  int64_t mult = 1;
  if (!s.empty() && s.back() == 'k') {
    mult = 1024;
    s.pop_back();
  } else if (!s.empty() && s.back() == 'm') {
    mult = 1024 * 1024;
    s.pop_back();
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v <= 0) return false;
  *out = v * mult;
  return true;
}

bool ParseCounts(const std::vector<std::string>& in, const char* flag, std::vector<int64_t>* out) {
  for (const std::string& s : in) {
    int64_t v = 0;
    if (!ParseCount(s, &v)) {
      std::fprintf(stderr, "error: --%s: '%s' is not a positive count\n", flag, s.c_str());
      return false;
    }
    out->push_back(v);
  }
  return true;
}

// Polls the health service until SERVING or `wait` passes (at most one probe a second).
bool WaitServing(const fl::Client& client, absl::Duration wait) {
  const absl::Time end = absl::Now() + wait;
  for (int i = 0; i < 3600; ++i) {
    bool serving = false;
    if (client.Health(&serving).ok() && serving) return true;
    if (absl::Now() >= end) return false;
    absl::SleepFor(absl::Seconds(1));
  }
  return false;
}

int RunHealth(const fl::Client& client) {
  bool serving = false;
  grpc::Status s = client.Health(&serving);
  if (!s.ok()) {
    std::printf("NOT_SERVING %s: %s\n", fl::CodeName(s.error_code()).c_str(), s.error_message().c_str());
    return 1;
  }
  std::printf("%s\n", serving ? "SERVING" : "NOT_SERVING");
  return serving ? 0 : 1;
}

void Emit(const std::string& dir, bool plots, fl::CheckList* checks,
          const std::function<absl::Status()>& csv,
          const std::function<absl::StatusOr<std::vector<std::string>>()>& plot) {
  if (dir.empty()) return;
  if (absl::Status s = csv(); !s.ok()) {
    checks->Add(false, "csv", std::string(s.message()));
    return;
  }
  if (!plots) return;
  absl::StatusOr<std::vector<std::string>> pngs = plot();
  checks->Add(pngs.ok(), "plots",
              pngs.ok() ? absl::StrJoin(*pngs, " ") : std::string(pngs.status().message()));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "flatstate-loadtest --server HOST:PORT "
      "--mode memory|concurrency|all|health|soak|migration|multiturn [flags]");
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "memory" && mode != "concurrency" && mode != "all" && mode != "health" &&
      mode != "soak" && mode != "migration" && mode != "multiturn") {
    std::fprintf(stderr,
                 "error: --mode must be memory, concurrency, all, health, soak, migration or "
                 "multiturn\n");
    return 2;
  }
  if (mode == "migration" && absl::GetFlag(FLAGS_target).empty()) {
    std::fprintf(stderr, "error: --mode migration needs --target (the second replica)\n");
    return 2;
  }
  fl::ClientOptions co;
  co.server = absl::GetFlag(FLAGS_server);
  co.auth_token = absl::GetFlag(FLAGS_auth_token);
  co.deadline = absl::GetFlag(FLAGS_deadline);
  co.tls = absl::GetFlag(FLAGS_tls);
  co.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  absl::StatusOr<std::unique_ptr<fl::Client>> client = fl::Client::Connect(co);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
    return 2;
  }
  if (const absl::Duration w = absl::GetFlag(FLAGS_wait_for_server); w > absl::ZeroDuration()) {
    if (!WaitServing(**client, w)) {
      std::fprintf(stderr, "error: %s not SERVING after %s\n", co.server.c_str(),
                   absl::FormatDuration(w).c_str());
      return 2;
    }
  }
  if (mode == "health") return RunHealth(**client);

  fl::MemoryOptions mo;
  fl::ConcurrencyOptions cc;
  std::vector<int64_t> levels;
  mo.contexts.clear();
  if (!ParseCounts(absl::GetFlag(FLAGS_contexts), "contexts", &mo.contexts) ||
      !ParseCounts(absl::GetFlag(FLAGS_concurrency), "concurrency", &levels)) {
    return 2;
  }
  std::sort(mo.contexts.begin(), mo.contexts.end());
  mo.contexts.erase(std::unique(mo.contexts.begin(), mo.contexts.end()), mo.contexts.end());
  cc.levels.clear();
  for (int64_t l : levels) cc.levels.push_back(static_cast<int>(std::min<int64_t>(l, 1024)));
  mo.models = absl::GetFlag(FLAGS_models);
  if (mo.models.empty()) {
    flatstate::v1::ListModelsResponse lm;
    if (grpc::Status s = (*client)->ListModels(&lm); !s.ok()) {
      std::fprintf(stderr, "error: ListModels on %s: %s %s\n", co.server.c_str(),
                   fl::CodeName(s.error_code()).c_str(), s.error_message().c_str());
      return 2;
    }
    for (const auto& m : lm.models()) mo.models.push_back(m.name());
  }
  mo.sessions = std::max(1, absl::GetFlag(FLAGS_sessions));
  mo.chunk_tokens = std::max(1, absl::GetFlag(FLAGS_chunk_tokens));
  mo.decode_tokens = static_cast<uint32_t>(std::max(2, absl::GetFlag(FLAGS_decode_tokens)));
  mo.exhaust = absl::GetFlag(FLAGS_exhaust);
  mo.rss_tolerance = absl::GetFlag(FLAGS_rss_tolerance);
  mo.rss_slack_bytes = int64_t{absl::GetFlag(FLAGS_rss_slack_mib)} << 20;
  cc.models = absl::GetFlag(FLAGS_concurrency_models);
  if (cc.models.empty() && !mo.models.empty()) cc.models.push_back(mo.models.front());
  cc.requests_per_session = std::max(1, absl::GetFlag(FLAGS_requests_per_session));
  cc.prompt_tokens = std::max(1, absl::GetFlag(FLAGS_prompt_tokens));
  cc.new_tokens = static_cast<uint32_t>(std::max(1, absl::GetFlag(FLAGS_new_tokens)));
  cc.allow_errors = absl::GetFlag(FLAGS_allow_errors);

  const std::string dir = absl::GetFlag(FLAGS_csv_dir);
  if (!dir.empty()) {
    if (absl::Status s = fl::EnsureDir(dir); !s.ok()) {
      std::fprintf(stderr, "error: --csv_dir: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  const bool plots = absl::GetFlag(FLAGS_plots);
  fl::Progress progress(absl::GetFlag(FLAGS_progress) && isatty(STDERR_FILENO));
  fl::CheckList checks(&progress);
  std::printf("flatstate-loadtest: server %s, mode %s, models %s\n", co.server.c_str(),
              mode.c_str(), absl::StrJoin(mo.models, ",").c_str());
  std::fflush(stdout);

  if (mode == "memory" || mode == "all") {
    std::vector<fl::MemoryModelResult> results = fl::RunMemorySweep(**client, mo, &progress,
                                                                    &checks);
    fl::PrintMemoryTable(results);
    Emit(dir, plots, &checks, [&] { return fl::WriteMemoryCsv(dir, results); },
         [&] { return fl::PlotMemory(dir, results); });
  }
  if (mode == "concurrency" || mode == "all") {
    std::vector<fl::ConcurrencyRow> rows = fl::RunConcurrencySweep(**client, cc, &progress,
                                                                   &checks);
    fl::PrintConcurrencyTable(rows);
    Emit(dir, plots, &checks, [&] { return fl::WriteConcurrencyCsv(dir, rows); },
         [&] { return fl::PlotConcurrency(dir, rows); });
  }
  // The client of --target (migration and multiturn modes); prints why it cannot be made.
  auto connect_target = [&co]() {
    fl::ClientOptions to = co;
    to.server = absl::GetFlag(FLAGS_target);
    absl::StatusOr<std::unique_ptr<fl::Client>> target = fl::Client::Connect(to);
    if (!target.ok()) {
      std::fprintf(stderr, "error: --target: %s\n", target.status().ToString().c_str());
    }
    return target;
  };
  if (mode == "migration") {
    absl::StatusOr<std::unique_ptr<fl::Client>> target = connect_target();
    if (!target.ok()) return 2;
    fl::MigrationOptions mg;
    mg.models = mo.models;
    mg.contexts = mo.contexts;
    mg.chunk_tokens = mo.chunk_tokens;
    const std::vector<fl::MigrationRow> rows =
        fl::RunMigration(**client, **target, mg, &progress, &checks);
    fl::PrintMigrationTable(rows);
    Emit(dir, plots, &checks, [&] { return fl::WriteMigrationCsv(dir, rows); },
         [&] { return fl::PlotMigration(dir, rows); });
  }
  if (mode == "multiturn") {
    fl::MultiturnOptions mt;
    mt.models = mo.models;
    mt.conversations = std::max(1, absl::GetFlag(FLAGS_conversations));
    mt.turns = std::max(1, absl::GetFlag(FLAGS_turns));
    mt.message_tokens = std::max(1, absl::GetFlag(FLAGS_message_tokens));
    mt.reply_tokens = static_cast<uint32_t>(std::max(1, absl::GetFlag(FLAGS_reply_tokens)));
    std::vector<std::string> labels = absl::GetFlag(FLAGS_multiturn_labels);
    labels.resize(2, "target");
    std::vector<fl::MultiturnRow> rows =
        fl::RunMultiturn(**client, labels[0], mt, &progress, &checks);
    if (!absl::GetFlag(FLAGS_target).empty()) {
      absl::StatusOr<std::unique_ptr<fl::Client>> target = connect_target();
      if (!target.ok()) return 2;
      const std::vector<fl::MultiturnRow> more =
          fl::RunMultiturn(**target, labels[1], mt, &progress, &checks);
      rows.insert(rows.end(), more.begin(), more.end());
    }
    fl::PrintMultiturnTable(rows);
    Emit(
        dir, plots, &checks, [&] { return fl::WriteMultiturnCsv(dir, rows); },
        [&] { return fl::PlotMultiturn(dir, rows); });
  }
  if (mode == "soak") {
    fl::SoakOptions so;
    so.models = mo.models;
    so.duration = absl::GetFlag(FLAGS_duration);
    so.warmup = absl::GetFlag(FLAGS_warmup);
    so.streams = absl::GetFlag(FLAGS_streams);
    so.rss_tolerance = absl::GetFlag(FLAGS_rss_tolerance);
    so.rss_slack_bytes = int64_t{absl::GetFlag(FLAGS_rss_slack_mib)} << 20;
    const fl::SoakResult r = fl::RunSoak(**client, so, &progress, &checks);
    fl::PrintSoakReport(r);
    if (!dir.empty()) {
      const absl::Status s = fl::WriteSoakCsv(dir, r);
      checks.Add(s.ok(), "csv", s.ok() ? dir + "/soak_rss.csv" : std::string(s.message()));
    }
  }
  std::printf("%s: %d passed, %d failed\n", checks.failed() == 0 ? "PASS" : "FAIL",
              checks.passed(), checks.failed());
  return checks.failed() == 0 ? 0 : 1;
}
