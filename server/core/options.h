// ServerOptions: everything configurable about a flatstate server. Plain value type. Its
// defaults are the only place a server default is written: server/main.cc's flags take theirs
// from ServerOptions{}.
#ifndef FLATSTATE_SERVER_CORE_OPTIONS_H_
#define FLATSTATE_SERVER_CORE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "engine/runtime/engine.h"

namespace flatstate::server {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 50051;                   // 0: pick a free port (Server::port() tells which)
  std::string models_dir = "models";  // every subfolder with a config.json is loaded
  std::string default_model;          // empty: see PickDefaultModel (model_registry.h)
  int threads = 0;                    // engine threads per model; 0: all cores
  std::string device = "auto";        // auto | cpu | cuda
  int max_sessions = 1024;            // sessions known to the server (in memory or evicted)
  int64_t max_prompt_tokens = int64_t{1} << 20;
  uint32_t max_new_tokens_limit = 65536;
  int kv_blocks = kDefaultKvBlocks;  // per softmax model (engine/runtime/engine.h)
  bool batch_invariant = false;      // CUDA: fixed-order GEMMs (EngineOptions::batch_invariant)
  // Per model: bytes of prompt-prefix snapshots kept for stateless requests (engine.h, "Prefix
  // cache"); 0: no cache.
  size_t prefix_cache_bytes = size_t{256} << 20;
  // auto (each model file's own type) | f32 | bf16 | int8 | int4 (EngineOptions::weight_dtype)
  std::string weight_dtype = "auto";
  // auto (f32, or a BF16 file's exact bf16 head) | f32 | bf16 | int8 | int4: the output head
  // (EngineOptions::head_dtype)
  std::string head_dtype = "auto";
  std::string kv_dtype = "f32";     // f32|bf16: softmax K/V cache (EngineOptions::kv_dtype)
  int64_t step_token_budget = 512;  // tokens per engine step per model (prefill + decode)
  // Speculative decoding (prompt lookup, or draft_model below) for requests that do not say
  // (docs/speculative.md), and the draft length of those that do not set one (1..32; 5: the pending token and the
  // draft make 6 rows, one register block of the CPU GEMM).
  bool speculative = false;
  int max_draft_tokens = 5;
  // A model of models_dir that drafts for every model with its vocabulary size (but itself), in
  // place of prompt lookup (engine/speculate/draft_model.h); empty: prompt lookup everywhere.
  std::string draft_model;
  // Drafts paced by what verifying them costs on this machine, measured per model
  // (engine/speculate/draft_pacer.h); false: every decoding step drafts up to the stream's
  // max_draft_tokens whatever it costs (engines without a pacer do that; for benchmarks and tests).
  bool pace_drafts = true;
  std::string checkpoint_dir = "/tmp/flatstate-checkpoints";
  // Session store (docs/cluster.md): "dir:PATH" or "redis://HOST:PORT[/DB]"; empty: dir:
  // checkpoint_dir (one process, today's behaviour).
  std::string session_store;
  std::string redis_password_file;      // redis: AUTH with this file's first line
  bool session_store_optional = false;  // redis unreachable at start: serve in-memory sessions
  absl::Duration session_ttl = absl::Hours(24);     // redis: keys of a session expire unused
  absl::Duration session_lease = absl::Seconds(5);  // redis: one turn's lease, renewed at 1/3
  std::string replica_id;         // redis: names this replica in leases; empty: host:port
  std::string auth_token;         // empty: no authentication
  std::string tls_cert, tls_key;  // PEM file paths; both set: TLS
  absl::Duration session_idle_ttl = absl::Minutes(10);  // <= 0: never evict
  std::string metrics_host = "0.0.0.0";
  int metrics_port = 9090;        // 0: no metrics endpoint
  bool metrics_any_port = false;  // tests: serve metrics on a free port
  // OpenAI-compatible HTTP API (docs/http-api.md) on `host`.
  int http_port = 8000;                    // 0: no HTTP API
  bool http_any_port = false;              // tests: serve the HTTP API on a free port
  int64_t max_http_body_bytes = 64 << 20;  // larger request bodies get 413
  int max_receive_message_bytes = 64 << 20;
  bool log_requests = true;  // one line per finished request on stderr
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_CORE_OPTIONS_H_
