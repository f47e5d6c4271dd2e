// Request validation and conversion for the transport threads: everything that can be checked
// without touching a session. Stateless; thread-safe. Failures are InvalidArgument (NotFound for a
// malformed session id) with a message naming the field.
#ifndef FLATSTATE_SERVER_VALIDATION_H_
#define FLATSTATE_SERVER_VALIDATION_H_

#include <optional>

#include "absl/status/statusor.h"
#include "flatstate/v1/inference.pb.h"
#include "server/loop_types.h"
#include "server/model_registry.h"
#include "server/options.h"
#include "server/session_store.h"

namespace flatstate::server {

// proto -> engine sampling params (top_p 0 means "unset" = 1); validated.
absl::StatusOr<SamplingParams> ConvertSampling(const flatstate::v1::SamplingParams& p);

absl::StatusOr<GenerateJob> ValidateGenerate(const flatstate::v1::GenerateRequest& req,
                                             const ModelRegistry& models,
                                             const ServerOptions& options);

// A model name that must be loaded (empty is fine: the default).
absl::Status ValidateModelName(const std::string& model, const ModelRegistry& models);

// A session id that is not 32 lower-case hex characters cannot exist: NotFound.
absl::Status ValidateSessionId(const std::string& id);

// The stored checkpoint `id` (a restore's checkpoint_id), read from `store` on the calling
// transport thread: the I/O stays off the engine loop. InvalidArgument naming checkpoint_id for a
// malformed id, else the store's status (NotFound for an unknown one).
absl::StatusOr<std::string> ReadCheckpointById(const std::string& id, const SessionStore& store);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_VALIDATION_H_
