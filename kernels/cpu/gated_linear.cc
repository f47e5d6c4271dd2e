// The CPU body of the gated linear recurrence (kernels/gated_linear.h): plain loops over
// contiguous value rows (vectorised by the compiler, no reassociation) and cpu::Dot; with one decay
// per row, the chunk as small matrix products (kernels/cpu/small_matmul.h).
#include "kernels/gated_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/sequence_heads.h"
#include "kernels/cpu/small_matmul.h"
#include "kernels/cpu/target_clones.h"

// The loops below vectorise to the widest registers the CPU has (FLATSTATE_TARGET_CLONES,
// kernels/cpu/target_clones.h).

namespace flatstate {
namespace {

using cpu::Dot;

inline void Axpy(float a, const float* x, int n, float* y) {
  for (int j = 0; j < n; ++j) y[j] += a * x[j];
}

// One key row of the recurrent step, in one pass over the row: S_i <- e S_i + k_i v, then
// o += q_i S_i from the new row while it is in registers. (Three passes, a row read three times,
// held Mamba-2 130M's batch-32 step at half the memory bandwidth: the state is most of its bytes.)
inline __attribute__((always_inline)) void StepRow(int n, float e, float ki, float qi,
                                                   const float* __restrict v, float* __restrict Si,
                                                   float* __restrict o) {
  for (int j = 0; j < n; ++j) {
    const float s = Si[j] * e + ki * v[j];
    Si[j] = s;
    o[j] += qi * s;
  }
}

// The chunked form's chunk when each row has one decay (B[t * Kd], the chunk's cumulative log
// decay up to t): o_t = e^{B_t} S_0^T q_t + sum_{s<=t} e^{B_t - B_s} (q_t . k_s) v_s and
// S <- e^{B_L} S + sum_s e^{B_L - B_s} k_s v_s^T, one exp per (t, s) instead of one per key, as
// small matrix products (kernels/cpu/small_matmul.h): O = Q S_0, rows scaled by e^{B_t};
// A = Q K^T, masked and weighed by e^{B_t - B_s}; O += A V; S = e^{B_L} S + K^T (f V) with
// f_s = e^{B_L - B_s}. `w` holds Kd x L (K^T) + L x L (A) + L x Vd (f V) floats.
FLATSTATE_TARGET_CLONES void ScalarDecayChunk(int Kd, int Vd, const float* Q, const float* B,
                                              const float* k, int64_t k_stride, const float* v,
                                              int64_t v_stride, int64_t L, float* S, float* O,
                                              float* w) {
  using cpu::MatMulPart;
  using cpu::MatView;
  using cpu::SmallMatMul;
  float* KT = w;           // [Kd][L]
  float* A = KT + Kd * L;  // [L][L]
  float* FV = A + L * L;   // [L][Vd]
  for (int64_t s = 0; s < L; ++s) {
    const float* ks = k + s * k_stride;
    for (int i = 0; i < Kd; ++i) KT[i * L + s] = ks[i];
  }
  SmallMatMul(L, Vd, Kd, MatView{Q, Kd, 1}, S, Vd, O, Vd, false, MatMulPart::kFull);
  SmallMatMul(L, L, Kd, MatView{Q, Kd, 1}, KT, L, A, L, false, MatMulPart::kCols);
  for (int64_t t = 0; t < L; ++t) {
    const float Bt = B[t * Kd], et = std::exp(Bt);
    float* Ot = O + t * Vd;
    for (int j = 0; j < Vd; ++j) Ot[j] *= et;
    float* At = A + t * L;
    for (int64_t s = 0; s <= t; ++s) At[s] *= std::exp(Bt - B[s * Kd]);
    std::fill(At + t + 1, At + L, 0.f);
  }
  SmallMatMul(L, Vd, L, MatView{A, L, 1}, v, v_stride, O, Vd, true, MatMulPart::kInner);
  const float BL = B[(L - 1) * Kd], eL = std::exp(BL);
  for (int i = 0; i < Kd; ++i) {
    float* Si = S + static_cast<int64_t>(i) * Vd;
    for (int j = 0; j < Vd; ++j) Si[j] *= eL;
  }
  for (int64_t s = 0; s < L; ++s) {
    const float f = std::exp(BL - B[s * Kd]);
    const float* vs = v + s * v_stride;
    float* fv = FV + s * Vd;
    for (int j = 0; j < Vd; ++j) fv[j] = f * vs[j];
  }
  SmallMatMul(Kd, Vd, L, MatView{KT, L, 1}, FV, Vd, S, Vd, true, MatMulPart::kFull);
}

}  // namespace

size_t GatedLinearScratch(int key_dim, int value_dim, int64_t T, int chunk) {
  const int64_t L = std::min<int64_t>(T, chunk);
  // q scaled (L x Kd), B (L x Kd), decayed k for the state (Kd), the output rows (L x Vd); the
  // scalar-decay chunk's K^T (Kd x L), A (L x L) and weighed V (L x Vd).
  return static_cast<size_t>(2 * L * key_dim + key_dim + L * value_dim + key_dim +
                             key_dim * L + L * L + L * value_dim);
}

FLATSTATE_TARGET_CLONES void GatedLinearCpu(int Kd, int Vd, float scale, bool per_key,
                                            const float* q, const float* k, int64_t qk_stride,
                                            const float* v, int64_t v_stride, const float* g,
                                            int64_t g_stride, int64_t T, int64_t pos0, int chunk,
                                            float* S, float* out, int64_t out_stride,
                                            float* scratch) {
  // The decay of key i at row r (log).
  auto log_decay = [&](int64_t r, int i) -> float {
    if (g == nullptr) return 0.f;
    return per_key ? g[r * g_stride + i] : g[r * g_stride];
  };
  if (T == 1) {
    // One decay per head (Mamba-2): its exp once, not once per key row (the same value).
    const float head_decay = per_key ? 0.f : std::exp(log_decay(0, 0));
    float* o = scratch;  // Vd
    std::fill(o, o + Vd, 0.f);
    for (int i = 0; i < Kd; ++i) {
      const float e = per_key ? std::exp(log_decay(0, i)) : head_decay;
      StepRow(Vd, e, k[i], q[i] * scale, v, S + static_cast<int64_t>(i) * Vd, o);
    }
    std::memcpy(out, o, sizeof(float) * Vd);
    return;
  }
  const int64_t C = chunk;
  for (int64_t t0 = 0; t0 < T;) {
    const int64_t L = std::min(T - t0, C - (pos0 + t0) % C);
    float* Q = scratch;     // [L][Kd] q scaled
    float* B = Q + L * Kd;  // [L][Kd] cumulative log decay
    float* O = B + L * Kd;  // [L][Vd]
    float* w = O + L * Vd;  // [Kd]
    for (int64_t t = 0; t < L; ++t) {
      const int64_t r = t0 + t;
      for (int i = 0; i < Kd; ++i) {
        Q[t * Kd + i] = q[r * qk_stride + i] * scale;
        B[t * Kd + i] = (t == 0 ? 0.f : B[(t - 1) * Kd + i]) + log_decay(r, i);
      }
    }
    if (!per_key) {
      // One decay per row (B[t * Kd] holds it): every weight is a scalar exp per (t, s).
      ScalarDecayChunk(Kd, Vd, Q, B, k + t0 * qk_stride, qk_stride, v + t0 * v_stride, v_stride, L,
                       S, O, w + Kd);
      for (int64_t t = 0; t < L; ++t) {
        std::memcpy(out + (t0 + t) * out_stride, O + t * Vd, sizeof(float) * Vd);
      }
      t0 += L;
      continue;
    }
    // o_t = (q_t * exp(B_t))^T S_0 + sum_{s<=t} (sum_i q_t[i] k_s[i] exp(B_t[i] - B_s[i])) v_s.
    for (int64_t t = 0; t < L; ++t) {
      float* Ot = O + t * Vd;
      std::fill(Ot, Ot + Vd, 0.f);
      for (int i = 0; i < Kd; ++i) {
        Axpy(Q[t * Kd + i] * std::exp(B[t * Kd + i]), S + static_cast<int64_t>(i) * Vd, Vd, Ot);
      }
      for (int64_t s = 0; s <= t; ++s) {
        const float* ks = k + (t0 + s) * qk_stride;
        for (int i = 0; i < Kd; ++i) w[i] = ks[i] * std::exp(B[t * Kd + i] - B[s * Kd + i]);
        Axpy(Dot(Q + t * Kd, w, Kd), v + (t0 + s) * v_stride, Vd, Ot);
      }
    }
    // S_L = diag(exp(B_L)) S_0 + sum_s (k_s * exp(B_L - B_s)) v_s^T.
    const float* BL = B + (L - 1) * Kd;
    for (int i = 0; i < Kd; ++i) {
      float* Si = S + static_cast<int64_t>(i) * Vd;
      const float e = std::exp(BL[i]);
      for (int j = 0; j < Vd; ++j) Si[j] *= e;
      for (int64_t s = 0; s < L; ++s) {
        const float ks = k[(t0 + s) * qk_stride + i] * std::exp(BL[i] - B[s * Kd + i]);
        Axpy(ks, v + (t0 + s) * v_stride, Vd, Si);
      }
    }
    for (int64_t t = 0; t < L; ++t) {
      std::memcpy(out + (t0 + t) * out_stride, O + t * Vd, sizeof(float) * Vd);
    }
    t0 += L;
  }
}

template <>
absl::Status CheckGatedLinearShape<Device::kCpu>(int key_heads, int value_heads, int key_dim,
                                                 int value_dim, int chunk) {
  if (key_heads < 1 || value_heads < key_heads || value_heads % key_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gated linear recurrence: ", value_heads,
                                                   " value heads are not a multiple of ", key_heads,
                                                   " key heads"));
  }
  for (int d : {key_dim, value_dim}) {
    if (d < 1 || d > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat("gated linear recurrence: head dimension ", d, " is outside [1, 4096]"));
    }
  }
  if (chunk < 1) return absl::InvalidArgumentError("gated linear recurrence: chunk size < 1");
  return absl::OkStatus();
}

template <>
void GatedLinear<Device::kCpu>(const GatedLinearBatch& b, const Parallel& par) {
  const int group = b.value_heads / b.key_heads;
  const int64_t state = static_cast<int64_t>(b.key_dim) * b.value_dim;
  cpu::ForEachSequenceHead(
      b, b.value_heads, par,
      [&](const LinearSeq& sq) {
        return GatedLinearScratch(b.key_dim, b.value_dim, sq.T, b.chunk);
      },
      [&](const LinearSeq& sq, int h, float* base, float* scratch) {
        const int64_t qk = sq.row * b.qk_stride + static_cast<int64_t>(h / group) * b.key_dim;
        const float* g = nullptr;
        if (b.g != nullptr) {
          g = b.g + sq.row * b.g_stride + (b.per_key_decay ? int64_t{h} * b.key_dim : h);
        }
        GatedLinearCpu(
            b.key_dim, b.value_dim, b.scale, b.per_key_decay, b.q + qk, b.k + qk, b.qk_stride,
            b.v + sq.row * b.v_stride + int64_t{h} * b.value_dim, b.v_stride, g, b.g_stride, sq.T,
            sq.pos0, b.chunk, base + b.s_off + h * state,
            b.out + sq.row * b.out_stride + int64_t{h} * b.value_dim, b.out_stride, scratch);
        cpu::RecordStep(sq, base + b.s_off + h * state, state);
      });
}

}  // namespace flatstate
