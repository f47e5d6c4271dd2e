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

// Prompts are token ids, never text: every model takes ids (a Hugging Face folder has no text
// tokenizer yet), and ids are generated valid for the model's vocabulary (ListModels
// vocab_size). `id` (an ASCII byte of the load tester's fixed texts) as an id of a vocabulary of
// `vocab` ids: unchanged when it fits (so byte-level models see the same text as before), else
// id % vocab.
int32_t FitToVocab(int32_t id, int64_t vocab);
// The vocab_size ListModels reports for `model` (the default model when empty); 256 (byte-level)
// when the call fails or the model is not listed (the request then fails on its own).
int64_t VocabOf(const Client& client, const std::string& model);

// Appends n deterministic prompt tokens starting at `offset` of a fixed English text, valid for
// a vocabulary of `vocab` ids (FitToVocab).
void AppendPromptTokens(int64_t n, int64_t offset, int64_t vocab,
                        flatstate::v1::GenerateRequest* req);

// Grows a persistent session (of a model with `vocab` ids) from *context to `target` tokens
// (Generate calls of up to
// `chunk_tokens` deterministic prompt tokens with max_new_tokens = 1; the last one ends at
// target - 1 prompt tokens plus the sampled one). Updates *context from each reply's usage,
// adds the prompt tokens sent to *prefilled and the calls' wall time to *seconds, and reports
// "<label>: N/target tokens" to `progress` (may be null). Returns the first failed Generate's
// status (*context then holds the last successful point), else OK.
grpc::Status GrowSession(const Client& client, const std::string& session_id, int64_t vocab,
                         int64_t target, int64_t chunk_tokens, const std::string& label,
                         Progress* progress,
                         int64_t* context, int64_t* prefilled, double* seconds);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_GROWTH_H_
