// flatstate-server: serves every model under --models_dir over gRPC (flatstate.v1.Inference,
// grpc.health.v1, reflection) with continuous batching. See docs/server.md.
//
//   flatstate-server --models_dir models --port 50051 [--checkpoint_dir DIR] [--auth_token T]
//
// SIGTERM/SIGINT shut it down cleanly (streams in flight end with UNAVAILABLE).
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "server/server.h"

// Every flag's default is the ServerOptions default (server/core/options.h): written once.
namespace {
const flatstate::server::ServerOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, host, kDefaults.host, "address to listen on");
ABSL_FLAG(int, port, kDefaults.port, "gRPC port (0: pick a free one and print it)");
ABSL_FLAG(std::string, models_dir, kDefaults.models_dir,
          "folder whose subfolders with a config.json are "
          "loaded, one model each (named after the subfolder)");
ABSL_FLAG(std::string, default_model, kDefaults.default_model,
          "model used when a request names none (default: first sorted name containing "
          "'linear-elu', else the first)");
ABSL_FLAG(int, threads, kDefaults.threads,
          "threads of the one pool every model's engine shares (0: all cores)");
ABSL_FLAG(std::string, device, kDefaults.device, "auto | cpu | cuda");
ABSL_FLAG(int, max_sessions, kDefaults.max_sessions,
          "sessions held (in memory or evicted to disk)");
ABSL_FLAG(int64_t, max_prompt_tokens, kDefaults.max_prompt_tokens, "longest accepted prompt");
ABSL_FLAG(uint32_t, max_new_tokens_limit, kDefaults.max_new_tokens_limit,
          "largest accepted max_new_tokens");
ABSL_FLAG(int, kv_blocks, kDefaults.kv_blocks,
          "KV cache blocks (16 tokens each) per softmax model");
ABSL_FLAG(bool, batch_invariant, kDefaults.batch_invariant,
          "--device=cuda: GEMMs in a fixed order, so a session's outputs are the same bits "
          "whatever shares its step (slower; docs/gpu.md). The CPU always is");
ABSL_FLAG(uint64_t, prefix_cache_bytes, kDefaults.prefix_cache_bytes,
          "per model: bytes of prompt-prefix state snapshots (linear) or KV blocks (softmax) kept "
          "so that a request resending a known prefix prefills only the rest; 0: off "
          "(docs/http-api.md, \"Prefix cache\")");
ABSL_FLAG(std::string, weight_dtype, kDefaults.weight_dtype,
          "auto | f32 | bf16 | int8 | int4 | bf16dot: the type the models' layer GEMM weights run "
          "as, prepared at load from the file (auto: the file's own type, f32 or bf16; int8/int4: "
          "one scale per 32 weights, like Q8_0/Q4_0; bf16dot: bf16 weights and activations, "
          "AVX512-BF16's dot product, CPU only; docs/model-format.md; CUDA: docs/gpu.md)");
ABSL_FLAG(std::string, head_dtype, kDefaults.head_dtype,
          "auto | f32 | bf16 | int8 | int4 | bf16dot: the type the models' output head (vocab x "
          "hidden) runs "
          "as, prepared at load (auto: f32, or bf16 when the layers run narrower than f32 and the "
          "file's head is bf16; int8: as llama.cpp's Q8_0 files hold it, a third of a decode "
          "step's bytes on a 248k vocabulary; docs/model-format.md)");
ABSL_FLAG(std::string, kv_dtype, kDefaults.kv_dtype,
          "f32 | bf16: element type of the softmax models' K/V cache (bf16 halves its bytes; "
          "CPU; --device=cuda: f32)");
ABSL_FLAG(
    int64_t, step_token_budget, kDefaults.step_token_budget,
    "tokens one engine step may run per model (decodes first, prefill chunks share the rest)");
ABSL_FLAG(bool, speculative, kDefaults.speculative,
          "speculative decoding for requests that do not set `speculative`: drafts from prompt "
          "lookup (or --draft_model) verified in one step each, the same output bits "
          "(docs/speculative.md; CPU engines)");
ABSL_FLAG(std::string, draft_model, kDefaults.draft_model,
          "a model of --models_dir that decodes the speculative drafts of every model with its "
          "vocabulary size (but itself), in place of prompt lookup (docs/speculative.md)");
ABSL_FLAG(bool, pace_drafts, kDefaults.pace_drafts,
          "pace speculative drafts by what verifying them costs, measured per model while "
          "serving (false: every decoding step drafts up to max_draft_tokens; "
          "docs/speculative.md)");
ABSL_FLAG(int32_t, max_draft_tokens, kDefaults.max_draft_tokens,
          "tokens per speculative draft (1..32) for requests that do not set max_draft_tokens");
ABSL_FLAG(std::string, checkpoint_dir, kDefaults.checkpoint_dir,
          "where checkpoints and evicted sessions are written (created if missing)");
ABSL_FLAG(std::string, session_store, kDefaults.session_store,
          "where sessions live: dir:PATH (this process only; default dir:<checkpoint_dir>) or "
          "redis://HOST:PORT[/DB] (shared by replicas; docs/cluster.md)");
ABSL_FLAG(std::string, redis_password_file, kDefaults.redis_password_file,
          "redis session store: AUTH with the first line of this file");
ABSL_FLAG(bool, session_store_optional, kDefaults.session_store_optional,
          "redis session store unreachable at start: serve with in-memory sessions (reported in "
          "health and metrics) instead of refusing to start");
ABSL_FLAG(absl::Duration, session_ttl, kDefaults.session_ttl,
          "redis session store: a session's keys expire after this long without a turn");
ABSL_FLAG(absl::Duration, session_lease, kDefaults.session_lease,
          "redis session store: lease time of one turn (renewed while it runs)");
ABSL_FLAG(std::string, replica_id, kDefaults.replica_id,
          "name of this replica in session leases (default: hostname:port)");
ABSL_FLAG(std::string, auth_token, kDefaults.auth_token,
          "if set, require 'authorization: Bearer <token>'");
ABSL_FLAG(std::string, auth_token_file, "", "read --auth_token from this file");
ABSL_FLAG(std::string, tls_cert, kDefaults.tls_cert,
          "PEM certificate chain (with --tls_key: serve TLS)");
ABSL_FLAG(std::string, tls_key, kDefaults.tls_key, "PEM private key");
ABSL_FLAG(absl::Duration, session_idle_ttl, kDefaults.session_idle_ttl,
          "idle sessions are checkpointed to --checkpoint_dir and evicted after this long "
          "(0: never)");
ABSL_FLAG(int, metrics_port, kDefaults.metrics_port, "Prometheus /metrics HTTP port (0: off)");
ABSL_FLAG(int, http_port, kDefaults.http_port,
          "OpenAI-compatible HTTP API port, on --host (docs/http-api.md; 0: off)");
ABSL_FLAG(int64_t, max_http_body_bytes, kDefaults.max_http_body_bytes,
          "largest accepted HTTP request body (larger: 413)");
ABSL_FLAG(int, max_receive_message_bytes, kDefaults.max_receive_message_bytes,
          "largest accepted request message");
ABSL_FLAG(bool, log_requests, kDefaults.log_requests, "one stderr line per finished request");

namespace {

// Loopback addresses: a listener there is reachable from this machine only.
bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         absl::StartsWith(host, "127.");
}

// One line per listener: what it serves, where, and whether it asks for the auth token.
void LogListeners(const flatstate::server::ServerOptions& o, int grpc_port, int http_port,
                  int metrics_port) {
  const char* auth = o.auth_token.empty() ? "off" : "on (Bearer token)";
  const char* tls = o.tls_cert.empty() ? "off" : "on";
  std::fprintf(stderr, "[flatstate] gRPC listening on %s:%d (auth %s, TLS %s)\n", o.host.c_str(),
               grpc_port, auth, tls);
  if (http_port > 0) {
    std::fprintf(stderr, "[flatstate] HTTP API listening on %s:%d (auth %s)\n", o.host.c_str(),
                 http_port, auth);
  }
  if (metrics_port > 0) {
    std::fprintf(stderr, "[flatstate] metrics listening on %s:%d (no auth: Prometheus text)\n",
                 o.host.c_str(), metrics_port);
  }
  if (!IsLoopback(o.host) && o.auth_token.empty()) {
    std::fprintf(stderr,
                 "[flatstate] WARNING: listening on %s, beyond loopback, with no auth token: "
                 "anyone who can reach this address can generate and read or delete sessions "
                 "(set --auth_token_file, or --host 127.0.0.1)\n",
                 o.host.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("flatstate-server --models_dir DIR [--port N] [flags]");
  // --help lists this file's flags (absl matches files by the program's name otherwise, and
  // printed "No flags matched").
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  using flatstate::server::ServerOptions;
  ServerOptions o;
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.models_dir = absl::GetFlag(FLAGS_models_dir);
  o.default_model = absl::GetFlag(FLAGS_default_model);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.device = absl::GetFlag(FLAGS_device);
  o.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o.max_new_tokens_limit = absl::GetFlag(FLAGS_max_new_tokens_limit);
  o.kv_blocks = absl::GetFlag(FLAGS_kv_blocks);
  o.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  o.prefix_cache_bytes = absl::GetFlag(FLAGS_prefix_cache_bytes);
  o.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  o.head_dtype = absl::GetFlag(FLAGS_head_dtype);
  o.kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  o.step_token_budget = absl::GetFlag(FLAGS_step_token_budget);
  o.speculative = absl::GetFlag(FLAGS_speculative);
  o.max_draft_tokens = absl::GetFlag(FLAGS_max_draft_tokens);
  o.draft_model = absl::GetFlag(FLAGS_draft_model);
  o.pace_drafts = absl::GetFlag(FLAGS_pace_drafts);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.session_store = absl::GetFlag(FLAGS_session_store);
  o.redis_password_file = absl::GetFlag(FLAGS_redis_password_file);
  o.session_store_optional = absl::GetFlag(FLAGS_session_store_optional);
  o.session_ttl = absl::GetFlag(FLAGS_session_ttl);
  o.session_lease = absl::GetFlag(FLAGS_session_lease);
  o.replica_id = absl::GetFlag(FLAGS_replica_id);
  o.auth_token = absl::GetFlag(FLAGS_auth_token);
  if (const std::string f = absl::GetFlag(FLAGS_auth_token_file); !f.empty()) {
    std::ifstream in(f);
    if (!in) {
      std::fprintf(stderr, "error: auth_token_file: cannot read %s\n", f.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    o.auth_token = std::string(absl::StripAsciiWhitespace(ss.str()));
  }
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.session_idle_ttl = absl::GetFlag(FLAGS_session_idle_ttl);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.http_port = absl::GetFlag(FLAGS_http_port);
  o.max_http_body_bytes = absl::GetFlag(FLAGS_max_http_body_bytes);
  o.max_receive_message_bytes = absl::GetFlag(FLAGS_max_receive_message_bytes);
  o.log_requests = absl::GetFlag(FLAGS_log_requests);

  // A file size limit (ulimit -f, systemd LimitFSIZE=) must fail the one checkpoint write that
  // crosses it with EFBIG (RESOURCE_EXHAUSTED to its caller), not kill the server with SIGXFSZ.
  signal(SIGXFSZ, SIG_IGN);
  // A session store connection (hiredis writes with write(2)) or an HTTP client closed by its peer
  // must fail that one call with an error, not kill the server with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);

  // Block the shutdown signals in every thread; this one waits for them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto server = flatstate::server::Server::Create(o);
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (absl::Status s = (*server)->Start(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr,
               "[flatstate] serving on %s:%d (default model %s, metrics port %d, HTTP API port "
               "%d)\n",
               o.host.c_str(), (*server)->port(), (*server)->default_model().c_str(),
               (*server)->metrics_port(), (*server)->http_port());
  LogListeners(o, (*server)->port(), (*server)->http_port(), (*server)->metrics_port());
  std::printf("port %d\n", (*server)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "[flatstate] signal %d: shutting down\n", sig);
  (*server)->Shutdown();
  return 0;
}
