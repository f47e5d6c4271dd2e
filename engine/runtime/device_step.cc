#include "engine/runtime/device_step.h"

#include "engine/util/status_macros.h"

namespace flatstate {

template <Device D>
absl::Status DeviceStep<D>::Build(const ModelConfig& c, int chunk,
                                  std::span<const SequenceRun> batch,
                                  const std::vector<int64_t>& row_start,
                                  DeviceStatePool<D>* states) {
  const int B = static_cast<int>(batch.size());
  rows = row_start.back();
  tokens.host.clear();
  out_rows.host.clear();
  for (int s = 0; s < B; ++s) {
    tokens.host.insert(tokens.host.end(), batch[s].tokens.begin(), batch[s].tokens.end());
    const int64_t first = batch[s].all_logits ? row_start[s] : row_start[s + 1] - 1;
    for (int64_t r = first; r < row_start[s + 1]; ++r) {
      out_rows.host.push_back(static_cast<int32_t>(r));
    }
  }
  RETURN_IF_ERROR(tokens.Stage());
  RETURN_IF_ERROR(out_rows.Stage());
  if (c.has_kv()) {
    tables.host.clear();
    paged.host.clear();
    for (int s = 0; s < B; ++s) {
      const SessionState* st = batch[s].state;
      const int64_t table = static_cast<int64_t>(tables.host.size());
      tables.host.insert(tables.host.end(), st->kv_blocks.begin(), st->kv_blocks.end());
      for (int64_t r = row_start[s]; r < row_start[s + 1]; ++r) {
        paged.host.push_back(PagedRow{r, st->position + (r - row_start[s]) + 1, table});
      }
    }
    RETURN_IF_ERROR(tables.Stage());
    RETURN_IF_ERROR(paged.Stage());
  }
  if (!c.has_state()) return absl::OkStatus();
  for (int s = 0; s < B; ++s) RETURN_IF_ERROR(states->Acquire(batch[s].state));
  decode.host.clear();
  prefill.host.clear();
  conv.host.clear();
  window.host.clear();
  row_seq.host.clear();
  row_t.host.clear();
  int64_t scratch = 0;
  for (int s = 0; s < B; ++s) {
    LinearSeq q;
    q.row = row_start[s];
    q.T = row_start[s + 1] - row_start[s];
    q.pos0 = batch[s].state->position;
    q.state = states->StateOf(batch[s].state);
    q.stepwise = batch[s].stepwise && q.T > 1;
    if (q.stepwise && batch[s].steps != nullptr) {
      q.steps = batch[s].steps;
      q.steps_stride = static_cast<int64_t>(c.state_floats());
    }
    conv.host.push_back(ConvSeq{q.row, q.T, q.state, q.steps, q.steps_stride});
    window.host.push_back(WindowSeq{q.row, q.T, q.pos0, q.state, q.steps, q.steps_stride});
    if (q.T == 1) {
      decode.host.push_back(q);
      continue;
    }
    if (c.feature_dim() > 0) {
      LinearHead shape;  // the scratch size depends on head_dim and feature_dim only
      shape.head_dim = c.head_dim;
      shape.feature_dim = c.feature_dim();
      q.head_scratch = static_cast<int64_t>(LinearAttentionScratch(shape, q.T, chunk));
    }
    q.scratch = scratch;
    scratch += q.head_scratch * c.num_attention_heads;
    for (int64_t t = 0; t < q.T; ++t) {
      row_seq.host.push_back(static_cast<int32_t>(prefill.host.size()));
      row_t.host.push_back(t);
    }
    prefill.host.push_back(q);
  }
  if constexpr (kLinearAttentionWorkspace<D>) {
    RETURN_IF_ERROR(workspace.Reserve(sizeof(float) * scratch));
  }
  RETURN_IF_ERROR(decode.Stage());
  RETURN_IF_ERROR(prefill.Stage());
  RETURN_IF_ERROR(conv.Stage());
  RETURN_IF_ERROR(window.Stage());
  RETURN_IF_ERROR(row_seq.Stage());
  return row_t.Stage();
}

template class DeviceStep<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class DeviceStep<Device::kCuda>;
#endif

}  // namespace flatstate
