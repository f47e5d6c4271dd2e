#include "engine/runtime/mixers/softmax_mixer.h"

#include "engine/util/status_macros.h"
#include "kernels/recurrent_gates.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<SoftmaxMixer<D>>> SoftmaxMixer<D>::Create(
    int layer, const LayerWeights& lw, const MixerResources<D>& res, DeviceWeights<D>* weights) {
  const ModelConfig& c = *res.config;
  auto m = std::unique_ptr<SoftmaxMixer>(new SoftmaxMixer(res));
  m->kv_layer_ = c.kv_layer_index(layer);  // the pool holds the softmax layers only
  // With an output gate (Qwen3.5) the gate rows follow q|k|v in wqkv.
  m->qkv_.width = int64_t{c.q_dim()} * (c.attn_output_gate ? 2 : 1) + 2 * int64_t{c.kv_dim()};
  RETURN_IF_ERROR(m->qkv_.BindVectors(c, layer, lw, *res.layout, weights));
  ASSIGN_OR_RETURN(m->qkv_.w, weights->PrepareGemm(lw.wqkv));
  RETURN_IF_ERROR(m->out_.Bind(c, lw, weights));
  return m;
}

template <Device D>
int64_t SoftmaxMixer<D>::ScratchFloats(int64_t rows) const {
  const ModelConfig& c = *res_.config;
  return qkv_.ScratchFloats(c, rows) + rows * qkv_.width + rows * c.q_dim();
}

template <Device D>
void SoftmaxMixer<D>::Forward(const float* in, float* residual, const MixerStep<D>& step) {
  const ModelConfig& c = *res_.config;
  const DeviceStep<D>& s = *step.step;
  const int64_t rows = s.rows;
  float* qkv = step.scratch + qkv_.ScratchFloats(c, rows);
  float* att = qkv + rows * qkv_.width;
  qkv_.Apply(c, in, step, step.scratch, qkv);
  int64_t attended = 0;  // (query row, key row) pairs
  for (const PagedRow& r : s.paged.host) attended += r.ctx;
  const Parallel& par = step.PoolFor(attended * c.q_dim());
  RopeAndWriteKv<D>(*res_.kv, s.tables.on, s.paged.on, rows, qkv, qkv_.width, kv_layer_, res_.shape,
                    res_.rope, par);
  PagedAttention<D>(*res_.kv, s.tables.on, s.paged.on, rows, qkv, qkv_.width, att, c.q_dim(),
                    kv_layer_, res_.shape, par);
  if (c.attn_output_gate) {
    SigmoidMulRows<D>(att, c.q_dim(), qkv + c.q_dim() + 2 * c.kv_dim(), qkv_.width, rows,
                      c.q_dim());
  }
  out_.Apply(c, att, rows, *step.pool, residual);
}

template class SoftmaxMixer<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class SoftmaxMixer<Device::kCuda>;
#endif

}  // namespace flatstate
