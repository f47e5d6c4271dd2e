#include "engine/runtime/mixers/rwkv7_mixer.h"

#include <algorithm>

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/rwkv7.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<Rwkv7Mixer<D>>> Rwkv7Mixer<D>::Create(int layer,
                                                                     const LayerWeights& lw,
                                                                     const MixerResources<D>& res,
                                                                     DeviceWeights<D>* weights) {
  const Rwkv7Shape& rw = res.config->rwkv;
  const int64_t Dm = rw.width();
  const LayerWeights::Rwkv7& t = lw.rwkv;
  auto m = std::unique_ptr<Rwkv7Mixer>(new Rwkv7Mixer(res));
  m->lay_ = res.layout->layers[layer];
  m->first_ = layer == 0;
  m->shift_taps_.resize(static_cast<size_t>(2 * Dm));
  for (int64_t c = 0; c < Dm; ++c) {
    m->shift_taps_[2 * c] = 1.f;
    m->shift_taps_[2 * c + 1] = -1.f;
  }
  ASSIGN_OR_RETURN(m->shift_, weights->Place(m->shift_taps_.data(), 2 * Dm));
  ASSIGN_OR_RETURN(m->mix_, weights->Place(t.mix, 6 * Dm));
  ASSIGN_OR_RETURN(m->wr_, weights->PrepareGemm(t.wr));
  ASSIGN_OR_RETURN(m->wk_, weights->PrepareGemm(t.wk));
  ASSIGN_OR_RETURN(m->wv_, weights->PrepareGemm(t.wv));
  ASSIGN_OR_RETURN(m->w1_, weights->PrepareGemm(t.w_lora1));
  ASSIGN_OR_RETURN(m->w2_, weights->PrepareGemm(t.w_lora2));
  ASSIGN_OR_RETURN(m->a1_, weights->PrepareGemm(t.a_lora1));
  ASSIGN_OR_RETURN(m->a2_, weights->PrepareGemm(t.a_lora2));
  if (!m->first_) {
    ASSIGN_OR_RETURN(m->v1_, weights->PrepareGemm(t.v_lora1));
    ASSIGN_OR_RETURN(m->v2_, weights->PrepareGemm(t.v_lora2));
    ASSIGN_OR_RETURN(m->v_bias_, weights->Place(t.v_bias, Dm));
  }
  ASSIGN_OR_RETURN(m->g1_, weights->PrepareGemm(t.g_lora1));
  ASSIGN_OR_RETURN(m->g2_, weights->PrepareGemm(t.g_lora2));
  ASSIGN_OR_RETURN(m->w_bias_, weights->Place(t.w_bias, Dm));
  ASSIGN_OR_RETURN(m->a_bias_, weights->Place(t.a_bias, Dm));
  ASSIGN_OR_RETURN(m->k_k_, weights->Place(t.k_k, Dm));
  ASSIGN_OR_RETURN(m->k_a_, weights->Place(t.k_a, Dm));
  ASSIGN_OR_RETURN(m->r_k_, weights->Place(t.r_k, Dm));
  ASSIGN_OR_RETURN(m->gn_w_, weights->Place(t.gn_w, Dm));
  ASSIGN_OR_RETURN(m->gn_b_, weights->Place(t.gn_b, Dm));
  RETURN_IF_ERROR(m->out_.Bind(*res.config, lw, weights));
  return m;
}

template <Device D>
int64_t Rwkv7Mixer<D>::ScratchFloats(int64_t rows) const {
  const Rwkv7Shape& rw = res_.config->rwkv;
  const int64_t rank = std::max({rw.decay_rank, rw.a_rank, rw.v_rank, rw.gate_rank});
  // d, the six mixes, r, k, v, logw, a, g, kk, o, the LoRA output z, and the LoRA's inner rows.
  return rows * (16 * rw.width() + rank);
}

template <Device D>
int64_t Rwkv7Mixer<D>::CarryFloats(int64_t rows) const {
  return rows * res_.config->rwkv.width();  // v_first
}

template <Device D>
void Rwkv7Mixer<D>::Lora(const float* in, int64_t rows, const GemmWeight<D>& w1,
                         const GemmWeight<D>& w2, int64_t rank, bool tanh_inner, bool sigmoid_inner,
                         const float* bias, float* tmp, float* out, const Parallel& par) const {
  Gemm<D>(in, rows, w1, tmp, false, par);
  if (tanh_inner) ActivateRows<D>(tmp, rows, rank, Activation::kTanh);
  if (sigmoid_inner) ActivateRows<D>(tmp, rows, rank, Activation::kSigmoid);
  Gemm<D>(tmp, rows, w2, out, false, par);
  if (bias != nullptr) AddBias<D>(out, bias, rows, res_.config->rwkv.width());
}

template <Device D>
void Rwkv7Mixer<D>::Forward(const float* in, float* residual, const MixerStep<D>& step) {
  const ModelConfig& c = *res_.config;
  const Rwkv7Shape& rw = c.rwkv;
  const DeviceStep<D>& s = *step.step;
  const Parallel& par = *step.pool;
  const int64_t rows = s.rows, Dm = rw.width(), RD = rows * Dm;
  float* d = step.scratch;  // [rows][D] each from here
  float* mixes = d + RD;    // [6][rows][D]: xr, xw, xk, xv, xa, xg
  float* r = mixes + 6 * RD;
  float* k = r + RD;
  float* v_own = k + RD;
  float* logw = v_own + RD;
  float* a = logw + RD;
  float* g = a + RD;
  float* kk = g + RD;
  float* o = kk + RD;
  float* z = o + RD;
  float* tmp = z + RD;  // [rows][rank]
  const float* xr = mixes;
  const float* xw = mixes + RD;
  const float* xk = mixes + 2 * RD;
  const float* xv = mixes + 3 * RD;
  const float* xa = mixes + 4 * RD;
  const float* xg = mixes + 5 * RD;
  // Layer 0's v is v_first for the layers after it: it lives in the step's carry.
  float* v = first_ ? step.carry : v_own;

  CausalConv<D>(in, Dm, 2, shift_, s.conv.on, static_cast<int>(s.conv.host.size()),
                static_cast<int64_t>(lay_.begin + lay_.conv), d);
  // The row-wise ops below run over row ranges (MixerStep::ForRows): the same bits as one call.
  const int64_t ew = RD * kElementWork;
  step.ForRows(rows, 6 * ew, [&](int64_t r0, int64_t r1) {
    if (r1 - r0 == rows) return TokenShiftMix<D>(in, d, mix_, 6, rows, Dm, mixes);
    for (int j = 0; j < 6; ++j) {  // mixes is [6][rows][D]: one mix at a time for a row range
      TokenShiftMix<D>(in + r0 * Dm, d + r0 * Dm, mix_ + j * Dm, 1, r1 - r0, Dm,
                       mixes + j * RD + r0 * Dm);
    }
  });
  Gemm<D>(xr, rows, wr_, r, false, par);
  Gemm<D>(xk, rows, wk_, k, false, par);
  Gemm<D>(xv, rows, wv_, v, false, par);
  Lora(xw, rows, w1_, w2_, rw.decay_rank, true, false, w_bias_, tmp, logw,
       step.PoolFor(RD * rw.decay_rank));
  step.ForRows(rows, ew, [&](int64_t r0, int64_t r1) {
    ActivateRows<D>(logw + r0 * Dm, r1 - r0, Dm, Activation::kRwkvLogDecay);
  });
  if (!first_) {
    Lora(xv, rows, v1_, v2_, rw.v_rank, false, false, v_bias_, tmp, z,
         step.PoolFor(RD * rw.v_rank));
    step.ForRows(rows, ew, [&](int64_t r0, int64_t r1) {
      LerpToward<D>(v + r0 * Dm, step.carry + r0 * Dm, z + r0 * Dm, r1 - r0, Dm);
    });
  }
  Lora(xa, rows, a1_, a2_, rw.a_rank, false, false, a_bias_, tmp, a, step.PoolFor(RD * rw.a_rank));
  step.ForRows(rows, ew, [&](int64_t r0, int64_t r1) {
    ActivateRows<D>(a + r0 * Dm, r1 - r0, Dm, Activation::kSigmoid);
  });
  Lora(xg, rows, g1_, g2_, rw.gate_rank, false, true, nullptr, tmp, g,
       step.PoolFor(RD * rw.gate_rank));
  // (The LoRAs run on the calling thread for a few rows: waking the pool costs more than they do.)
  step.ForRows(rows, ew, [&](int64_t r0, int64_t r1) {
    Rwkv7Keys<D>(k + r0 * Dm, a + r0 * Dm, k_k_, k_a_, r1 - r0, rw.heads, rw.head_dim, rw.fused_l2,
                 kk + r0 * Dm);
  });

  Rwkv7Batch b;
  b.key_heads = b.value_heads = rw.heads;
  b.key_dim = b.value_dim = rw.head_dim;
  b.q = r;
  b.k = k;
  b.qk_stride = Dm;
  b.v = v;
  b.v_stride = Dm;
  b.logw = logw;
  b.kk = kk;
  b.a = a;
  b.wka_stride = Dm;
  b.out = o;
  b.out_stride = Dm;
  step.SetSequences(lay_, res_.chunk, &b);
  Rwkv7Recurrence<D>(b, step.PoolFor(rows * Dm * rw.head_dim));
  step.ForRows(rows, ew, [&](int64_t r0, int64_t r1) {
    const int64_t at = r0 * Dm;
    Rwkv7Output<D>(o + at, r + at, k + at, v + at, g + at, r_k_, gn_w_, gn_b_, r1 - r0, rw.heads,
                   rw.head_dim, static_cast<float>(rw.head_dim) * c.rms_norm_eps);
  });
  out_.Apply(c, o, rows, par, residual);
}

template class Rwkv7Mixer<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class Rwkv7Mixer<Device::kCuda>;
#endif

}  // namespace flatstate
