// Client: a thin, measuring wrapper over the flatstate.v1.Inference stub (and grpc.health.v1)
// for the load tester.
//
// Ownership: owns its channel and stub. Thread-safety: every method is thread-safe (gRPC stubs
// are); concurrent calls share one channel. Failure: RPC methods return the grpc::Status of the
// call (never throw); Connect fails only on bad TLS options (unreadable CA file).
// Every call carries the configured deadline and, if set, "authorization: Bearer <token>"; a
// call that names a session also carries "x-flatstate-session: <id>" (proxy affinity,
// clients/common/session_metadata.h).
#ifndef FLATSTATE_CLIENTS_LOADTEST_CLIENT_H_
#define FLATSTATE_CLIENTS_LOADTEST_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flatstate/v1/inference.grpc.pb.h"

namespace flatstate::loadtest {

struct ClientOptions {
  std::string server = "localhost:50051";
  std::string auth_token;                      // empty: no authorization metadata
  absl::Duration deadline = absl::Minutes(10);  // per RPC
  bool tls = false;                             // TLS with the system roots (or tls_ca_file)
  std::string tls_ca_file;                      // PEM roots; implies tls
};

// What one Generate stream looked like from the client side.
struct GenerateResult {
  grpc::Status status;
  uint64_t tokens = 0;          // generated token ids received
  std::vector<int32_t> token_ids;  // those ids, in order
  double ttft_s = -1;           // call start to the first token (-1: none arrived)
  double total_s = 0;           // call start to the end of the stream
  double decode_s = 0;          // first token to last token as this client received them
  std::vector<double> itl_s;    // one gap per token after the first (coalesced tokens: 0)
  flatstate::v1::Usage usage;   // from the final message (zero if none)
  std::string session_id;       // from the final message

  bool ok() const { return status.ok(); }
  // Decode rate: (tokens - 1) over the server's decode time (Usage.decode_us) when it sent one,
  // else over decode_s (an older server; a fast model's tokens may arrive in one burst, which
  // makes that rate meaningless); 0 with fewer than two tokens.
  double DecodeTokensPerSecond() const;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  // Runs one streaming Generate to completion and times every token message.
  GenerateResult Generate(const flatstate::v1::GenerateRequest& request) const;

  grpc::Status CreateSession(const std::string& model, flatstate::v1::Session* out) const;
  grpc::Status GetSession(const std::string& session_id, flatstate::v1::Session* out) const;
  grpc::Status DeleteSession(const std::string& session_id) const;
  // CheckpointSession: the session's checkpoint (inline data; the server also saves it).
  grpc::Status CheckpointSession(const std::string& session_id,
                                 flatstate::v1::Checkpoint* out) const;
  grpc::Status GetStats(flatstate::v1::ServerStats* out) const;
  grpc::Status ListModels(flatstate::v1::ListModelsResponse* out) const;
  // grpc.health.v1.Health/Check for the whole server (service ""); *serving is true for SERVING.
  grpc::Status Health(bool* serving) const;

  const ClientOptions& options() const { return options_; }
  // The shared channel, for modes that drive calls themselves (soak: cancellation, deadlines).
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);
  void Prepare(grpc::ClientContext* ctx, std::string_view session_id = {}) const;

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<flatstate::v1::Inference::Stub> stub_;
};

// "RESOURCE_EXHAUSTED" etc.
std::string CodeName(grpc::StatusCode code);

// The entry of `models` named `name`, or nullptr; points into `models`.
const flatstate::v1::ModelInfo* FindModel(const flatstate::v1::ListModelsResponse& models,
                                          std::string_view name);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_CLIENT_H_
