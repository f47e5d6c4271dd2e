// CPU body of kernels/linear_attention.h. LinearAttentionCpu is compiled per ISA
// (FLATSTATE_TARGET_CLONES) with its helpers inlined, and this file with -ffp-contract=off
// (kernels/CMakeLists.txt): every clone does the baseline's separate multiplies and adds in the
// same order, so the clones give the baseline's bits, only wider.
#include "kernels/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/sequence_heads.h"
#include "kernels/cpu/target_clones.h"

namespace flatstate {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(a - b) with a == -inf giving 0 (b is always finite where used).
inline float DecayExp(float a, float b) { return a == kNegInf ? 0.f : std::exp(a - b); }

using cpu::Dot;

// Feature maps for one token: fq, fk (F floats), m (key log-stabiliser), vv (hd floats).
inline __attribute__((always_inline)) void Features(const LinearHead& h, const float* q,
                                                    const float* k, const float* v, int64_t pos,
                                                    float* fq, float* fk, float* m, float* vv) {
  const int hd = h.head_dim, F = h.feature_dim;
  std::memcpy(vv, v, sizeof(float) * hd);
  *m = 0.f;
  switch (h.map) {
    case FeatureMap::kEluPlusOne:
      EluPlusOneFeatures(q, k, hd, 0, 1, fq, fk);
      break;
    case FeatureMap::kCosformer: {
      const double ang = static_cast<double>(pos) * h.cosformer_step;
      const float c = static_cast<float>(std::cos(ang)), s = static_cast<float>(std::sin(ang));
      CosformerFeatures(q, k, hd, c, s, 0, 1, fq, fk);
      break;
    }
    case FeatureMap::kCosine: {
      const float nq = std::max(std::sqrt(Dot(q, q, hd)), 1e-6f);
      const float nk = std::max(std::sqrt(Dot(k, k, hd)), 1e-6f);
      for (int i = 0; i < hd; ++i) {
        fq[i] = q[i] / nq;
        fk[i] = k[i] / nk;
      }
      const float scale =
          static_cast<float>(std::pow(static_cast<double>(pos + 1), -h.cosine_exponent));
      for (int i = 0; i < hd; ++i) vv[i] *= scale;
      break;
    }
    case FeatureMap::kFavor: {
      const float s = static_cast<float>(std::pow(static_cast<double>(hd), -0.25));
      float qs[kMaxHeadDim], ks[kMaxHeadDim];  // CheckLinearAttentionShape bounds hd
      float q2 = 0.f, k2 = 0.f;
      for (int i = 0; i < hd; ++i) {
        qs[i] = q[i] * s;
        ks[i] = k[i] * s;
        q2 += qs[i] * qs[i];
        k2 += ks[i] * ks[i];
      }
      float mq = kNegInf, mk = kNegInf;
      for (int f = 0; f < F; ++f) {
        const float* w = h.feature_proj + static_cast<int64_t>(f) * hd;
        fq[f] = Dot(w, qs, hd) - 0.5f * q2;
        fk[f] = Dot(w, ks, hd) - 0.5f * k2;
        mq = std::max(mq, fq[f]);
        mk = std::max(mk, fk[f]);
      }
      for (int f = 0; f < F; ++f) {
        fq[f] = std::exp(fq[f] - mq);
        fk[f] = std::exp(fk[f] - mk);
      }
      *m = mk;
      break;
    }
  }
}

// The recurrent step for one token's features; also used for every 1-token chunk, so a token
// gives the same floats whether it ran alone or inside a longer call.
inline __attribute__((always_inline)) void RecurrentStep(const LinearHead& h, const float* fq,
                                                         const float* fk, float m, const float* vv,
                                                         float* S, float* z, float* M, float* num,
                                                         float* out) {
  const int F = h.feature_dim, hd = h.head_dim;
  const bool favor = h.map == FeatureMap::kFavor;
  const float M_new = favor ? std::max(*M, m) : *M;
  const float scale = favor ? DecayExp(*M, M_new) : 1.f;
  const float kw_scale = favor ? std::exp(m - M_new) : 1.f;
  // One pass over S: each feature row updated, then read into num while it is in registers
  // (num's sums still run over f ascending: the bits of an update pass and a read pass).
  std::fill(num, num + hd, 0.f);
  for (int f = 0; f < F; ++f) {
    const float kw = fk[f] * kw_scale, qf = fq[f];
    float* __restrict Sf = S + static_cast<int64_t>(f) * hd;
    const float* __restrict v = vv;
    float* __restrict n = num;
    if (favor) {
      for (int d = 0; d < hd; ++d) {
        const float x = Sf[d] * scale + kw * v[d];
        Sf[d] = x;
        n[d] += qf * x;
      }
      z[f] = z[f] * scale + kw;
    } else {
      for (int d = 0; d < hd; ++d) {
        const float x = Sf[d] + kw * v[d];
        Sf[d] = x;
        n[d] += qf * x;
      }
      z[f] += kw;
    }
  }
  *M = M_new;
  if (h.use_den) {
    const float den = Dot(fq, z, F) + h.eps;
    for (int d = 0; d < hd; ++d) out[d] = num[d] / den;
  } else {
    std::memcpy(out, num, sizeof(float) * hd);
  }
}

}  // namespace

size_t LinearAttentionScratch(const LinearHead& h, int64_t T, int chunk) {
  const size_t F = h.feature_dim, hd = h.head_dim, L = std::min<int64_t>(T, chunk);
  // fq, fk (T*F), m, Mi (T), vv (T*hd), A (L*L), row accumulators (hd + F).
  return T * (2 * F + 2 + hd) + L * L + hd + F;
}

FLATSTATE_TARGET_CLONES void LinearAttentionCpu(const LinearHead& h, const float* q, const float* k,
                                                const float* v, int64_t in_stride, int64_t T,
                                                int64_t pos0, int chunk, float* S, float* z,
                                                float* M, float* out, int64_t out_stride,
                                                float* scratch) {
  const int F = h.feature_dim, hd = h.head_dim;
  const bool favor = h.map == FeatureMap::kFavor;
  float* fq = scratch;
  float* fk = fq + T * F;
  float* m = fk + T * F;
  float* Mi = m + T;
  float* vv = Mi + T;
  const int64_t L = std::min<int64_t>(T, chunk);
  float* A = vv + T * hd;
  float* num = A + L * L;
  for (int64_t t = 0; t < T; ++t) {
    Features(h, q + t * in_stride, k + t * in_stride, v + t * in_stride, pos0 + t, fq + t * F,
             fk + t * F, m + t, vv + t * hd);
  }

  // Chunk boundaries sit at absolute positions that are multiples of `chunk`, so a prompt gives
  // the same floats however a scheduler splits it at such boundaries.
  for (int64_t s = 0, e = 0; s < T; s = e) {
    e = std::min(T, s + (chunk - (pos0 + s) % chunk));
    const int64_t n = e - s;
    if (n == 1) {
      RecurrentStep(h, fq + s * F, fk + s * F, m[s], vv + s * hd, S, z, M, num,
                    out + s * out_stride);
      continue;
    }
    const float M_prev = *M;
    float run = M_prev;
    for (int64_t i = s; i < e; ++i) {
      if (favor) run = std::max(run, m[i]);
      Mi[i] = run;
    }
    // Intra-chunk scores A[i][j] = (fq_i . fk_j) * exp(m_j - M_i), j <= i.
    for (int64_t i = 0; i < n; ++i) {
      const float* fqi = fq + (s + i) * F;
      for (int64_t j = 0; j <= i; ++j) {
        float a = Dot(fqi, fk + (s + j) * F, F);
        if (favor) a *= std::exp(m[s + j] - Mi[s + i]);
        A[i * L + j] = a;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* fqi = fq + (s + i) * F;
      const float inter = favor ? DecayExp(M_prev, Mi[s + i]) : 1.f;
      std::fill(num, num + hd, 0.f);
      for (int f = 0; f < F; ++f) {
        const float* Sf = S + static_cast<int64_t>(f) * hd;
        for (int d = 0; d < hd; ++d) num[d] += fqi[f] * Sf[d];
      }
      float den = Dot(fqi, z, F) * inter;
      for (int d = 0; d < hd; ++d) num[d] *= inter;
      for (int64_t j = 0; j <= i; ++j) {
        const float a = A[i * L + j];
        const float* vj = vv + (s + j) * hd;
        for (int d = 0; d < hd; ++d) num[d] += a * vj[d];
        den += a;
      }
      float* o = out + (s + i) * out_stride;
      if (h.use_den) {
        const float inv = den + h.eps;
        for (int d = 0; d < hd; ++d) o[d] = num[d] / inv;
      } else {
        std::memcpy(o, num, sizeof(float) * hd);
      }
    }
    // State update to the end of the chunk.
    const float M_last = Mi[e - 1];
    const float scale = favor ? DecayExp(M_prev, M_last) : 1.f;
    if (favor) {
      for (int64_t x = 0; x < static_cast<int64_t>(F) * hd; ++x) S[x] *= scale;
      for (int f = 0; f < F; ++f) z[f] *= scale;
    }
    for (int64_t j = s; j < e; ++j) {
      const float w = favor ? std::exp(m[j] - M_last) : 1.f;
      const float* fkj = fk + j * F;
      const float* vj = vv + j * hd;
      for (int f = 0; f < F; ++f) {
        const float kw = fkj[f] * w;
        float* Sf = S + static_cast<int64_t>(f) * hd;
        for (int d = 0; d < hd; ++d) Sf[d] += kw * vj[d];
        z[f] += kw;
      }
    }
    *M = M_last;
  }
}

template <>
absl::Status CheckLinearAttentionShape<Device::kCpu>(int head_dim, int /*feature_dim*/,
                                                     int /*chunk*/) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", head_dim, " is outside [1, ", kMaxHeadDim, "]"));
  }
  return absl::OkStatus();
}

template <>
void LinearAttention<Device::kCpu>(const LinearBatch& b, const Parallel& par) {
  cpu::ForEachSequenceHead(
      b, par,
      [&](const LinearSeq& sq) { return LinearAttentionScratch(b.heads[0], sq.T, b.chunk); },
      [&](const LinearSeq& sq, int h, float* base, float* scratch) {
        const LinearHead& head = b.heads[h];
        const int F = head.feature_dim, hd = head.head_dim;
        const int64_t off = sq.row * b.in_stride + static_cast<int64_t>(h) * hd;
        LinearAttentionCpu(head, b.q + off, b.k + off, b.v + off, b.in_stride, sq.T, sq.pos0,
                           b.chunk, base + b.s_off + static_cast<int64_t>(h) * F * hd,
                           base + b.z_off + static_cast<int64_t>(h) * F, base + b.m_off + h,
                           b.out + sq.row * b.out_stride + h * hd, b.out_stride, scratch);
        cpu::RecordStep(sq, base + b.s_off + static_cast<int64_t>(h) * F * hd, int64_t{F} * hd);
        cpu::RecordStep(sq, base + b.z_off + static_cast<int64_t>(h) * F, F);
        cpu::RecordStep(sq, base + b.m_off + h, 1);
      });
}

}  // namespace flatstate
