// Server metrics, rendered in the Prometheus text exposition format (version 0.0.4).
//
// Thread-safe: counters and gauges are atomics, histograms and the per-method request table are
// mutex-guarded. Written by the engine loop and the transport threads, read by the HTTP thread
// (metrics_http.h). Nothing here fails.
#ifndef FLATSTATE_SERVER_CORE_METRICS_H_
#define FLATSTATE_SERVER_CORE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace flatstate::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Appends "# HELP/# TYPE" and the _bucket/_sum/_count lines.
  void Render(const std::string& name, const std::string& help, std::string* out) const;
  uint64_t count() const;  // observations so far
  double sum() const;      // of the observed values

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative; +Inf last
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Resident set size of this process from /proc/self/statm (0 if unreadable).
uint64_t ReadRssBytes();

class Metrics {
 public:
  Metrics();

  // One finished RPC (gRPC method short name, canonical code name).
  void RecordRequest(const std::string& method, const std::string& code);
  uint64_t requests_total() const;

  // Counters.
  std::atomic<uint64_t> tokens_generated{0};
  std::atomic<uint64_t> prompt_tokens{0};
  // Speculative decoding (docs/speculative.md): drafted tokens the engine verified, and those of
  // them it accepted (each accepted token is one engine step saved).
  std::atomic<uint64_t> draft_tokens{0};
  std::atomic<uint64_t> draft_tokens_accepted{0};
  std::atomic<uint64_t> engine_steps{0};
  std::atomic<uint64_t> sessions_evicted_total{0};
  std::atomic<uint64_t> sessions_restored_total{0};
  // Shared session store (--session_store=redis://...; docs/cluster.md).
  std::atomic<uint64_t> store_writes_total{0};          // turns written through
  std::atomic<uint64_t> store_write_failures_total{0};  // turns that could not be persisted
  std::atomic<uint64_t> store_write_bytes_total{0};     // bytes those writes sent
  std::atomic<uint64_t> store_loads_total{0};           // sessions loaded from the store
  std::atomic<uint64_t> store_load_bytes_total{0};
  std::atomic<uint64_t> store_reloads_total{0};          // loads because another replica advanced
  std::atomic<uint64_t> store_lease_conflicts_total{0};  // turns refused: leased elsewhere
  std::atomic<uint64_t> store_up{1};  // gauge: 0 while the last store call found it unreachable
  // Gauges (set by the engine loop after every iteration).
  std::atomic<uint64_t> active_sessions{0};   // in memory
  std::atomic<uint64_t> evicted_sessions{0};  // on disk, restorable
  std::atomic<uint64_t> active_streams{0};
  std::atomic<uint64_t> state_bytes{0};
  std::atomic<uint64_t> kv_blocks_used{0};
  std::atomic<uint64_t> kv_blocks_free{0};
  std::atomic<uint64_t> device_memory_used_bytes{0};  // whole device, all processes; 0 on CPU
  std::atomic<uint64_t> device_memory_total_bytes{0};
  std::atomic<uint64_t> device_state_bytes{0};  // linear states' device slot pages
  // Prefix cache, all models (the engines' cumulative counts, copied by the loop).
  std::atomic<uint64_t> prefix_cache_hits{0};
  std::atomic<uint64_t> prefix_cache_misses{0};
  std::atomic<uint64_t> prefix_cache_tokens_saved{0};
  std::atomic<uint64_t> prefix_cache_evictions{0};
  std::atomic<uint64_t> prefix_cache_bytes{0};
  std::atomic<uint64_t> prefix_cache_entries{0};

  Histogram time_to_first_token;  // seconds
  Histogram inter_token_latency;  // seconds
  Histogram step_seconds;         // one Engine::Step
  Histogram step_batch_size;      // sessions in one Engine::Step
  Histogram step_tokens;          // tokens run in one Engine::Step
  Histogram store_write_seconds;  // one write-through (Save) of a turn
  Histogram store_load_seconds;   // one Load of a session from the store
  Histogram malloc_trim_seconds;  // one malloc_trim(0) by the engine loop (memory_trimmer.h)

  std::string Render() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_CORE_METRICS_H_
