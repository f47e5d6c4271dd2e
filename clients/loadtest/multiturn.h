// Multi-turn chat load (docs/loadtest.md, "Multi-turn mode"; docs/benchmarks.md): N concurrent
// conversations of T turns each, sent the way stateless OpenAI-style clients send them. Every turn
// is one Generate on a throwaway session (no session_id) whose prompt is the whole history (every
// earlier message and reply as token ids) plus a new user message; the reply is appended to the
// history. Per turn number it reports time to first token and the prompt tokens the server
// prefilled (prompt tokens minus Usage.cached_prompt_tokens: what the prefix cache restored).
// Run against a server with the prefix cache and one without (--target) to compare.
//
// Messages are deterministic letters (conversation c, turn t), replies greedy, so two servers
// with the same models see the same conversations. Thread-safe through Client; runs one thread per
// conversation. Failed RPCs are counted and become FAIL lines in `checks`.
#ifndef FLATSTATE_CLIENTS_LOADTEST_MULTITURN_H_
#define FLATSTATE_CLIENTS_LOADTEST_MULTITURN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "clients/loadtest/checks.h"
#include "clients/loadtest/client.h"
#include "clients/loadtest/progress.h"

namespace flatstate::loadtest {

struct MultiturnOptions {
  std::vector<std::string> models;
  int conversations = 8;  // concurrent
  int turns = 10;
  int message_tokens = 200;    // user message per turn
  uint32_t reply_tokens = 64;  // max_new_tokens per turn
};

// One (server label, model, turn number) over every conversation.
struct MultiturnRow {
  std::string label;  // which server ("server", "target", or --multiturn_labels)
  std::string model;
  int turn = 0;  // 1-based
  int requests = 0, ok = 0;
  double prompt_tokens = 0;   // mean
  double cached_tokens = 0;   // mean Usage.cached_prompt_tokens
  double prefill_tokens = 0;  // mean prompt - cached
  double ttft_p50_ms = 0, ttft_mean_ms = 0, ttft_p99_ms = 0;
};

// Runs the conversations for each model on `client`, one model after the other. Checks: every
// request succeeds; when the server reported cached tokens, the prefill per turn stays flat (from
// turn 2 on, no turn's mean prefill exceeds 1.5 x turn 2's).
std::vector<MultiturnRow> RunMultiturn(const Client& client, const std::string& label,
                                       const MultiturnOptions& options, Progress* progress,
                                       CheckList* checks);

// <dir>/multiturn.csv: one row per (label, model, turn).
absl::Status WriteMultiturnCsv(const std::string& dir, const std::vector<MultiturnRow>& rows);
void PrintMultiturnTable(const std::vector<MultiturnRow>& rows);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_MULTITURN_H_
