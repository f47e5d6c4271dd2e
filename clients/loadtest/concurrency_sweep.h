// Concurrency sweep: for each model and each level N, N client threads each create a session
// and run `requests_per_session` Generates on it (prompt_tokens prompt tokens, new_tokens new
// tokens each), then delete it. Per level it reports aggregate generated tokens/s (all tokens /
// wall time of the level), TTFT and inter-token latency p50/p99 over all requests, and error
// counts by gRPC status code; a level with errors is a FAIL unless allow_errors.
//
// Thread-safety: RunConcurrencySweep is called from one thread and spawns its own workers, joined
// before it returns. Failures are counted, never thrown; `client` must be usable from many
// threads (it is).
#ifndef FLATSTATE_CLIENTS_LOADTEST_CONCURRENCY_SWEEP_H_
#define FLATSTATE_CLIENTS_LOADTEST_CONCURRENCY_SWEEP_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "clients/loadtest/checks.h"
#include "clients/loadtest/client.h"
#include "clients/loadtest/progress.h"

namespace flatstate::loadtest {

struct ConcurrencyOptions {
  std::vector<std::string> models;
  std::vector<int> levels = {1, 2, 4, 8, 16, 32, 64};
  int requests_per_session = 4;
  int prompt_tokens = 64;
  uint32_t new_tokens = 64;
  bool allow_errors = false;
};

struct ConcurrencyRow {
  std::string model;
  int concurrency = 0;
  int requests = 0;  // Generates attempted
  int ok = 0;
  std::map<std::string, int> errors;  // status code name -> count (CreateSession included)
  std::string first_error;            // "CODE: message" of the first error, if any
  uint64_t tokens = 0;
  double wall_s = 0;
  double tokens_per_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;
  uint64_t rss_bytes = 0;  // GetStats after the level

  int error_count() const;
  std::string ErrorsString() const;  // "RESOURCE_EXHAUSTED:3;UNAVAILABLE:1" or ""
};

std::vector<ConcurrencyRow> RunConcurrencySweep(const Client& client,
                                                const ConcurrencyOptions& options,
                                                Progress* progress, CheckList* checks);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_CONCURRENCY_SWEEP_H_
