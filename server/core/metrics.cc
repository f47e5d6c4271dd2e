#include "server/core/metrics.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace flatstate::server {
namespace {

std::vector<double> LatencyBounds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

void Scalar(const std::string& name, const std::string& type, const std::string& help, uint64_t v,
            std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ", v,
                  "\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

uint64_t Histogram::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

double Histogram::sum() const {
  absl::MutexLock lock(&mu_);
  return sum_;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  absl::MutexLock lock(&mu_);
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    absl::StrAppend(out, name, "_bucket{le=\"", bounds_[i], "\"} ", cum, "\n");
  }
  cum += counts_.back();
  absl::StrAppend(out, name, "_bucket{le=\"+Inf\"} ", cum, "\n", name, "_sum ", sum_, "\n", name,
                  "_count ", count_, "\n");
}

uint64_t ReadRssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

Metrics::Metrics()
    : time_to_first_token(LatencyBounds()),
      inter_token_latency(LatencyBounds()),
      step_seconds(LatencyBounds()),
      step_batch_size({1, 2, 4, 8, 16, 32, 64, 128, 256, 512}),
      step_tokens({1, 4, 16, 64, 256, 1024, 4096}),
      store_write_seconds(LatencyBounds()),
      store_load_seconds(LatencyBounds()),
      malloc_trim_seconds(LatencyBounds()) {}

void Metrics::RecordRequest(const std::string& method, const std::string& code) {
  absl::MutexLock lock(&mu_);
  ++requests_[{method, code}];
}

uint64_t Metrics::requests_total() const {
  absl::MutexLock lock(&mu_);
  uint64_t n = 0;
  for (const auto& [k, v] : requests_) n += v;
  return n;
}

std::string Metrics::Render() const {
  std::string out;
  {
    absl::MutexLock lock(&mu_);
    absl::StrAppend(&out,
                    "# HELP flatstate_requests_total Finished RPCs by method and status code.\n"
                    "# TYPE flatstate_requests_total counter\n");
    for (const auto& [k, v] : requests_) {
      absl::StrAppend(&out, "flatstate_requests_total{method=\"", k.first, "\",code=\"", k.second,
                      "\"} ", v, "\n");
    }
  }
  Scalar("flatstate_tokens_generated_total", "counter", "Tokens sampled and streamed.",
         tokens_generated.load(), &out);
  Scalar("flatstate_prompt_tokens_total", "counter", "Prompt tokens accepted.",
         prompt_tokens.load(), &out);
  Scalar("flatstate_draft_tokens_total", "counter",
         "Speculative decoding: drafted tokens the engine verified.", draft_tokens.load(), &out);
  Scalar("flatstate_draft_tokens_accepted_total", "counter",
         "Speculative decoding: drafted tokens accepted (the output is the same either way).",
         draft_tokens_accepted.load(), &out);
  Scalar("flatstate_engine_steps_total", "counter", "Engine::Step calls.", engine_steps.load(),
         &out);
  Scalar("flatstate_sessions_evicted_total", "counter", "Idle sessions checkpointed to disk.",
         sessions_evicted_total.load(), &out);
  Scalar("flatstate_sessions_restored_total", "counter",
         "Evicted sessions restored on their next use.", sessions_restored_total.load(), &out);
  Scalar("flatstate_session_store_writes_total", "counter",
         "Turns written through to the shared session store.", store_writes_total.load(), &out);
  Scalar("flatstate_session_store_write_failures_total", "counter",
         "Turns that could not be persisted to the shared session store (logged).",
         store_write_failures_total.load(), &out);
  Scalar("flatstate_session_store_write_bytes_total", "counter",
         "Bytes sent to the shared session store by write-through.", store_write_bytes_total.load(),
         &out);
  Scalar("flatstate_session_store_loads_total", "counter",
         "Sessions loaded from the shared session store.", store_loads_total.load(), &out);
  Scalar("flatstate_session_store_load_bytes_total", "counter",
         "Bytes read from the shared session store by loads.", store_load_bytes_total.load(), &out);
  Scalar("flatstate_session_store_reloads_total", "counter",
         "Loads of a session held in memory because another replica advanced it.",
         store_reloads_total.load(), &out);
  Scalar("flatstate_session_lease_conflicts_total", "counter",
         "Turns refused (ABORTED) because another replica held the session's lease.",
         store_lease_conflicts_total.load(), &out);
  Scalar("flatstate_session_store_up", "gauge",
         "1 while the session store answers, 0 after a call found it unreachable.", store_up.load(),
         &out);
  Scalar("flatstate_active_sessions", "gauge", "Sessions held in memory.", active_sessions.load(),
         &out);
  Scalar("flatstate_evicted_sessions", "gauge", "Sessions checkpointed to disk after idling.",
         evicted_sessions.load(), &out);
  Scalar("flatstate_active_streams", "gauge", "Generate calls in progress.", active_streams.load(),
         &out);
  Scalar("flatstate_state_bytes", "gauge", "Per-session state bytes held in memory, all sessions.",
         state_bytes.load(), &out);
  Scalar("flatstate_kv_blocks_used", "gauge",
         "KV blocks held by sessions (softmax models; blocks only the prefix cache holds count as "
         "free).",
         kv_blocks_used.load(), &out);
  Scalar("flatstate_kv_blocks_free", "gauge",
         "KV blocks free, or held only by the prefix cache and freed on demand (softmax models).",
         kv_blocks_free.load(), &out);
  Scalar("flatstate_device_memory_used_bytes", "gauge",
         "Memory in use on the GPU (cudaMemGetInfo: every process, the CUDA context included); "
         "0 with --device=cpu.",
         device_memory_used_bytes.load(), &out);
  Scalar("flatstate_device_memory_total_bytes", "gauge",
         "The GPU's memory (cudaMemGetInfo); 0 with --device=cpu.",
         device_memory_total_bytes.load(), &out);
  Scalar("flatstate_device_state_bytes", "gauge",
         "GPU memory held for linear session states (slot pages); 0 with --device=cpu.",
         device_state_bytes.load(), &out);
  Scalar("flatstate_prefix_cache_hits_total", "counter",
         "Prompts restored from a cached prefix state instead of prefilled from token 0.",
         prefix_cache_hits.load(), &out);
  Scalar("flatstate_prefix_cache_misses_total", "counter",
         "Prompts that looked for a cached prefix and found none.", prefix_cache_misses.load(),
         &out);
  Scalar("flatstate_prefix_cache_tokens_saved_total", "counter",
         "Prompt tokens restored from the prefix cache instead of prefilled.",
         prefix_cache_tokens_saved.load(), &out);
  Scalar("flatstate_prefix_cache_evictions_total", "counter",
         "Prefix cache entries dropped (byte budget, or KV blocks needed by admission).",
         prefix_cache_evictions.load(), &out);
  Scalar("flatstate_prefix_cache_bytes", "gauge",
         "Bytes the prefix cache holds (linear states; softmax: its distinct KV blocks).",
         prefix_cache_bytes.load(), &out);
  Scalar("flatstate_prefix_cache_entries", "gauge", "Prefix cache entries.",
         prefix_cache_entries.load(), &out);
  Scalar("flatstate_rss_bytes", "gauge", "Resident set size of the server process.", ReadRssBytes(),
         &out);
  time_to_first_token.Render("flatstate_time_to_first_token_seconds",
                             "Time from request arrival to its first token.", &out);
  inter_token_latency.Render("flatstate_inter_token_latency_seconds",
                             "Time between consecutive tokens of one stream.", &out);
  step_seconds.Render("flatstate_engine_step_seconds", "Duration of one Engine::Step.", &out);
  step_batch_size.Render("flatstate_engine_step_batch_size", "Sessions in one Engine::Step.", &out);
  step_tokens.Render("flatstate_engine_step_tokens", "Tokens run in one Engine::Step.", &out);
  store_write_seconds.Render("flatstate_session_store_write_seconds",
                             "Duration of one write-through of a turn to the shared store.", &out);
  store_load_seconds.Render("flatstate_session_store_load_seconds",
                            "Duration of one load of a session from the shared store.", &out);
  malloc_trim_seconds.Render("flatstate_malloc_trim_seconds",
                             "Duration of one malloc_trim(0): free heap pages handed back to the "
                             "OS by the engine loop.",
                             &out);
  return out;
}

}  // namespace flatstate::server
