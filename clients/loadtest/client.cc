#include "clients/loadtest/client.h"

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <utility>

#include <grpcpp/generic/generic_stub.h>

#include "absl/strings/str_cat.h"
#include "clients/common/session_metadata.h"

namespace flatstate::loadtest {

namespace pb = flatstate::v1;

namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Parses a grpc.health.v1.HealthCheckResponse by hand (field 1, varint enum; SERVING = 1) so the
// load tester needs no generated health code.
bool ParseServing(const std::string& bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const unsigned key = static_cast<unsigned char>(bytes[i++]);
    if ((key & 7) != 0) return false;  // only varints expected
    uint64_t v = 0;
    for (int shift = 0; i < bytes.size() && shift < 64; shift += 7) {
      const unsigned char b = static_cast<unsigned char>(bytes[i++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    if ((key >> 3) == 1) return v == 1;
  }
  return false;  // UNKNOWN (0) is encoded as an empty message
}

}  // namespace

double GenerateResult::DecodeTokensPerSecond() const {
  if (tokens < 2) return 0;
  const double s = usage.decode_us() > 0 ? static_cast<double>(usage.decode_us()) * 1e-6 : decode_s;
  return s > 0 ? static_cast<double>(tokens - 1) / s : 0;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls || !options.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      std::ifstream in(options.tls_ca_file);
      if (!in) {
        return absl::InvalidArgumentError(
            absl::StrCat("tls_ca_file: cannot read '", options.tls_ca_file, "'"));
      }
      std::stringstream ss;
      ss << in.rdbuf();
      ssl.pem_root_certs = ss.str();
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(options.server, creds, args);
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(pb::Inference::NewStub(channel_)) {}

void Client::Prepare(grpc::ClientContext* ctx, std::string_view session_id) const {
  clients::AddSessionMetadata(session_id, ctx);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(options_.deadline));
  if (!options_.auth_token.empty()) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options_.auth_token));
  }
}

GenerateResult Client::Generate(const pb::GenerateRequest& request) const {
  GenerateResult r;
  grpc::ClientContext ctx;
  Prepare(&ctx, request.session_id());
  const SteadyClock::time_point start = SteadyClock::now();
  SteadyClock::time_point first, last;
  std::unique_ptr<grpc::ClientReader<pb::GenerateResponse>> reader =
      stub_->Generate(&ctx, request);
  pb::GenerateResponse msg;
  while (reader->Read(&msg)) {
    const SteadyClock::time_point now = SteadyClock::now();
    const int n = msg.token_ids_size();
    for (int i = 0; i < n; ++i) {
      if (r.tokens == 0) {
        first = now;
        r.ttft_s = Seconds(start, now);
      } else {
        r.itl_s.push_back(i == 0 ? Seconds(last, now) : 0.0);
      }
      ++r.tokens;
      r.token_ids.push_back(msg.token_ids(i));
    }
    if (n > 0) last = now;
    if (msg.has_usage()) r.usage = msg.usage();
    if (!msg.session_id().empty()) r.session_id = msg.session_id();
  }
  r.status = reader->Finish();
  r.total_s = Seconds(start, SteadyClock::now());
  if (r.tokens > 0) r.decode_s = Seconds(first, last);
  return r;
}

grpc::Status Client::CreateSession(const std::string& model, pb::Session* out) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  pb::CreateSessionRequest req;
  req.set_model(model);
  req.mutable_sampling()->set_temperature(0);  // greedy: reproducible load
  return stub_->CreateSession(&ctx, req, out);
}

grpc::Status Client::GetSession(const std::string& session_id, pb::Session* out) const {
  grpc::ClientContext ctx;
  Prepare(&ctx, session_id);
  pb::GetSessionRequest req;
  req.set_session_id(session_id);
  return stub_->GetSession(&ctx, req, out);
}

grpc::Status Client::CheckpointSession(const std::string& session_id,
                                       pb::Checkpoint* out) const {
  grpc::ClientContext ctx;
  Prepare(&ctx, session_id);
  pb::CheckpointSessionRequest req;
  req.set_session_id(session_id);
  return stub_->CheckpointSession(&ctx, req, out);
}

grpc::Status Client::DeleteSession(const std::string& session_id) const {
  grpc::ClientContext ctx;
  Prepare(&ctx, session_id);
  pb::DeleteSessionRequest req;
  req.set_session_id(session_id);
  pb::DeleteSessionResponse resp;
  return stub_->DeleteSession(&ctx, req, &resp);
}

grpc::Status Client::GetStats(pb::ServerStats* out) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return stub_->GetStats(&ctx, pb::GetStatsRequest(), out);
}

grpc::Status Client::ListModels(pb::ListModelsResponse* out) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return stub_->ListModels(&ctx, pb::ListModelsRequest(), out);
}

grpc::Status Client::Health(bool* serving) const {
  *serving = false;
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Slice empty_message("");  // HealthCheckRequest{service: ""} encodes as zero bytes
  grpc::ByteBuffer request(&empty_message, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status s = done.get_future().get();
  if (!s.ok()) return s;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "unreadable health response");
  }
  std::string bytes;
  for (const grpc::Slice& sl : slices) {
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  *serving = ParseServing(bytes);
  return s;
}

const pb::ModelInfo* FindModel(const pb::ListModelsResponse& models, std::string_view name) {
  for (const pb::ModelInfo& m : models.models()) {
    if (m.name() == name) return &m;
  }
  return nullptr;
}

std::string CodeName(grpc::StatusCode code) {
  // gRPC and absl share the canonical code numbering; absl owns the one name table.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace flatstate::loadtest
