#include "engine/runtime/mixers/mamba2_mixer.h"

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gated_linear.h"
#include "kernels/recurrent_gates.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<Mamba2Mixer<D>>> Mamba2Mixer<D>::Create(int layer,
                                                                       const LayerWeights& lw,
                                                                       const MixerResources<D>& res,
                                                                       DeviceWeights<D>* weights) {
  const SsmShape& ssm = res.config->ssm;
  auto m = std::unique_ptr<Mamba2Mixer>(new Mamba2Mixer(res));
  m->lay_ = res.layout->layers[layer];
  ASSIGN_OR_RETURN(m->wxbc_, weights->PrepareGemm(lw.wqkv));
  ASSIGN_OR_RETURN(m->wzdt_, weights->PrepareGemm(lw.wzba));
  ASSIGN_OR_RETURN(m->conv_, weights->Place(lw.conv, ssm.conv_dim() * ssm.conv_kernel));
  if (lw.conv_bias != nullptr) {
    ASSIGN_OR_RETURN(m->conv_bias_, weights->Place(lw.conv_bias, ssm.conv_dim()));
  }
  ASSIGN_OR_RETURN(m->A_log_, weights->Place(lw.A_log, ssm.heads));
  ASSIGN_OR_RETURN(m->dt_bias_, weights->Place(lw.dt_bias, ssm.heads));
  ASSIGN_OR_RETURN(m->D_, weights->Place(lw.ssm_D, ssm.heads));
  ASSIGN_OR_RETURN(m->norm_, weights->Place(lw.delta_norm, ssm.inner()));
  RETURN_IF_ERROR(m->out_.Bind(*res.config, lw, weights));
  return m;
}

template <Device D>
int64_t Mamba2Mixer<D>::ScratchFloats(int64_t rows) const {
  const SsmShape& ssm = res_.config->ssm;
  // xBC before and after the conv, z|dt, g and dt, v = dt x, the scan's output.
  return rows * (2 * ssm.conv_dim() + ssm.inner() + ssm.heads + 2 * ssm.heads + 2 * ssm.inner());
}

template <Device D>
void Mamba2Mixer<D>::Forward(const float* in, float* residual, const MixerStep<D>& step) {
  const ModelConfig& c = *res_.config;
  const SsmShape& ssm = c.ssm;
  const DeviceStep<D>& s = *step.step;
  const int64_t rows = s.rows, conv = ssm.conv_dim(), inner = ssm.inner(), H = ssm.heads;
  const int64_t zdt = inner + H;
  float* raw = step.scratch;        // [rows][conv]
  float* xbc = raw + rows * conv;   // [rows][conv]: x | B | C
  float* zbuf = xbc + rows * conv;  // [rows][inner + H]: z | dt_raw
  float* g = zbuf + rows * zdt;     // [rows][H]
  float* dt = g + rows * H;         // [rows][H]
  float* v = dt + rows * H;         // [rows][inner]
  float* y = v + rows * inner;      // [rows][inner]
  Gemm<D>(in, rows, wxbc_, raw, false, *step.pool);
  CausalConv<D>(raw, conv, ssm.conv_kernel, conv_, s.conv.on, static_cast<int>(s.conv.host.size()),
                static_cast<int64_t>(lay_.begin + lay_.conv), xbc);
  if (conv_bias_ != nullptr) AddBias<D>(xbc, conv_bias_, rows, conv);
  SiluRows<D>(xbc, rows, conv, conv);
  Gemm<D>(in, rows, wzdt_, zbuf, false, *step.pool);
  SsmGates<D>(zbuf + inner, zdt, rows, static_cast<int>(H), A_log_, dt_bias_, ssm.dt_min,
              ssm.dt_max, g, dt, H);
  ScaleHeads<D>(xbc, conv, dt, H, rows, static_cast<int>(H), ssm.head_dim, v, inner);
  GatedLinearBatch b;
  b.key_heads = ssm.groups;
  b.value_heads = ssm.heads;
  b.key_dim = ssm.state_size;
  b.value_dim = ssm.head_dim;
  b.scale = 1.f;
  b.q = xbc + inner + ssm.bc_width();  // C
  b.k = xbc + inner;                   // B
  b.qk_stride = conv;
  b.v = v;
  b.v_stride = inner;
  b.per_key_decay = false;
  b.g = g;
  b.g_stride = H;
  b.out = y;
  b.out_stride = inner;
  step.SetSequences(lay_, res_.chunk, &b);
  GatedLinear<D>(b, step.PoolFor(rows * H * ssm.state_size * ssm.head_dim));
  AddScaledHeads<D>(y, inner, xbc, conv, D_, rows, static_cast<int>(H), ssm.head_dim);
  const int group_dim = static_cast<int>(inner / ssm.groups);
  GatedHeadRmsNorm<D>(y, inner, zbuf, zdt, rows, ssm.groups, group_dim, norm_, group_dim,
                      c.rms_norm_eps, GateOrder::kGateThenNorm);
  out_.Apply(c, y, rows, *step.pool, residual);
}

template class Mamba2Mixer<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class Mamba2Mixer<Device::kCuda>;
#endif

}  // namespace flatstate
