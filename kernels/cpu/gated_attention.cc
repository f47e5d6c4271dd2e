// CPU body of kernels/gated_attention.h. The math is tools/flatstate_ref/gated.py's (recurrent
// step and `gated_chunked`), as specified in docs/kinds.md. GatedAttentionCpu is compiled per ISA
// (FLATSTATE_TARGET_CLONES) with its helpers inlined, and this file with -ffp-contract=off
// (kernels/CMakeLists.txt): every clone does the baseline's separate multiplies and adds in the
// same order, so the clones give the baseline's bits, only wider.
#include "kernels/gated_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/sequence_heads.h"
#include "kernels/cpu/target_clones.h"

namespace flatstate {
namespace {

using cpu::Dot;

// 1 / (1 + exp(-a)) without overflow; sigmoid(-a) is used for 1 - g, never 1 - sigmoid(a).
inline float Sigmoid(float a) {
  if (a >= 0.f) return 1.f / (1.f + std::exp(-a));
  const float e = std::exp(a);
  return e / (1.f + e);
}

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), <= 0.
inline float LogSigmoid(float x) { return std::min(x, 0.f) - std::log1p(std::exp(-std::abs(x))); }

// RFA's features of one vector: phi = sqrt(1/R) [sin u, cos u], u = scale * W (x / |x|).
inline __attribute__((always_inline)) void RfaFeatures(const LinearHead& h, const float* x,
                                                       float* phi) {
  const int hd = h.head_dim, R = h.feature_dim / 2;
  const float norm = std::max(std::sqrt(Dot(x, x, hd)), kGatedNormFloor);
  float xn[kMaxHeadDim];  // CheckGatedAttentionShape bounds hd
  for (int i = 0; i < hd; ++i) xn[i] = x[i] / norm;
  const float amp = std::sqrt(1.f / static_cast<float>(R));
  for (int r = 0; r < R; ++r) {
    const float u = h.rfa_scale * Dot(h.feature_proj + static_cast<int64_t>(r) * hd, xn, hd);
    phi[r] = amp * std::sin(u);
    phi[R + r] = amp * std::cos(u);
  }
}

// num[d] = sum_f fq[f] S[f][d].
inline __attribute__((always_inline)) void ReadState(const float* fq, const float* S, int F, int hd,
                                                     float* num) {
  std::fill(num, num + hd, 0.f);
  for (int f = 0; f < F; ++f) {
    const float* Sf = S + static_cast<int64_t>(f) * hd;
    for (int d = 0; d < hd; ++d) num[d] += fq[f] * Sf[d];
  }
}

inline float Denominator(float den, float mass) { return std::max(den, kGatedDenFloor * mass); }

}  // namespace

size_t GatedAttentionScratch(int head_dim, int feature_dim, int64_t T, int chunk) {
  const size_t F = feature_dim, hd = head_dim, L = std::min<int64_t>(T, chunk);
  // fq, fk (T*F); g, 1-g, log g, log(1-g), c, row mass (T each); A (L*L); num (hd).
  return T * (2 * F + 6) + L * L + hd;
}

FLATSTATE_TARGET_CLONES void GatedAttentionCpu(const LinearHead& h, const float* q, const float* k,
                                               const float* v, const float* gate, int64_t in_stride,
                                               int64_t T, int64_t pos0, int chunk, float* S,
                                               float* z, float* n, float* out, int64_t out_stride,
                                               float* scratch) {
  const int F = h.feature_dim, hd = h.head_dim;
  const int64_t L = std::min<int64_t>(T, chunk);
  float* fq = scratch;
  float* fk = fq + T * F;
  float* g = fk + T * F;
  float* omg = g + T;
  float* lg = omg + T;
  float* la = lg + T;
  float* c = la + T;
  float* mass = c + T;
  float* A = mass + T;
  float* num = A + L * L;
  for (int64_t t = 0; t < T; ++t) {
    RfaFeatures(h, q + t * in_stride, fq + t * F);
    RfaFeatures(h, k + t * in_stride, fk + t * F);
    const float a = gate[t * in_stride] + h.gate_bias;
    g[t] = Sigmoid(a);
    omg[t] = Sigmoid(-a);
    lg[t] = LogSigmoid(a);
    la[t] = LogSigmoid(-a);
  }
  // Chunks start at absolute multiples of `chunk`; a 1-token chunk is the recurrent step.
  for (int64_t s = 0, e = 0; s < T; s = e) {
    e = std::min(T, s + (chunk - (pos0 + s) % chunk));
    const int64_t len = e - s;
    if (len == 1) {
      const float* fks = fk + s * F;
      const float* vs = v + s * in_stride;
      for (int f = 0; f < F; ++f) {
        const float kw = omg[s] * fks[f];
        float* Sf = S + static_cast<int64_t>(f) * hd;
        for (int d = 0; d < hd; ++d) Sf[d] = g[s] * Sf[d] + kw * vs[d];
        z[f] = g[s] * z[f] + kw;
      }
      *n = g[s] * *n + omg[s];
      ReadState(fq + s * F, S, F, hd, num);
      const float den = Denominator(Dot(fq + s * F, z, F), *n);
      float* o = out + s * out_stride;
      for (int d = 0; d < hd; ++d) o[d] = num[d] / den;
      continue;
    }
    // Cumulative log gates within the chunk: c_i = lg_s + ... + lg_{s+i} (non-increasing).
    float run = 0.f;
    for (int64_t i = 0; i < len; ++i) {
      run += lg[s + i];
      c[s + i] = run;
    }
    // A[i][j] = exp(c_i - c_j + la_j) (fq_i . fk_j), and the mass of row i's keys in the chunk.
    for (int64_t i = 0; i < len; ++i) {
      const float* fqi = fq + (s + i) * F;
      float m = 0.f;
      for (int64_t j = 0; j <= i; ++j) {
        const float w = std::exp(c[s + i] - c[s + j] + la[s + j]);
        A[i * L + j] = w * Dot(fqi, fk + (s + j) * F, F);
        m += w;
      }
      mass[s + i] = m;
    }
    for (int64_t i = 0; i < len; ++i) {
      const float* fqi = fq + (s + i) * F;
      const float inter = std::exp(c[s + i]);
      ReadState(fqi, S, F, hd, num);
      float den = Dot(fqi, z, F) * inter;
      for (int d = 0; d < hd; ++d) num[d] *= inter;
      for (int64_t j = 0; j <= i; ++j) {
        const float a = A[i * L + j];
        const float* vj = v + (s + j) * in_stride;
        for (int d = 0; d < hd; ++d) num[d] += a * vj[d];
        den += a;
      }
      const float dn = Denominator(den, inter * *n + mass[s + i]);
      float* o = out + (s + i) * out_stride;
      for (int d = 0; d < hd; ++d) o[d] = num[d] / dn;
    }
    // State to the end of the chunk.
    const float c_last = c[e - 1];
    const float decay = std::exp(c_last);
    for (int64_t x = 0; x < static_cast<int64_t>(F) * hd; ++x) S[x] *= decay;
    for (int f = 0; f < F; ++f) z[f] *= decay;
    *n *= decay;
    for (int64_t j = s; j < e; ++j) {
      const float w = std::exp(c_last - c[j] + la[j]);
      const float* fkj = fk + j * F;
      const float* vj = v + j * in_stride;
      for (int f = 0; f < F; ++f) {
        const float kw = w * fkj[f];
        float* Sf = S + static_cast<int64_t>(f) * hd;
        for (int d = 0; d < hd; ++d) Sf[d] += kw * vj[d];
        z[f] += kw;
      }
      *n += w;
    }
  }
}

template <>
absl::Status CheckGatedAttentionShape<Device::kCpu>(int head_dim, int feature_dim) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", head_dim, " is outside [1, ", kMaxHeadDim, "]"));
  }
  if (feature_dim < 2 || feature_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gated feature_dim ", feature_dim, " must be 2 * rfa_num_features"));
  }
  return absl::OkStatus();
}

template <>
void GatedAttention<Device::kCpu>(const LinearBatch& b, const Parallel& par) {
  cpu::ForEachSequenceHead(
      b, par,
      [&](const LinearSeq& sq) {
        return GatedAttentionScratch(b.head_dim, b.feature_dim, sq.T, b.chunk);
      },
      [&](const LinearSeq& sq, int h, float* base, float* scratch) {
        const LinearHead& head = b.heads[h];
        const int F = head.feature_dim, hd = head.head_dim;
        const int64_t off = sq.row * b.in_stride + static_cast<int64_t>(h) * hd;
        GatedAttentionCpu(head, b.q + off, b.k + off, b.v + off, b.gate + sq.row * b.in_stride + h,
                          b.in_stride, sq.T, sq.pos0, b.chunk,
                          base + b.s_off + static_cast<int64_t>(h) * F * hd,
                          base + b.z_off + static_cast<int64_t>(h) * F, base + b.m_off + h,
                          b.out + sq.row * b.out_stride + h * hd, b.out_stride, scratch);
        cpu::RecordStep(sq, base + b.s_off + static_cast<int64_t>(h) * F * hd, int64_t{F} * hd);
        cpu::RecordStep(sq, base + b.z_off + static_cast<int64_t>(h) * F, F);
        cpu::RecordStep(sq, base + b.m_off + h, 1);
      });
}

}  // namespace flatstate
