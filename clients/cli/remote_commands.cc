// flatstate-cli server commands over gRPC (flatstate.v1.Inference and grpc.health.v1).
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "clients/cli/flags.h"
#include "clients/common/session_metadata.h"
#include "flatstate/v1/inference.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace flatstate::cli {
namespace {

namespace pb = flatstate::v1;

int Usage(const std::string& what) {
  std::cerr << "usage: " << what << "\n";
  return 2;
}

int Fail(const grpc::Status& s) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                 "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                 "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                 "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int c = static_cast<int>(s.error_code());
  std::cerr << "error: " << (c >= 0 && c <= 16 ? kNames[c] : "UNKNOWN") << ": "
            << s.error_message() << "\n";
  return 1;
}

std::shared_ptr<grpc::Channel> MakeChannel() {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  const std::string ca = absl::GetFlag(FLAGS_tls_ca);
  if (!ca.empty() || absl::GetFlag(FLAGS_tls)) {
    grpc::SslCredentialsOptions o;
    if (!ca.empty()) {
      std::ifstream in(ca);
      std::stringstream ss;
      ss << in.rdbuf();
      o.pem_root_certs = ss.str();
    }
    creds = grpc::SslCredentials(o);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(absl::GetFlag(FLAGS_server), creds, args);
}

// Auth token, deadline and, for a call that names a session, the affinity metadata.
void Prepare(grpc::ClientContext* ctx, std::string_view session_id = {}) {
  clients::AddSessionMetadata(session_id, ctx);
  if (const std::string t = absl::GetFlag(FLAGS_auth_token); !t.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + t);
  }
  if (const double s = absl::GetFlag(FLAGS_timeout); s > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
  }
}

void FillSampling(pb::SamplingParams* p) {
  p->set_temperature(absl::GetFlag(FLAGS_temperature));
  p->set_top_k(absl::GetFlag(FLAGS_top_k));
  p->set_top_p(absl::GetFlag(FLAGS_top_p));
  p->set_seed(absl::GetFlag(FLAGS_seed));
}

void PrintSession(const pb::Session& s) {
  std::cout << "session_id: " << s.session_id() << "\nmodel: " << s.model()
            << "\nattention_kind: " << s.attention_kind()
            << "\ncontext_tokens: " << s.context_tokens() << "\nstate_bytes: " << s.state_bytes()
            << "\ngenerating: " << (s.generating() ? "true" : "false")
            << "\nevicted: " << (s.evicted() ? "true" : "false") << "\n";
}

int Generate(pb::Inference::Stub* stub) {
  pb::GenerateRequest req;
  req.set_model(absl::GetFlag(FLAGS_model));
  req.set_session_id(absl::GetFlag(FLAGS_session));
  if (!absl::GetFlag(FLAGS_prompt_tokens).empty()) {
    absl::StatusOr<std::vector<int32_t>> ids =
        ParseTokenIds(absl::GetFlag(FLAGS_prompt_tokens), "prompt_tokens");
    if (!ids.ok()) {
      std::cerr << "error: " << ids.status().message() << "\n";
      return 2;
    }
    for (int32_t id : *ids) req.add_prompt_tokens(id);
  } else {
    req.set_prompt(absl::GetFlag(FLAGS_prompt));
  }
  req.set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  // A new throwaway session samples with the flags; a session keeps its own params unless the
  // sampling flags are given explicitly.
  if (req.session_id().empty() || SamplingFlagsSet()) FillSampling(req.mutable_sampling());
  for (const std::string& s : absl::GetFlag(FLAGS_stop)) req.add_stop(s);
  grpc::ClientContext ctx;
  Prepare(&ctx, req.session_id());
  auto reader = stub->Generate(&ctx, req);
  pb::GenerateResponse msg, last;
  bool first = true, any_text = false;
  std::vector<int32_t> ids;
  while (reader->Read(&msg)) {
    if (first && req.session_id().empty()) std::cout << req.prompt();
    first = false;
    std::cout << msg.text() << std::flush;
    any_text = any_text || !msg.text().empty();
    ids.insert(ids.end(), msg.token_ids().begin(), msg.token_ids().end());
    if (msg.has_usage()) last = msg;
  }
  // A model whose tokenizer knows no text (Hugging Face folders, for now) streams ids only.
  if (!any_text && !ids.empty()) {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  }
  if (!first) std::cout << std::endl;
  grpc::Status s = reader->Finish();
  // A stream that ran and then failed (SHUTDOWN, KV_POOL_FULL, ENGINE_ERROR) still carries its
  // final message: say why it ended and what it had done, then the error.
  if (absl::GetFlag(FLAGS_stats) || (!s.ok() && last.has_usage())) {
    std::cerr << "[" << pb::FinishReason_Name(last.finish_reason()) << "] session "
              << last.session_id() << ": prompt " << last.usage().prompt_tokens()
              << " tokens, generated " << last.usage().generated_tokens() << ", context "
              << last.usage().context_tokens() << ", state " << last.usage().state_bytes()
              << " bytes\n";
  }
  if (!s.ok()) return Fail(s);
  return 0;
}

int SessionCmd(pb::Inference::Stub* stub, const std::vector<std::string>& args) {
  const std::string usage = "flatstate-cli session create [--model M] | info ID | delete ID";
  if (args.size() < 2) return Usage(usage);
  grpc::ClientContext ctx;
  // create names no session; info and delete name args[2].
  Prepare(&ctx, args[1] != "create" && args.size() >= 3 ? std::string_view(args[2]) : "");
  pb::Session s;
  if (args[1] == "create") {
    pb::CreateSessionRequest req;
    req.set_model(absl::GetFlag(FLAGS_model));
    if (SamplingFlagsSet()) FillSampling(req.mutable_sampling());
    grpc::Status st = stub->CreateSession(&ctx, req, &s);
    if (!st.ok()) return Fail(st);
    PrintSession(s);
    return 0;
  }
  if (args.size() < 3) return Usage(usage);
  if (args[1] == "info") {
    pb::GetSessionRequest req;
    req.set_session_id(args[2]);
    grpc::Status st = stub->GetSession(&ctx, req, &s);
    if (!st.ok()) return Fail(st);
    PrintSession(s);
    return 0;
  }
  if (args[1] == "delete") {
    pb::DeleteSessionRequest req;
    req.set_session_id(args[2]);
    pb::DeleteSessionResponse resp;
    grpc::Status st = stub->DeleteSession(&ctx, req, &resp);
    if (!st.ok()) return Fail(st);
    std::cout << "deleted " << args[2] << "\n";
    return 0;
  }
  return Usage(usage);
}

int CheckpointCmd(pb::Inference::Stub* stub, const std::vector<std::string>& args) {
  if (args.size() < 2) return Usage("flatstate-cli checkpoint SESSION [-o FILE]");
  pb::CheckpointSessionRequest req;
  req.set_session_id(args[1]);
  pb::Checkpoint ck;
  grpc::ClientContext ctx;
  Prepare(&ctx, req.session_id());
  grpc::Status st = stub->CheckpointSession(&ctx, req, &ck);
  if (!st.ok()) return Fail(st);
  if (const std::string out = absl::GetFlag(FLAGS_o); !out.empty()) {
    std::ofstream f(out, std::ios::binary);
    f.write(ck.data().data(), static_cast<std::streamsize>(ck.data().size()));
    if (!f) {
      std::cerr << "error: cannot write " << out << "\n";
      return 1;
    }
  }
  std::cout << "checkpoint_id: " << ck.checkpoint_id() << "\nmodel: " << ck.model()
            << "\nmodel_fingerprint: " << ck.model_fingerprint()
            << "\ncontext_tokens: " << ck.context_tokens() << "\nbytes: " << ck.data().size()
            << "\n";
  return 0;
}

int RestoreCmd(pb::Inference::Stub* stub, const std::vector<std::string>& args) {
  if (args.size() < 2) return Usage("flatstate-cli restore FILE|CHECKPOINT_ID");
  pb::RestoreSessionRequest req;
  std::ifstream f(args[1], std::ios::binary);
  if (f) {
    std::stringstream ss;
    ss << f.rdbuf();
    req.set_data(ss.str());
  } else {
    req.set_checkpoint_id(args[1]);
  }
  pb::Session s;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Status st = stub->RestoreSession(&ctx, req, &s);
  if (!st.ok()) return Fail(st);
  PrintSession(s);
  return 0;
}

int ModelsCmd(pb::Inference::Stub* stub) {
  pb::ListModelsResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Status st = stub->ListModels(&ctx, pb::ListModelsRequest(), &resp);
  if (!st.ok()) return Fail(st);
  for (const pb::ModelInfo& m : resp.models()) {
    std::cout << m.name() << (m.is_default() ? " (default)" : "") << "\n  attention_kind: "
              << m.attention_kind() << "\n  fingerprint: " << m.fingerprint() << "\n  device: "
              << m.device();
    if (m.attention_kind() == "softmax") {
      std::cout << "\n  kv_bytes_per_token: " << m.kv_bytes_per_token();
    } else {
      std::cout << "\n  state_bytes_per_session: " << m.state_bytes_per_session();
    }
    std::cout << "\n";
  }
  return 0;
}

int StatsCmd(pb::Inference::Stub* stub) {
  pb::ServerStats s;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Status st = stub->GetStats(&ctx, pb::GetStatsRequest(), &s);
  if (!st.ok()) return Fail(st);
  std::cout << s.DebugString();
  return 0;
}

int HealthCmd(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Status st = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!st.ok()) return Fail(st);
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()) << "\n";
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace

int RunRemote(const std::vector<std::string>& args) {
  auto channel = MakeChannel();
  auto stub = pb::Inference::NewStub(channel);
  const std::string& cmd = args[0];
  if (cmd == "generate") return Generate(stub.get());
  if (cmd == "session") return SessionCmd(stub.get(), args);
  if (cmd == "checkpoint") return CheckpointCmd(stub.get(), args);
  if (cmd == "restore") return RestoreCmd(stub.get(), args);
  if (cmd == "models") return ModelsCmd(stub.get());
  if (cmd == "stats") return StatsCmd(stub.get());
  if (cmd == "health") return HealthCmd(channel);
  return Usage("flatstate-cli generate|session|checkpoint|restore|models|stats|health");
}

}  // namespace flatstate::cli
