// The CPU body of the gated delta rule (kernels/gated_delta.h): plain loops over contiguous
// value rows (the compiler vectorises them; no reassociation, so the order of every sum is the
// source's) and cpu::Dot for dot products. GatedDeltaRuleCpu is compiled per ISA
// (FLATSTATE_TARGET_CLONES) with its helpers inlined, and this file with -ffp-contract=off
// (kernels/CMakeLists.txt): every clone does the same separate multiplies and adds, so the AVX2
// and AVX-512 clones give the bits of the baseline one, only wider.
#include "kernels/gated_delta.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/sequence_heads.h"
#include "kernels/cpu/target_clones.h"

namespace flatstate {
namespace {

using cpu::Dot;

// dst = src * scale / sqrt(sum src^2 + 1e-6) (l2norm), or src * scale.
inline __attribute__((always_inline)) void Normalise(const float* src, int n, bool l2norm,
                                                     float scale, float* dst) {
  float f = scale;
  if (l2norm) f = scale / std::sqrt(Dot(src, src, n) + 1e-6f);
  for (int i = 0; i < n; ++i) dst[i] = src[i] * f;
}

// y[j] += a * x[j], j < n.
inline __attribute__((always_inline)) void Axpy(float a, const float* x, int n, float* y) {
  for (int j = 0; j < n; ++j) y[j] += a * x[j];
}

// One token: S <- exp(g) S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q. `tmp` holds 2 * Kd
// + Vd floats. Two passes over S, each doing a row's work in one loop while the row is in
// registers (the same operations in the same order as a loop per operation, so the same bits).
inline __attribute__((always_inline)) void Step(int Kd, int Vd, float decay, float beta,
                                                const float* __restrict q,
                                                const float* __restrict k,
                                                const float* __restrict v, float* __restrict S,
                                                float* __restrict o, float* __restrict tmp) {
  float* __restrict u = tmp;  // Vd: first S^T k, then the update
  std::fill(u, u + Vd, 0.f);
  for (int i = 0; i < Kd; ++i) {
    float* __restrict Si = S + static_cast<int64_t>(i) * Vd;
    const float ki = k[i];
    for (int j = 0; j < Vd; ++j) {
      const float s = Si[j] * decay;
      Si[j] = s;
      u[j] += ki * s;
    }
  }
  for (int j = 0; j < Vd; ++j) u[j] = beta * (v[j] - u[j]);
  std::fill(o, o + Vd, 0.f);
  for (int i = 0; i < Kd; ++i) {
    float* __restrict Si = S + static_cast<int64_t>(i) * Vd;
    const float ki = k[i], qi = q[i];
    for (int j = 0; j < Vd; ++j) {
      const float s = Si[j] + ki * u[j];
      Si[j] = s;
      o[j] += qi * s;
    }
  }
}

}  // namespace

size_t GatedDeltaScratch(int key_dim, int value_dim, int64_t T, int chunk) {
  const int64_t L = std::min<int64_t>(T, chunk);
  // q, k normalised (L x Kd each); G, beta (L); KS|QS, U (3 L x Vd); A (L x L); Vd for Step.
  return static_cast<size_t>(2 * L * key_dim + 2 * L + 3 * L * value_dim + L * L + value_dim +
                             2 * key_dim);
}

FLATSTATE_TARGET_CLONES void GatedDeltaRuleCpu(int Kd, int Vd, float scale, bool l2norm_qk,
                                               const float* q, const float* k, int64_t qk_stride,
                                               const float* v, int64_t v_stride, const float* g,
                                               const float* beta, int64_t gb_stride, int64_t T,
                                               int64_t pos0, int chunk, float* S, float* out,
                                               int64_t out_stride, float* scratch) {
  if (T == 1) {
    float* qn = scratch;
    float* kn = qn + Kd;
    Normalise(q, Kd, l2norm_qk, scale, qn);
    Normalise(k, Kd, l2norm_qk, 1.f, kn);
    const float decay = g == nullptr ? 1.f : std::exp(g[0]);
    Step(Kd, Vd, decay, beta[0], qn, kn, v, S, out, kn + Kd);
    return;
  }
  const int64_t C = chunk;
  for (int64_t t0 = 0; t0 < T;) {
    // This chunk: up to the next multiple of C in absolute positions.
    const int64_t L = std::min(T - t0, C - (pos0 + t0) % C);
    float* Q = scratch;       // [L][Kd]
    float* K = Q + L * Kd;    // [L][Kd]
    float* G = K + L * Kd;    // [L]
    float* B = G + L;         // [L]
    float* KS = B + L;        // [L][Vd]: K S_0, then the right-hand side R
    float* QS = KS + L * Vd;  // [L][Vd]: Q S_0, then the output
    float* U = QS + L * Vd;   // [L][Vd]
    float* A = U + L * Vd;    // [L][L]
    float acc = 0.f;
    for (int64_t t = 0; t < L; ++t) {
      const int64_t r = t0 + t;
      Normalise(q + r * qk_stride, Kd, l2norm_qk, scale, Q + t * Kd);
      Normalise(k + r * qk_stride, Kd, l2norm_qk, 1.f, K + t * Kd);
      if (g != nullptr) acc += g[r * gb_stride];
      G[t] = acc;
      B[t] = beta[r * gb_stride];
    }
    // K S_0 and Q S_0.
    std::fill(KS, KS + 2 * L * Vd, 0.f);
    for (int64_t t = 0; t < L; ++t) {
      for (int i = 0; i < Kd; ++i) {
        const float* Si = S + static_cast<int64_t>(i) * Vd;
        Axpy(K[t * Kd + i], Si, Vd, KS + t * Vd);
        Axpy(Q[t * Kd + i], Si, Vd, QS + t * Vd);
      }
    }
    // R_t = beta_t (v_t - exp(G_t) (K S_0)_t); A; U by forward substitution.
    for (int64_t t = 0; t < L; ++t) {
      const float eg = std::exp(G[t]);
      const float* vt = v + (t0 + t) * v_stride;
      float* R = KS + t * Vd;
      for (int j = 0; j < Vd; ++j) R[j] = B[t] * (vt[j] - eg * R[j]);
      for (int64_t s = 0; s < t; ++s) {
        A[t * L + s] = B[t] * std::exp(G[t] - G[s]) * Dot(K + t * Kd, K + s * Kd, Kd);
      }
    }
    for (int64_t t = 0; t < L; ++t) {
      float* Ut = U + t * Vd;
      std::memcpy(Ut, KS + t * Vd, sizeof(float) * Vd);
      for (int64_t s = 0; s < t; ++s) Axpy(-A[t * L + s], U + s * Vd, Vd, Ut);
    }
    // o_t = exp(G_t) (Q S_0)_t + sum_{s<=t} exp(G_t - G_s) (q_t . k_s) u_s.
    for (int64_t t = 0; t < L; ++t) {
      float* O = QS + t * Vd;
      const float eg = std::exp(G[t]);
      for (int j = 0; j < Vd; ++j) O[j] *= eg;
      for (int64_t s = 0; s <= t; ++s) {
        Axpy(std::exp(G[t] - G[s]) * Dot(Q + t * Kd, K + s * Kd, Kd), U + s * Vd, Vd, O);
      }
      std::memcpy(out + (t0 + t) * out_stride, O, sizeof(float) * Vd);
    }
    // S_L = exp(G_L) S_0 + sum_s exp(G_L - G_s) k_s u_s^T.
    const float last = G[L - 1];
    const float eL = std::exp(last);
    for (int i = 0; i < Kd; ++i) {
      float* Si = S + static_cast<int64_t>(i) * Vd;
      for (int j = 0; j < Vd; ++j) Si[j] *= eL;
      for (int64_t s = 0; s < L; ++s) {
        Axpy(std::exp(last - G[s]) * K[s * Kd + i], U + s * Vd, Vd, Si);
      }
    }
    t0 += L;
  }
}

template <>
absl::Status CheckGatedDeltaShape<Device::kCpu>(int key_heads, int value_heads, int key_dim,
                                                int value_dim, int chunk) {
  if (key_heads < 1 || value_heads < key_heads || value_heads % key_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gated delta rule: ", value_heads,
                                                   " value heads are not a multiple of ", key_heads,
                                                   " key heads"));
  }
  for (int d : {key_dim, value_dim}) {
    if (d < 1 || d > kMaxDeltaHeadDim) {
      return absl::InvalidArgumentError(absl::StrCat("gated delta rule: head dimension ", d,
                                                     " is outside [1, ", kMaxDeltaHeadDim, "]"));
    }
  }
  if (chunk < 1) return absl::InvalidArgumentError("gated delta rule: chunk size must be >= 1");
  return absl::OkStatus();
}

template <>
void GatedDeltaRule<Device::kCpu>(const GatedDeltaBatch& b, const Parallel& par) {
  const int group = b.value_heads / b.key_heads;
  const int64_t state = static_cast<int64_t>(b.key_dim) * b.value_dim;
  cpu::ForEachSequenceHead(
      b, b.value_heads, par,
      [&](const LinearSeq& sq) { return GatedDeltaScratch(b.key_dim, b.value_dim, sq.T, b.chunk); },
      [&](const LinearSeq& sq, int h, float* base, float* scratch) {
        const int64_t qk = sq.row * b.qk_stride + static_cast<int64_t>(h / group) * b.key_dim;
        const int64_t gb = sq.row * b.gb_stride + h;
        GatedDeltaRuleCpu(b.key_dim, b.value_dim, b.scale, b.l2norm_qk, b.q + qk, b.k + qk,
                          b.qk_stride,
                          b.v + sq.row * b.v_stride + static_cast<int64_t>(h) * b.value_dim,
                          b.v_stride, b.g == nullptr ? nullptr : b.g + gb, b.beta + gb, b.gb_stride,
                          sq.T, sq.pos0, b.chunk, base + b.s_off + h * state,
                          b.out + sq.row * b.out_stride + static_cast<int64_t>(h) * b.value_dim,
                          b.out_stride, scratch);
        cpu::RecordStep(sq, base + b.s_off + h * state, state);
      });
}

}  // namespace flatstate
