// Memory-vs-context sweep: for each model, grows persistent sessions (CreateSession, then long
// prompt_tokens chunks through Generate with max_new_tokens = 1) to each target context, and at
// each point measures a short decode (TTFT, inter-token latency, tokens/s), the session's
// state_bytes (GetSession) and the server's KV blocks and RSS (GetStats). Then it checks:
//   models without K/V (kv_bytes_per_token 0: the linear kinds, the recurrent families):
//     state_bytes constant (and equal to ListModels' state_bytes_per_session), session 0's
//     checkpoint (CheckpointSession, measured for these models only) the same size at every
//     context (within 16 B: the header's pending ids and partial character vary), no KV
//     blocks used, server RSS at the largest context within max(rss_tolerance, rss_slack_bytes)
//     of the RSS at the first;
//   GPU servers (GetStats device_memory_total_bytes > 0), every kind: device memory flat across
//     contexts (the KV pool is reserved on the device at start, so softmax growth shows in its
//     KV blocks, not in the device's memory);
//   models with K/V (kv_bytes_per_token > 0: softmax, and hybrids whose softmax layers keep K/V
//   beside recurrent layers): KV bytes (server kv_blocks_used delta x block bytes) == sessions'
//     state_bytes minus their fixed state (state_bytes_per_session each, 0 for pure softmax) ==
//     ceil(tokens / 16) blocks, slope == kv_bytes_per_token (flatstate softmax: == 2 x layers x
//     d_model x 4 bytes); a hybrid swept beside an all-softmax model of the same architecture,
//     layers and width: its kv_bytes_per_token == num_kv_layers / num_layers of the other's; with
//     `exhaust`, keeps growing until the pool answers RESOURCE_EXHAUSTED (bounded by the pool
//     size), then checks that a fresh linear-model Generate still succeeds, that deleting the
//     session returns its blocks and that a fresh softmax Generate succeeds.
//
// Assumes nothing else uses the server meanwhile (KV and RSS are server-wide). Thread-compatible;
// uses `client` from one thread. Failures become FAIL lines in `checks`; the sweep stops for a
// model on its first unexpected error and always deletes the sessions it created.
#ifndef FLATSTATE_CLIENTS_LOADTEST_MEMORY_SWEEP_H_
#define FLATSTATE_CLIENTS_LOADTEST_MEMORY_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "clients/loadtest/checks.h"
#include "clients/loadtest/client.h"
#include "clients/loadtest/progress.h"

namespace flatstate::loadtest {

struct MemoryOptions {
  std::vector<std::string> models;  // must be loaded on the server
  std::vector<int64_t> contexts = {1024, 4096, 16384, 65536, 262144};
  int sessions = 1;                 // sessions grown in lockstep per model
  int64_t chunk_tokens = 4096;      // prompt tokens per growth Generate
  uint32_t decode_tokens = 64;      // tokens of the measuring Generate at each point
  bool exhaust = true;              // softmax: grow past the last context until exhausted
  double rss_tolerance = 0.02;      // fraction of the first point's RSS
  int64_t rss_slack_bytes = int64_t{4} << 20;
  // GPU servers: device memory at the largest context within max(rss_tolerance x first,
  // device_slack_bytes) of the first point's. The slack covers the step workspace, which grows
  // with the largest chunk run so far (up to chunk_tokens), not with context.
  int64_t device_slack_bytes = int64_t{64} << 20;
};

// One measurement. Context is the session's context when the measuring decode started.
struct MemoryPoint {
  std::string model;
  std::string kind;
  int64_t context_tokens = 0;
  int sessions = 0;
  uint64_t state_bytes = 0;        // session 0, GetSession after the decode
  uint64_t state_bytes_total = 0;  // all sessions of this sweep
  uint64_t checkpoint_bytes = 0;   // session 0's checkpoint data (models without K/V; else 0)
  uint64_t kv_blocks_used = 0;     // server-wide
  uint64_t kv_bytes = 0;           // (kv_blocks_used - baseline) x block bytes
  uint64_t expected_kv_bytes = 0;  // softmax: sum of ceil(tokens / 16) x block bytes
  uint64_t rss_bytes = 0;
  uint64_t device_memory_bytes = 0;  // GetStats device_memory_used_bytes (0 on a CPU server)
  uint64_t device_state_bytes = 0;   // GetStats device_state_bytes
  double prefill_tokens_per_s = 0;  // growth since the previous point
  double decode_tokens_per_s = 0;
  double ttft_ms = 0;
  double itl_p50_ms = 0;
  double itl_p99_ms = 0;
};

struct MemoryModelResult {
  std::string model;
  std::string kind;
  std::vector<MemoryPoint> points;
  bool exhausted = false;          // softmax pool answered RESOURCE_EXHAUSTED
  int64_t exhausted_at_tokens = 0;  // session context when it did
  std::string error;               // first unexpected error, if any
};

std::vector<MemoryModelResult> RunMemorySweep(const Client& client, const MemoryOptions& options,
                                              Progress* progress, CheckList* checks);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_MEMORY_SWEEP_H_
