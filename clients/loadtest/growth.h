// Session growth shared by the sweeps that need a long-context session (memory, migration):
// deterministic prompt chunks sent through Generate with max_new_tokens = 1.
// Stateless functions; thread-compatible (use one session from one thread). Failures are the
// failed Generate's grpc::Status, returned unchanged.
#ifndef FLATSTATE_CLIENTS_LOADTEST_GROWTH_H_
#define FLATSTATE_CLIENTS_LOADTEST_GROWTH_H_

#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include "clients/loadtest/client.h"
#include "clients/loadtest/progress.h"
#include "flatstate/v1/inference.pb.h"

namespace flatstate::loadtest {

// Appends n deterministic printable prompt bytes starting at `offset` of a fixed text (token id
// == byte for the byte-level tokenizer).
void AppendPromptTokens(int64_t n, int64_t offset, flatstate::v1::GenerateRequest* req);

// Grows a persistent session from *context to `target` tokens (Generate calls of up to
// `chunk_tokens` deterministic prompt tokens with max_new_tokens = 1; the last one ends at
// target - 1 prompt tokens plus the sampled one). Updates *context from each reply's usage,
// adds the prompt tokens sent to *prefilled and the calls' wall time to *seconds, and reports
// "<label>: N/target tokens" to `progress` (may be null). Returns the first failed Generate's
// status (*context then holds the last successful point), else OK.
grpc::Status GrowSession(const Client& client, const std::string& session_id, int64_t target,
                         int64_t chunk_tokens, const std::string& label, Progress* progress,
                         int64_t* context, int64_t* prefilled, double* seconds);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_GROWTH_H_
