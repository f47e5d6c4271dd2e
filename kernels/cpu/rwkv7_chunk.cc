// The chunked form of RWKV-7's generalized delta rule (kernels/rwkv7.h, Rwkv7ChunkCpu): one
// (sequence, head) over T > 1 tokens, chunk by chunk on the absolute grid, each chunk as small
// matrix products (kernels/cpu/small_matmul.h).
//
// Per token, with S [key][value] and M_t = diag(w_t) - (kk_t a_t) kk_t^T:
//   S_t = M_t S_{t-1} + k_t v_t^T,  o_t = S_t^T r_t.
// Let p_t = S_{t-1}^T kk_t (the part the rank-1 term removes) and, within a chunk starting from
// S_0, E_t = prod_{s<=t} w_s = exp(sum_{s<=t} logw_s) (per channel, E_{-1} = 1). Unrolled,
//   S_t = diag(E_t) (S_0 + sum_{s<=t} (k_s / E_s) v_s^T - (kk_s a_s / E_s) p_s^T),
// so with KKd_t = kk_t E_{t-1}, Rd_t = r_t E_t, Ki_s = k_s / E_s, KAi_s = kk_s a_s / E_s:
//   p_t = S_0^T KKd_t + sum_{s<t} (KKd_t . Ki_s) v_s - (KKd_t . KAi_s) p_s
//   o_t = S_0^T Rd_t  + sum_{s<=t} (Rd_t . Ki_s) v_s - (Rd_t . KAi_s) p_s
//   S_L = diag(E_L) (S_0 + Ki^T V - KAi^T P).
// The first line is the UT / WY triangular system (I + Mab) P = KKd S_0 + Mak V, with
// Mab[t][s] = KKd_t . KAi_s and Mak[t][s] = KKd_t . Ki_s strictly lower triangular, solved by
// forward substitution (as the gated delta rule's chunk solves its (I + A) U = R); the code keeps
// Mab (and Rd . KAi) negated, from -KAi^T, so every product accumulates. The factors E_{t-1} / E_s and E_t / E_s are <= 1, but each
// row carries only its own half: 1 / E_s grows as the decays compound. A chunk is therefore cut
// where some channel's cumulative log decay would pass -kMaxLogSpan, so that every E and 1 / E
// stays within e^{+-kMaxLogSpan} (normal floats, no overflow); RWKV-7's own decays (log w >
// -e^{-1/2}) compound to at most -38.8 over 64 tokens, so real models never cut a 64-token chunk.
// A piece of one token (a chunk's last token, or a token whose decay alone passes the bound) runs
// the recurrent step.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/small_matmul.h"
#include "kernels/cpu/target_clones.h"
#include "kernels/rwkv7.h"

// The packing and substitution loops vectorise to the widest registers the CPU has
// (FLATSTATE_TARGET_CLONES, kernels/cpu/target_clones.h).

namespace flatstate {
namespace {

using cpu::MatMulPart;
using cpu::MatView;
using cpu::SmallMatMul;

// The largest |cumulative log decay| a chunked piece spans, per channel.
constexpr float kMaxLogSpan = 48.f;

// The rows of one (sequence, head) at token t.
struct Rows {
  const Rwkv7HeadRows& h;
  const float* r(int64_t t) const { return h.r + t * h.qk_stride; }
  const float* k(int64_t t) const { return h.k + t * h.qk_stride; }
  const float* v(int64_t t) const { return h.v + t * h.v_stride; }
  const float* kk(int64_t t) const { return h.kk + t * h.wka_stride; }
  const float* a(int64_t t) const { return h.a + t * h.wka_stride; }
  const float* lw(int64_t t) const { return h.logw + t * h.wka_stride; }
  float* o(int64_t t) const { return h.out + t * h.out_stride; }
};

// One row of the piece's operands: kkd = kk Eprev (kk when Eprev is null), rd = r E,
// ki = k / E, kai = -(kk a) / E.
inline __attribute__((always_inline)) void PackRow(
    int N, const float* __restrict E, const float* __restrict Eprev, const float* __restrict r,
    const float* __restrict k, const float* __restrict kk, const float* __restrict a,
    float* __restrict kkd, float* __restrict rd, float* __restrict ki, float* __restrict kai) {
  if (Eprev == nullptr) {
    std::memcpy(kkd, kk, sizeof(float) * N);
  } else {
    for (int i = 0; i < N; ++i) kkd[i] = kk[i] * Eprev[i];
  }
  for (int i = 0; i < N; ++i) {
    rd[i] = r[i] * E[i];
    const float inv = 1.f / E[i];
    ki[i] = k[i] * inv;
    kai[i] = -(kk[i] * a[i]) * inv;
  }
}

// P_t = Y_t + sum_{s<t} Mab[t][s] P_s for t < L (rows of N floats): rows in blocks of
// kMatMulRows, each block first takes every earlier block's rows as one product, then its own
// rows one by one; every row sums s ascending.
inline __attribute__((always_inline)) void ForwardSubstitute(int N, int64_t L, const float* Mab,
                                                             const float* Y, float* P) {
  std::memcpy(P, Y, sizeof(float) * L * N);
  for (int64_t b0 = 0; b0 < L; b0 += cpu::kMatMulRows) {
    const int64_t rows = std::min<int64_t>(cpu::kMatMulRows, L - b0);
    SmallMatMul(rows, N, b0, MatView{Mab + b0 * L, L, 1}, P, N, P + b0 * N, N, true,
                MatMulPart::kFull);
    for (int64_t t = b0 + 1; t < b0 + rows; ++t) {
      SmallMatMul(1, N, t - b0, MatView{Mab + t * L + b0, L, 1}, P + b0 * N, N, P + t * N, N, true,
                  MatMulPart::kFull);
    }
  }
}

// Tokens [t0, t0 + L) as one piece, L >= 2, from the state S [N][N]. E holds e^{gamma_t} for the
// piece's rows (gamma relative to t0). `w` is the scratch after E.
FLATSTATE_TARGET_CLONES void Piece(int N, const Rows& x, int64_t t0, int64_t L, const float* E,
                                   float* S, float* w) {
  float* KKd = w;              // [L][N]
  float* Rd = KKd + L * N;     // [L][N]
  float* KT = Rd + L * N;      // [N][2L]: Ki^T, then -KAi^T
  float* KS = KT + 2 * L * N;  // [L][N]: S_0^T KKd_t, then the right-hand side Y
  float* P = KS + L * N;       // [L][N]
  float* Mak = P + L * N;      // [L][L]  KKd_t . Ki_s       (s < t)
  float* Mab = Mak + L * L;    // [L][L] -KKd_t . KAi_s      (s < t)
  float* Mrk = Mab + L * L;    // [L][L]  Rd_t . Ki_s        (s <= t)
  float* Mra = Mrk + L * L;    // [L][L] -Rd_t . KAi_s       (s <= t)
  float* ki = Mra + L * L;     // [N]: this row's Ki, then [N] its -KAi
  float* kai = ki + N;
  const int64_t L2 = 2 * L;
  for (int64_t t = 0; t < L; ++t) {
    PackRow(N, E + t * N, t == 0 ? nullptr : E + (t - 1) * N, x.r(t0 + t), x.k(t0 + t),
            x.kk(t0 + t), x.a(t0 + t), KKd + t * N, Rd + t * N, ki, kai);
    for (int i = 0; i < N; ++i) {
      KT[i * L2 + t] = ki[i];
      KT[i * L2 + L + t] = kai[i];
    }
  }
  // S_0^T KKd_t and S_0^T Rd_t (the output rows start as the latter).
  const float* V = x.v(t0);
  const int64_t ldv = x.h.v_stride;
  float* O = x.o(t0);
  const int64_t ldo = x.h.out_stride;
  SmallMatMul(L, N, N, MatView{KKd, N, 1}, S, N, KS, N, false, MatMulPart::kFull);
  SmallMatMul(L, N, N, MatView{Rd, N, 1}, S, N, O, ldo, false, MatMulPart::kFull);
  // The four L x L products (lower parts only), then their masks.
  SmallMatMul(L, L, N, MatView{KKd, N, 1}, KT, L2, Mak, L, false, MatMulPart::kCols);
  SmallMatMul(L, L, N, MatView{KKd, N, 1}, KT + L, L2, Mab, L, false, MatMulPart::kCols);
  SmallMatMul(L, L, N, MatView{Rd, N, 1}, KT, L2, Mrk, L, false, MatMulPart::kCols);
  SmallMatMul(L, L, N, MatView{Rd, N, 1}, KT + L, L2, Mra, L, false, MatMulPart::kCols);
  for (int64_t t = 0; t < L; ++t) {
    std::fill(Mak + t * L + t, Mak + (t + 1) * L, 0.f);
    std::fill(Mab + t * L + t, Mab + (t + 1) * L, 0.f);
    std::fill(Mrk + t * L + t + 1, Mrk + (t + 1) * L, 0.f);
    std::fill(Mra + t * L + t + 1, Mra + (t + 1) * L, 0.f);
  }
  // Y = S_0^T KKd + Mak V; (I - Mab) P = Y; O += Mrk V + Mra P;
  // S = diag(E_L) (S_0 + Ki^T V - KAi^T P).
  SmallMatMul(L, N, L, MatView{Mak, L, 1}, V, ldv, KS, N, true, MatMulPart::kInner);
  ForwardSubstitute(N, L, Mab, KS, P);
  SmallMatMul(L, N, L, MatView{Mrk, L, 1}, V, ldv, O, ldo, true, MatMulPart::kInner);
  SmallMatMul(L, N, L, MatView{Mra, L, 1}, P, N, O, ldo, true, MatMulPart::kInner);
  SmallMatMul(N, N, L, MatView{KT, L2, 1}, V, ldv, S, N, true, MatMulPart::kFull);
  SmallMatMul(N, N, L, MatView{KT + L, L2, 1}, P, N, S, N, true, MatMulPart::kFull);
  const float* EL = E + (L - 1) * N;
  for (int i = 0; i < N; ++i) {
    float* Si = S + int64_t{i} * N;
    for (int j = 0; j < N; ++j) Si[j] *= EL[i];
  }
}

// How many of tokens [t0, t0 + most) one piece takes (>= 1): the longest prefix whose cumulative
// log decay stays >= -kMaxLogSpan on every channel. Fills E [len][N] with e^{gamma_t} (rows of a
// one-token piece are not needed). `g` holds N floats.
FLATSTATE_TARGET_CLONES int64_t PieceLength(int N, const Rows& x, int64_t t0, int64_t most,
                                            float* E, float* g) {
  std::fill(g, g + N, 0.f);
  for (int64_t t = 0; t < most; ++t) {
    const float* lw = x.lw(t0 + t);
    int out_of_range = 0;  // a channel below -kMaxLogSpan, or NaN
    for (int i = 0; i < N; ++i) {
      g[i] += lw[i];
      out_of_range |= !(g[i] >= -kMaxLogSpan);
    }
    if (out_of_range) return std::max<int64_t>(t, 1);
    float* Et = E + t * N;
    for (int i = 0; i < N; ++i) Et[i] = std::exp(g[i]);
  }
  return most;
}

}  // namespace

size_t Rwkv7Scratch(int head_dim, int64_t T, int chunk) {
  const int64_t N = head_dim;
  if (T <= 1) return static_cast<size_t>(4 * N);
  const int64_t L = std::min<int64_t>(T, chunk);
  // g (N); E (L x N); the piece's KKd, Rd, KS, P (4 L x N), KT (2 L x N), four L x L, ki and kai
  // (2 N); at least the step's 4 N after g.
  return static_cast<size_t>(N + 7 * L * N + 4 * L * L + 4 * N);
}

void Rwkv7ChunkCpu(int N, const Rwkv7HeadRows& rows, int64_t T, int64_t pos0, int chunk, float* S,
                   float* scratch) {
  const Rows x{rows};
  float* g = scratch;
  float* E = g + N;
  const int64_t C = std::max(chunk, 1);
  for (int64_t t0 = 0; t0 < T;) {
    const int64_t most = std::min(T - t0, C - (pos0 + t0) % C);
    const int64_t L = PieceLength(N, x, t0, most, E, g);
    if (L == 1) {
      Rwkv7HeadRows one = rows;
      one.r = x.r(t0);
      one.k = x.k(t0);
      one.v = x.v(t0);
      one.kk = x.kk(t0);
      one.a = x.a(t0);
      one.logw = x.lw(t0);
      one.out = x.o(t0);
      Rwkv7StepCpu(N, one, 1, S, E);
    } else {
      Piece(N, x, t0, L, E, S, E + L * N);
    }
    t0 += L;
  }
}

}  // namespace flatstate
