#include "server/grpc/inference_service.h"

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/api/validation.h"
#include "server/grpc/generate_reactor.h"
#include "server/grpc/grpc_api.h"
#include "server/store/ids.h"

namespace flatstate::server {

namespace pb = flatstate::v1;

namespace {

void FillSession(const SessionInfo& i, pb::Session* out) {
  out->set_session_id(i.session_id);
  out->set_model(i.model);
  out->set_attention_kind(i.attention_kind);
  out->set_context_tokens(i.context_tokens);
  out->set_state_bytes(i.state_bytes);
  out->set_generating(i.generating);
  out->set_evicted(i.evicted);
}

// A request's optional `sampling` (CreateSession, ForkSession) converted and validated; nothing
// when *s is already an error or none was sent; a conversion error goes to *s.
template <typename Request>
std::optional<SamplingParams> SamplingOf(const Request& req, absl::Status* s) {
  if (!s->ok() || !req.has_sampling()) return std::nullopt;
  absl::StatusOr<SamplingParams> sp = ConvertSampling(ToSamplingRequest(req.sampling()));
  *s = sp.status();
  if (!sp.ok()) return std::nullopt;
  return *sp;
}

}  // namespace

InferenceService::InferenceService(EngineLoop* loop, Metrics* metrics, const ServerOptions& options,
                                   std::string device_name)
    : loop_(loop), metrics_(metrics), options_(options), device_(std::move(device_name)) {}

absl::Status InferenceService::Authenticate(const grpc::CallbackServerContext* ctx) const {
  return server::Authenticate(*ctx, options_.auth_token);
}

void InferenceService::Done(grpc::ServerUnaryReactor* r, const char* method, const absl::Status& s,
                            absl::Time start) const {
  const grpc::Status gs = ToGrpcStatus(s);
  metrics_->RecordRequest(method, GrpcCodeName(gs.error_code()));
  if (options_.log_requests) {
    std::fprintf(stderr, "%s\n",
                 absl::StrFormat("[flatstate] %s status=%s time_ms=%.1f%s", method,
                                 GrpcCodeName(gs.error_code()),
                                 absl::ToDoubleMilliseconds(absl::Now() - start),
                                 s.ok() ? "" : absl::StrCat(" error=\"", s.message(), "\""))
                     .c_str());
  }
  r->Finish(gs);
}

grpc::ServerWriteReactor<pb::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* ctx, const pb::GenerateRequest* req) {
  std::shared_ptr<GenerateReactor> r = GenerateReactor::Create(metrics_);
  absl::Status s = Authenticate(ctx);
  absl::StatusOr<GenerateJob> job =
      s.ok() ? ValidateGenerate(ToGenerateRequest(*req), loop_->models(), options_)
             : absl::StatusOr<GenerateJob>(s);
  if (job.ok()) {
    // The checkpoint is read here, on the transport thread: the loop does no store I/O for it.
    if (absl::Status st = LoadInitialState(req->initial_state(), loop_->store(), &*job); !st.ok()) {
      job = st;
    }
  }
  if (!job.ok()) {
    if (options_.log_requests) {
      std::fprintf(stderr, "[flatstate] Generate session=%s status=%s error=\"%s\"\n",
                   req->session_id().c_str(),
                   GrpcCodeName(ToGrpcStatus(job.status()).error_code()).c_str(),
                   std::string(job.status().message()).c_str());
    }
    r->FinishWithError(ToGrpcStatus(job.status()));
    return r.get();
  }
  loop_->Generate(std::move(*job), r);
  return r.get();
}

grpc::ServerUnaryReactor* InferenceService::CreateSession(grpc::CallbackServerContext* ctx,
                                                          const pb::CreateSessionRequest* req,
                                                          pb::Session* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  if (s.ok()) s = ValidateModelName(req->model(), loop_->models());
  const std::optional<SamplingParams> sampling = SamplingOf(*req, &s);
  if (!s.ok()) {
    Done(r, "CreateSession", s, start);
    return r;
  }
  loop_->CreateSession(req->model(), sampling,
                       [this, r, resp, start](absl::StatusOr<SessionInfo> info) {
                         if (info.ok()) FillSession(*info, resp);
                         Done(r, "CreateSession", info.status(), start);
                       });
  return r;
}

grpc::ServerUnaryReactor* InferenceService::ForkSession(grpc::CallbackServerContext* ctx,
                                                        const pb::ForkSessionRequest* req,
                                                        pb::Session* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  if (s.ok()) s = ValidateSessionId(req->session_id());
  const std::optional<SamplingParams> sampling = SamplingOf(*req, &s);
  if (!s.ok()) {
    Done(r, "ForkSession", s, start);
    return r;
  }
  loop_->ForkSession(req->session_id(), sampling,
                     [this, r, resp, start](absl::StatusOr<SessionInfo> info) {
                       if (info.ok()) FillSession(*info, resp);
                       Done(r, "ForkSession", info.status(), start);
                     });
  return r;
}

grpc::ServerUnaryReactor* InferenceService::GetSession(grpc::CallbackServerContext* ctx,
                                                       const pb::GetSessionRequest* req,
                                                       pb::Session* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  if (s.ok()) s = ValidateSessionId(req->session_id());
  if (!s.ok()) {
    Done(r, "GetSession", s, start);
    return r;
  }
  loop_->GetSession(req->session_id(), [this, r, resp, start](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) FillSession(*info, resp);
    Done(r, "GetSession", info.status(), start);
  });
  return r;
}

grpc::ServerUnaryReactor* InferenceService::DeleteSession(grpc::CallbackServerContext* ctx,
                                                          const pb::DeleteSessionRequest* req,
                                                          pb::DeleteSessionResponse*) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  if (s.ok()) s = ValidateSessionId(req->session_id());
  if (!s.ok()) {
    Done(r, "DeleteSession", s, start);
    return r;
  }
  loop_->DeleteSession(req->session_id(),
                       [this, r, start](absl::Status st) { Done(r, "DeleteSession", st, start); });
  return r;
}

grpc::ServerUnaryReactor* InferenceService::CheckpointSession(
    grpc::CallbackServerContext* ctx, const pb::CheckpointSessionRequest* req,
    pb::Checkpoint* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  if (s.ok()) s = ValidateSessionId(req->session_id());
  if (!s.ok()) {
    Done(r, "CheckpointSession", s, start);
    return r;
  }
  loop_->CheckpointSession(req->session_id(),
                           [this, r, resp, start](absl::StatusOr<CheckpointInfo> c) {
                             if (c.ok()) {
                               resp->set_data(std::move(c->data));
                               resp->set_checkpoint_id(c->checkpoint_id);
                               resp->set_context_tokens(c->context_tokens);
                               resp->set_model_fingerprint(c->model_fingerprint);
                               resp->set_model(c->model);
                             }
                             Done(r, "CheckpointSession", c.status(), start);
                           });
  return r;
}

grpc::ServerUnaryReactor* InferenceService::RestoreSession(grpc::CallbackServerContext* ctx,
                                                           const pb::RestoreSessionRequest* req,
                                                           pb::Session* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  std::string blob;
  if (s.ok()) {
    if (req->source_case() == pb::RestoreSessionRequest::kCheckpointId) {
      absl::StatusOr<std::string> data = ReadCheckpointById(req->checkpoint_id(), loop_->store());
      if (data.ok()) blob = std::move(*data);
      s = data.status();
    } else if (req->source_case() == pb::RestoreSessionRequest::kData) {
      blob = req->data();
    } else {
      s = absl::InvalidArgumentError("set data or checkpoint_id");
    }
  }
  if (!s.ok()) {
    Done(r, "RestoreSession", s, start);
    return r;
  }
  loop_->RestoreSession(std::move(blob), [this, r, resp, start](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) FillSession(*info, resp);
    Done(r, "RestoreSession", info.status(), start);
  });
  return r;
}

grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* ctx,
                                                       const pb::ListModelsRequest*,
                                                       pb::ListModelsResponse* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  if (s.ok()) {
    for (const auto& m : loop_->models().models()) {
      const ModelConfig& c = m->config();
      pb::ModelInfo* info = resp->add_models();
      info->set_name(m->name);
      info->set_attention_kind(ModelKindName(c));
      info->set_architecture(c.architecture);
      info->set_num_kv_layers(static_cast<uint64_t>(c.kv_layers()));
      info->set_fingerprint(m->fingerprint());
      info->set_state_bytes_per_session(c.state_bytes());
      info->set_kv_bytes_per_token(m->engine->kv_bytes_per_token());
      info->set_device(device_);
      info->set_is_default(m->name == loop_->default_model());
      info->set_vocab_size(c.vocab_size);
      info->set_num_layers(c.num_hidden_layers);
      info->set_hidden_size(c.hidden_size);
      info->set_weight_bytes(m->engine->model().weight_bytes());
      info->set_kv_blocks_total(c.is_linear() ? 0 : options_.kv_blocks);
    }
  }
  Done(r, "ListModels", s, start);
  return r;
}

grpc::ServerUnaryReactor* InferenceService::GetStats(grpc::CallbackServerContext* ctx,
                                                     const pb::GetStatsRequest*,
                                                     pb::ServerStats* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status s = Authenticate(ctx);
  if (!s.ok()) {
    Done(r, "GetStats", s, start);
    return r;
  }
  loop_->GetStats([this, r, resp, start](absl::StatusOr<StatsInfo> st) {
    if (st.ok()) {
      resp->set_active_sessions(st->active_sessions);
      resp->set_evicted_sessions(st->evicted_sessions);
      resp->set_active_streams(st->active_streams);
      resp->set_state_bytes_total(st->state_bytes_total);
      resp->set_kv_blocks_used(st->kv_blocks_used);
      resp->set_kv_blocks_total(st->kv_blocks_total);
      resp->set_tokens_generated_total(st->tokens_generated_total);
      resp->set_rss_bytes(ReadRssBytes());
      resp->set_device_memory_used_bytes(st->device_memory_used_bytes);
      resp->set_device_memory_total_bytes(st->device_memory_total_bytes);
      resp->set_device_state_bytes(st->device_state_bytes);
      resp->set_prefix_cache_hits_total(st->prefix_cache.hits);
      resp->set_prefix_cache_misses_total(st->prefix_cache.misses);
      resp->set_prefix_cache_tokens_saved_total(st->prefix_cache.tokens_saved);
      resp->set_prefix_cache_bytes(st->prefix_cache.bytes);
      resp->set_prefix_cache_entries(st->prefix_cache.entries);
      resp->set_prefix_cache_evictions_total(st->prefix_cache.evictions);
      resp->set_device(device_);
      resp->set_uptime_seconds(static_cast<uint64_t>(absl::ToInt64Seconds(absl::Now() - started_)));
      resp->set_requests_total(metrics_->requests_total());
      resp->set_session_store(loop_->store().address());
      resp->set_session_store_up(metrics_->store_up.load() != 0);
      resp->set_store_writes_total(metrics_->store_writes_total.load());
      resp->set_store_write_failures_total(metrics_->store_write_failures_total.load());
      resp->set_store_write_bytes_total(metrics_->store_write_bytes_total.load());
      resp->set_store_loads_total(metrics_->store_loads_total.load());
      resp->set_store_load_bytes_total(metrics_->store_load_bytes_total.load());
      resp->set_store_write_seconds_total(metrics_->store_write_seconds.sum());
      resp->set_store_load_seconds_total(metrics_->store_load_seconds.sum());
      resp->set_store_lease_conflicts_total(metrics_->store_lease_conflicts_total.load());
      if (loop_->store().shared()) resp->set_replica_id(options_.replica_id);
    }
    Done(r, "GetStats", st.status(), start);
  });
  return r;
}

}  // namespace flatstate::server
