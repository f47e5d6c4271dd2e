// Soak mode of flatstate-loadtest (--mode soak): `streams` client threads keep a running server
// busy for `duration` with a random mix of Generate calls on their own sessions, throwaway
// Generates, cancellations mid-stream, short deadlines, checkpoint + restore (by inline data and
// by id; the server keeps every checkpoint file, so prune --checkpoint_dir on long runs) and
// session resets, while a sampler records the server's RSS (GetStats) every
// `sample_every`. Verdicts (CheckList): zero unexpected errors (CANCELLED and DEADLINE_EXCEEDED
// are expected for the calls that asked for them), and RSS flat after `warmup`: the mean of the
// last third of the samples within `rss_tolerance` (or `rss_slack_bytes`, the larger) of the mean
// of the first third.
//
// Thread-safety: RunSoak is one blocking call that starts and joins its own threads. Failure:
// problems are reported as FAIL checks, never thrown.
#ifndef FLATSTATE_CLIENTS_LOADTEST_SOAK_H_
#define FLATSTATE_CLIENTS_LOADTEST_SOAK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "clients/loadtest/checks.h"
#include "clients/loadtest/client.h"
#include "clients/loadtest/progress.h"

namespace flatstate::loadtest {

struct SoakOptions {
  std::vector<std::string> models;  // sessions are spread over these (round robin)
  absl::Duration duration = absl::Minutes(10);
  // Zero: a third of duration. RSS rises until the softmax KV pool's high-water mark of
  // concurrently used blocks settles (its pages are touched on first use); warm-up must cover
  // that (about 3 minutes at 64 streams on 2 cores in docs/reliability.md's runs).
  absl::Duration warmup = absl::ZeroDuration();
  int streams = 64;
  absl::Duration sample_every = absl::Seconds(1);
  double rss_tolerance = 0.02;
  int64_t rss_slack_bytes = int64_t{4} << 20;
  uint32_t max_new_tokens = 32;
  uint64_t reset_context_tokens = 512;  // a session longer than this is deleted and recreated
  uint64_t seed = 1;
};

struct RssSample {
  double t_s = 0;  // since the soak started
  uint64_t rss_bytes = 0;
  uint64_t active_sessions = 0;
  uint64_t active_streams = 0;
  uint64_t kv_blocks_used = 0;
};

struct SoakResult {
  std::map<std::string, uint64_t> calls;       // by kind ("generate", "cancel", ...)
  std::map<std::string, uint64_t> expected;    // "kind CODE" -> count (CANCELLED, DEADLINE...)
  std::map<std::string, uint64_t> unexpected;  // "kind CODE" -> count
  std::vector<std::string> first_errors;       // messages of the first few unexpected errors
  std::vector<RssSample> rss;
  uint64_t tokens = 0;
  double elapsed_s = 0;
};

SoakResult RunSoak(const Client& client, const SoakOptions& options, Progress* progress,
                   CheckList* checks);
void PrintSoakReport(const SoakResult& result);
absl::Status WriteSoakCsv(const std::string& dir, const SoakResult& result);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_SOAK_H_
