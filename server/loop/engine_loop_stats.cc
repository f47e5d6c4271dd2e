// EngineLoop: the server's counters and gauges (GetStats, /metrics), read on the loop thread.
#include "server/loop/engine_loop.h"

namespace flatstate::server {

StatsInfo EngineLoop::Stats() const {
  StatsInfo st;
  const SessionTable::Counts c = sessions_.Count();
  st.active_sessions = c.resident;
  st.evicted_sessions = c.evicted;
  st.state_bytes_total = c.state_bytes;
  for (const auto& m : models_.models()) {
    if (const KvBlockPool* pool = m->engine->kv_pool(); pool != nullptr) {
      // Blocks only the prefix cache holds are free on demand (vLLM counts its cached free
      // blocks so too); the cache's share is prefix_cache.bytes.
      st.kv_blocks_used += pool->blocks_used() - pool->blocks_cache_only();
      st.kv_blocks_total += pool->blocks_total();
    }
  }
  for (const auto& s : streams_) st.active_streams += s->done ? 0 : 1;
  st.tokens_generated_total = tokens_generated_;
  for (const auto& m : models_.models()) {
    st.device_state_bytes += m->engine->DeviceStateBytes();
    st.prefix_cache += m->engine->prefix_cache_stats();
  }
  return st;
}

DeviceMemoryInfo EngineLoop::DeviceMemory() const {
  if (models_.models().empty()) return {};
  // Every model runs on the one device of --device.
  return models_.models().front()->engine->DeviceMemory().value_or(DeviceMemoryInfo{});
}

void EngineLoop::PublishGauges() {
  const StatsInfo st = Stats();
  metrics_->active_sessions = st.active_sessions;
  metrics_->evicted_sessions = st.evicted_sessions;
  metrics_->state_bytes = st.state_bytes_total;
  metrics_->kv_blocks_used = st.kv_blocks_used;
  metrics_->kv_blocks_free = st.kv_blocks_total - st.kv_blocks_used;
  metrics_->active_streams = st.active_streams;
  metrics_->device_state_bytes = st.device_state_bytes;
  metrics_->prefix_cache_hits = st.prefix_cache.hits;
  metrics_->prefix_cache_misses = st.prefix_cache.misses;
  metrics_->prefix_cache_tokens_saved = st.prefix_cache.tokens_saved;
  metrics_->prefix_cache_evictions = st.prefix_cache.evictions;
  metrics_->prefix_cache_bytes = st.prefix_cache.bytes;
  metrics_->prefix_cache_entries = st.prefix_cache.entries;
  // The driver query is not free: at most once a second, not once per step.
  if (const absl::Time now = absl::Now(); now - device_memory_published_ >= absl::Seconds(1)) {
    device_memory_published_ = now;
    const DeviceMemoryInfo mem = DeviceMemory();
    metrics_->device_memory_used_bytes = mem.used_bytes;
    metrics_->device_memory_total_bytes = mem.total_bytes;
  }
}

}  // namespace flatstate::server
