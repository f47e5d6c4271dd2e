// Fuzzes the server's request validation (server/api/validation.h, reached from the proto message
// through server/grpc/grpc_api.h as the gRPC service does) and the checkpoint header parser.
// The input is read three ways: as a serialized GenerateRequest, as a serialized
// RestoreSessionRequest, and split by FuzzedDataProvider into the fields of both (so values the
// proto parser rarely produces, like NaN sampling params or ids with NUL bytes, are reached too).
// Nothing may crash; every accepted request must satisfy the invariants the engine loop relies on.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "engine/session/checkpoint.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "flatstate/v1/inference.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "server/api/validation.h"
#include "server/core/model_registry.h"
#include "server/grpc/grpc_api.h"
#include "server/store/checkpoint_store.h"
#include "server/store/ids.h"

namespace {

namespace pb = flatstate::v1;
using flatstate::server::ModelRegistry;
using flatstate::server::ServerOptions;

// No models: validation only reads the model list.
const ModelRegistry& Models() {
  static const ModelRegistry* models = new ModelRegistry({}, "");
  return *models;
}

const flatstate::server::CheckpointStore& Store() {
  static const flatstate::server::CheckpointStore* store = [] {
    auto s = flatstate::server::CheckpointStore::Open("/tmp/flatstate-request-fuzzer");
    if (!s.ok()) __builtin_trap();
    return new flatstate::server::CheckpointStore(std::move(*s));
  }();
  return *store;
}

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void ValidateGenerate(const pb::GenerateRequest& req, const ServerOptions& options) {
  absl::StatusOr<flatstate::server::GenerateJob> job = flatstate::server::ValidateGenerate(
      flatstate::server::ToGenerateRequest(req), Models(), options);
  if (!job.ok()) {
    Check(!job.status().message().empty());
    return;
  }
  // Accepted: the invariants AdmitStream relies on.
  Check(job->max_new_tokens > 0 && job->max_new_tokens <= options.max_new_tokens_limit);
  Check(static_cast<int64_t>(job->prompt.size()) <= options.max_prompt_tokens);
  // Something to continue from: a prompt, a session, or a stored state (initial_state: a
  // stateless request may start generating from a checkpoint with no new prompt).
  Check(!job->prompt.empty() || !job->session_id.empty() || !req.initial_state().empty());
  Check(job->session_id.empty() || flatstate::server::IsValidId(job->session_id));
  for (int32_t t : job->prompt) Check(t >= 0 && t < flatstate::kByteVocabSize);
  for (const std::string& s : job->stop) Check(!s.empty() && flatstate::IsValidUtf8(s));
  // The prompt is bytes: any accepted prompt is one token per byte.
  if (req.prompt_tokens_size() == 0) Check(job->prompt.size() == req.prompt().size());
  if (job->sampling.has_value()) {
    Check(job->sampling->temperature >= 0.f && std::isfinite(job->sampling->temperature));
    Check(job->sampling->top_p > 0.f && job->sampling->top_p <= 1.f);
  }
}

void ValidateRestore(const pb::RestoreSessionRequest& req) {
  if (req.source_case() == pb::RestoreSessionRequest::kCheckpointId) {
    const std::string& id = req.checkpoint_id();
    if (flatstate::server::IsValidId(id)) {
      // A valid id names a file directly inside the checkpoint dir.
      const std::string path = Store().CheckpointPath(id);
      Check(path == Store().dir() + "/" + id + ".ckpt");
      Check(id.find('/') == std::string::npos && id.find('.') == std::string::npos);
    } else {
      Check(!flatstate::server::ValidateSessionId(id).ok());
    }
  } else if (req.source_case() == pb::RestoreSessionRequest::kData) {
    (void)flatstate::ReadCheckpointHeader(req.data());
  }
}

// A well-formed id (32 lower-case hex characters) drawn from the input.
std::string HexId(FuzzedDataProvider* p) {
  static const char kHex[] = "0123456789abcdef";
  std::string id(flatstate::server::kIdHexChars, '0');
  for (char& c : id) c = kHex[p->ConsumeIntegralInRange<int>(0, 15)];
  return id;
}

pb::SamplingParams FuzzSampling(FuzzedDataProvider* p) {
  pb::SamplingParams s;
  switch (p->ConsumeIntegralInRange<int>(0, 3)) {
    case 0: s.set_temperature(p->ConsumeFloatingPoint<float>()); break;
    case 1: s.set_temperature(std::numeric_limits<float>::quiet_NaN()); break;
    case 2: s.set_temperature(std::numeric_limits<float>::infinity()); break;
    default: s.set_temperature(p->ConsumeFloatingPointInRange<float>(0.f, 2.f)); break;
  }
  s.set_top_k(p->ConsumeIntegral<uint32_t>());
  s.set_top_p(p->ConsumeBool() ? p->ConsumeFloatingPoint<float>()
                               : p->ConsumeFloatingPointInRange<float>(0.f, 1.f));
  s.set_seed(p->ConsumeIntegral<uint64_t>());
  return s;
}

void FromFields(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  ServerOptions options;
  options.max_prompt_tokens = p.ConsumeIntegralInRange<int64_t>(0, 4096);
  options.max_new_tokens_limit = p.ConsumeIntegralInRange<uint32_t>(1, 1 << 20);

  pb::GenerateRequest g;
  if (p.ConsumeBool()) g.set_model(p.ConsumeRandomLengthString(64));
  if (p.ConsumeBool()) {
    g.set_session_id(p.ConsumeBool() ? HexId(&p) : p.ConsumeRandomLengthString(40));
  }
  if (p.ConsumeBool()) g.set_prompt(p.ConsumeRandomLengthString(256));
  if (p.ConsumeBool()) {
    const int n = p.ConsumeIntegralInRange<int>(0, 64);
    for (int i = 0; i < n; ++i) {
      g.add_prompt_tokens(p.ConsumeBool() ? p.ConsumeIntegralInRange<int32_t>(0, 255)
                                          : p.ConsumeIntegral<int32_t>());
    }
  }
  g.set_max_new_tokens(p.ConsumeIntegral<uint32_t>());
  if (p.ConsumeBool()) *g.mutable_sampling() = FuzzSampling(&p);
  const int stops = p.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < stops; ++i) g.add_stop(p.ConsumeRandomLengthString(16));
  ValidateGenerate(g, options);
  // The same request after a serialization round trip validates the same way. prompt and stop
  // are bytes, so they always survive it; parsing fails only when model or session_id (strings)
  // hold invalid UTF-8: proto3 rejects it, so the server never sees such a request.
  pb::GenerateRequest copy;
  const bool strings_valid =
      flatstate::IsValidUtf8(g.model()) && flatstate::IsValidUtf8(g.session_id());
  Check(copy.ParseFromString(g.SerializeAsString()) == strings_valid);
  if (strings_valid) {
    Check(flatstate::server::ValidateGenerate(flatstate::server::ToGenerateRequest(copy), Models(),
                                              options)
              .ok() == flatstate::server::ValidateGenerate(flatstate::server::ToGenerateRequest(g),
                                                           Models(), options)
                           .ok());
  }

  pb::CreateSessionRequest c;
  *c.mutable_sampling() = FuzzSampling(&p);
  (void)flatstate::server::ConvertSampling(flatstate::server::ToSamplingRequest(c.sampling()));

  pb::RestoreSessionRequest r;
  if (p.ConsumeBool()) {
    r.set_checkpoint_id(p.ConsumeBool() ? HexId(&p) : p.ConsumeRandomLengthString(40));
  } else {
    r.set_data(p.ConsumeRemainingBytesAsString());
  }
  ValidateRestore(r);
}

}  // namespace

// Protobuf logs every string field with invalid UTF-8 to stderr (gigabytes per minute of
// fuzzing); the parse result is what the target checks, so the log is dropped.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ServerOptions options;
  options.max_prompt_tokens = 1024;
  pb::GenerateRequest g;
  if (g.ParseFromArray(data, static_cast<int>(size))) ValidateGenerate(g, options);
  pb::RestoreSessionRequest r;
  if (r.ParseFromArray(data, static_cast<int>(size))) ValidateRestore(r);
  (void)flatstate::ReadCheckpointHeader(bytes);
  FromFields(data, size);
  return 0;
}
