// The recurrent form of RWKV-7's generalized delta rule (kernels/rwkv7.h, Rwkv7StepCpu): one
// (sequence, head), token by token, one pass over the state per token.
//
// Per token t, with S [key i][value j], u = S_{t-1}^T kk_t, w = exp(logw_t), ka = kk_t * a_t:
//   S[i][j] = w[i] S[i][j] - ka[i] u[j] + k[i] v[j],   o[j] = sum_i r[i] S[i][j],
// and the next token's u[j] = sum_i kk_{t+1}[i] S[i][j] is summed in the same pass, from the new
// row while it is in registers. Every sum runs over i ascending, one multiply-add per term, in
// strips of 32 columns (four 8-float GCC vectors: four ymm, or eight xmm in the baseline clone; a
// head_dim that is not a multiple of 32 does its last columns one at a time; four chains per sum
// rather than two made the recurrent form a third faster, Rwkv7Form/chunk:0 1.43 -> 1.90 M
// tokens/s on the Zen 5, and change no bit: each column's chain is the same): so u computed in a
// pass of its own (a run's first token) and u computed in the previous token's pass have the same
// bits, and a run split anywhere gives the same floats as the run whole. Built with
// -ffp-contract=fast (kernels/CMakeLists.txt): the FMA clones fuse each multiply-add.
#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/cpu/target_clones.h"
#include "kernels/rwkv7.h"

namespace flatstate {
namespace {

// Eight floats (one ymm, two xmm by the clone) at any float's alignment; a column strip is kStrip
// of them. (GCC 12 lowered 16-float vectors on AVX2 through the stack, and so did memcpy loads.)
typedef float V8 __attribute__((vector_size(32), aligned(4)));
constexpr int kStrip = 4;
constexpr int kCols = 8 * kStrip;

inline __attribute__((always_inline)) V8* At(float* p) { return reinterpret_cast<V8*>(p); }
inline __attribute__((always_inline)) const V8* At(const float* p) {
  return reinterpret_cast<const V8*>(p);
}

// u[j] = sum_i kk[i] S[i][j] (i ascending) for j < N.
inline __attribute__((always_inline)) void KeyTimesState(int N, const float* S,
                                                         const float* __restrict kk,
                                                         float* __restrict u) {
  int j0 = 0;
  for (; j0 + kCols <= N; j0 += kCols) {
    V8 acc[kStrip] = {};
    for (int i = 0; i < N; ++i) {
      const V8* s = At(S + int64_t{i} * N + j0);
      for (int c = 0; c < kStrip; ++c) acc[c] += kk[i] * s[c];
    }
    for (int c = 0; c < kStrip; ++c) At(u + j0)[c] = acc[c];
  }
  for (int j = j0; j < N; ++j) {
    float acc = 0.f;
    for (int i = 0; i < N; ++i) acc += kk[i] * S[int64_t{i} * N + j];
    u[j] = acc;
  }
}

// One token's pass over S (see the top of the file); with kNext also un = S_new^T kkn.
template <bool kNext>
inline __attribute__((always_inline)) void Pass(
    int N, float* S, const float* __restrict w, const float* __restrict ka,
    const float* __restrict k, const float* __restrict r, const float* __restrict kkn,
    const float* __restrict u, const float* __restrict v, float* __restrict o,
    float* __restrict un) {
  int j0 = 0;
  for (; j0 + kCols <= N; j0 += kCols) {
    V8 uj[kStrip], vj[kStrip], oj[kStrip] = {}, nj[kStrip] = {};
    for (int c = 0; c < kStrip; ++c) {
      uj[c] = At(u + j0)[c];
      vj[c] = At(v + j0)[c];
    }
    for (int i = 0; i < N; ++i) {
      V8* s = At(S + int64_t{i} * N + j0);
      for (int c = 0; c < kStrip; ++c) {
        const V8 x = w[i] * s[c] - ka[i] * uj[c] + k[i] * vj[c];
        s[c] = x;
        oj[c] += r[i] * x;
        if constexpr (kNext) nj[c] += kkn[i] * x;
      }
    }
    for (int c = 0; c < kStrip; ++c) {
      At(o + j0)[c] = oj[c];
      if constexpr (kNext) At(un + j0)[c] = nj[c];
    }
  }
  for (int j = j0; j < N; ++j) {
    float oj = 0.f, nj = 0.f;
    for (int i = 0; i < N; ++i) {
      float& s = S[int64_t{i} * N + j];
      s = w[i] * s - ka[i] * u[j] + k[i] * v[j];
      oj += r[i] * s;
      if constexpr (kNext) nj += kkn[i] * s;
    }
    o[j] = oj;
    if constexpr (kNext) un[j] = nj;
  }
}

}  // namespace

FLATSTATE_TARGET_CLONES void Rwkv7StepCpu(int N, const Rwkv7HeadRows& x, int64_t T, float* S,
                                          float* scratch) {
  float* u = scratch;  // [N]: kk_t^T S_{t-1}
  float* un = u + N;   // [N]: the next token's
  float* w = un + N;   // [N]: exp(logw)
  float* ka = w + N;   // [N]: kk * a
  if (T <= 0) return;
  KeyTimesState(N, S, x.kk, u);
  for (int64_t t = 0; t < T; ++t) {
    const float* kk = x.kk + t * x.wka_stride;
    const float* a = x.a + t * x.wka_stride;
    const float* lw = x.logw + t * x.wka_stride;
    for (int i = 0; i < N; ++i) {
      w[i] = std::exp(lw[i]);
      ka[i] = kk[i] * a[i];
    }
    const float* k = x.k + t * x.qk_stride;
    const float* r = x.r + t * x.qk_stride;
    const float* v = x.v + t * x.v_stride;
    float* o = x.out + t * x.out_stride;
    if (t + 1 < T) {
      Pass<true>(N, S, w, ka, k, r, kk + x.wka_stride, u, v, o, un);
      std::swap(u, un);
    } else {
      Pass<false>(N, S, w, ka, k, r, nullptr, u, v, o, nullptr);
    }
  }
}

}  // namespace flatstate
