// The chunked RWKV-7 kernel (kernels/cuda/rwkv7_chunk.h): one block of 256 threads per (prefill
// sequence, head, tile of 32 value columns), the state tile S [N][32] in shared memory for the
// whole call. Per chunk (aligned to absolute positions like the CPU's) a piece of L tokens, cut
// where some channel's cumulative log decay passes -kMaxLogSpan (the same float sums as the
// CPU's, so the same cuts); with E_t the cumulative decay (kernels/cpu/rwkv7_chunk.cc has the
// derivation):
//   rows     KKd_t = kk_t E_{t-1}, Rd_t = r_t E_t, Ki_t = k_t / E_t, KAi_t = -(kk_t a_t) / E_t
//            (the log decays summed by one thread per channel, t ascending; the rows by every
//            thread)
//   products Y_t = S_0^T KKd_t, O_t = S_0^T Rd_t (a warp per row, a lane per column) and the
//            four L x L products Mak = KKd.Ki, Mab = KKd.KAi (s < t), Mrk = Rd.Ki, Mra = Rd.KAi
//            (s <= t) (a thread per pair)
//   solve    Y_t += sum_{s<t} Mak[t][s] v_s; P_t = Y_t + sum_{s<t} Mab[t][s] P_s, right-looking
//            (one barrier per row)
//   outputs  o_t = O_t + sum_{s<=t} Mrk[t][s] v_s + Mra[t][s] P_s
//   state    S_L = diag(E_L) (S_0 + Ki^T V + KAi^T P)
// A one-token piece runs the recurrent step on the tile. Every sum runs in one thread in a fixed
// order, so a sequence's results do not depend on the batch. The rows and the L x L products do
// not depend on the column tile: each tile's block computes them again.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/cuda/rwkv7_chunk.h"
#include "kernels/cuda/shared_tile.h"

namespace flatstate::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 32;            // value columns per block (one per lane)
constexpr float kMaxLogSpan = 48.f;  // as kernels/cpu/rwkv7_chunk.cc

// Shared floats for head_dim N and chunk C: S, the four row arrays (padded to N + 1), the four
// L x L products (padded to C + 1), V, P, O tiles, E_L, the piece length.
size_t ChunkFloats(int N, int C) {
  return static_cast<size_t>(kCols * N + 4 * C * (N + 1) + 4 * C * (C + 1) + 3 * C * kCols + N + 1);
}

__global__ void __launch_bounds__(kThreads) Rwkv7ChunkKernel(Rwkv7Batch b, int tiles, int C) {
  extern __shared__ float sm[];
  const int N = b.key_dim, NP = N + 1, CP = C + 1;
  float* S = sm;               // [N][32]
  float* KKd = S + N * kCols;  // [C][NP]
  float* Rd = KKd + C * NP;    // [C][NP]
  float* Ki = Rd + C * NP;     // [C][NP]
  float* KAi = Ki + C * NP;    // [C][NP] (negated)
  float* Mak = KAi + C * NP;   // [C][CP]
  float* Mab = Mak + C * CP;   // [C][CP]
  float* Mrk = Mab + C * CP;   // [C][CP]
  float* Mra = Mrk + C * CP;   // [C][CP]
  float* Vt = Mra + C * CP;    // [C][32]
  float* P = Vt + C * kCols;   // [C][32] Y, then P
  float* O = P + C * kCols;    // [C][32]
  float* eL = O + C * kCols;   // [N] E_L
  int* cut = reinterpret_cast<int*>(eL + N);
  const int tid = static_cast<int>(threadIdx.x), w = tid >> 5, lane = tid & 31;
  const int tile = static_cast<int>(blockIdx.x) % tiles;
  const int h = (static_cast<int>(blockIdx.x) / tiles) % b.value_heads;
  const int seq = static_cast<int>(blockIdx.x) / tiles / b.value_heads;
  const LinearSeq& sq = b.prefill[seq];
  const int64_t hn = static_cast<int64_t>(h) * N;
  const int j = tile * kCols + lane;
  const bool col = j < N;
  float* Sg = sq.state + b.layer_offset + b.s_off + hn * N + j;
  for (int i = w; i < N; i += kWarps)
    S[i * kCols + lane] = col ? Sg[static_cast<int64_t>(i) * N] : 0.f;
  for (int64_t t0 = 0; t0 < sq.T;) {
    const int64_t to_grid = C - (sq.pos0 + t0) % C;  // tokens to the next multiple of C
    const int most = static_cast<int>(sq.T - t0 < to_grid ? sq.T - t0 : to_grid);
    // The piece's log decays, staged in Ki's rows by every thread (coalesced), then summed per
    // channel in place there (the CPU's float order) to find the cut.
    float* G = Ki;
    if (tid == 0) *cut = most;
    for (int p = tid; p < most * N; p += kThreads) {
      const int t = p / N, i = p % N;
      G[t * NP + i] = b.logw[(sq.row + t0 + t) * b.wka_stride + hn + i];
    }
    __syncthreads();
    for (int i = tid; i < N; i += kThreads) {
      float g = 0.f;
      for (int t = 0; t < most; ++t) {
        g += G[t * NP + i];
        G[t * NP + i] = g;
        if (!(g >= -kMaxLogSpan)) {  // below the bound, or NaN
          atomicMin(cut, t);
          break;
        }
      }
    }
    __syncthreads();
    const int L = *cut > 1 ? *cut : 1;
    if (L == 1) {  // the recurrent step on this tile's columns (warp 0)
      if (w == 0) {
        const int64_t r = sq.row + t0;
        const float* kk = b.kk + r * b.wka_stride + hn;
        const float* a = b.a + r * b.wka_stride + hn;
        const float* lw = b.logw + r * b.wka_stride + hn;
        const float* k = b.k + r * b.qk_stride + hn;
        const float* q = b.q + r * b.qk_stride + hn;
        const float vj = col ? b.v[r * b.v_stride + hn + j] : 0.f;
        float u = 0.f;
        for (int i = 0; i < N; ++i) u += kk[i] * S[i * kCols + lane];
        float acc = 0.f;
        for (int i = 0; i < N; ++i) {
          const float s = expf(lw[i]) * S[i * kCols + lane] - kk[i] * a[i] * u + k[i] * vj;
          S[i * kCols + lane] = s;
          acc += q[i] * s;
        }
        if (col) b.out[r * b.out_stride + hn + j] = acc;
      }
      __syncthreads();
      t0 += 1;
      continue;
    }
    // The rows from the summed decays G (rows < L are summed for every channel), by every
    // thread: first those that read G[t - 1] too, then Ki in place of G.
    for (int p = tid; p < L * N; p += kThreads) {
      const int t = p / N, i = p % N;
      const int64_t r = sq.row + t0 + t;
      const int64_t x = r * b.wka_stride + hn + i;
      const float e = expf(G[t * NP + i]), inv = 1.f / e, kk = b.kk[x];
      KKd[t * NP + i] = kk * (t > 0 ? expf(G[(t - 1) * NP + i]) : 1.f);
      Rd[t * NP + i] = b.q[r * b.qk_stride + hn + i] * e;
      KAi[t * NP + i] = -(kk * b.a[x]) * inv;
      if (t == L - 1) eL[i] = e;
    }
    __syncthreads();
    for (int p = tid; p < L * N; p += kThreads) {
      const int t = p / N, i = p % N;
      Ki[t * NP + i] = b.k[(sq.row + t0 + t) * b.qk_stride + hn + i] * (1.f / expf(Ki[t * NP + i]));
    }
    for (int t = w; t < L; t += kWarps) {
      Vt[t * kCols + lane] = col ? b.v[(sq.row + t0 + t) * b.v_stride + hn + j] : 0.f;
    }
    __syncthreads();
    for (int t = w; t < L; t += kWarps) {
      float ys = 0.f, os = 0.f;
      for (int i = 0; i < N; ++i) {
        const float si = S[i * kCols + lane];
        ys += KKd[t * NP + i] * si;
        os += Rd[t * NP + i] * si;
      }
      P[t * kCols + lane] = ys;
      O[t * kCols + lane] = os;
    }
    // The four L x L products (a warp's lanes share t: KKd_t and Rd_t are broadcasts, Ki_s and
    // KAi_s come from 32 banks).
    for (int p = tid; p < L * L; p += kThreads) {
      const int t = p / L, s = p % L;
      if (s > t) continue;
      float mak = 0.f, mab = 0.f, mrk = 0.f, mra = 0.f;
      for (int i = 0; i < N; ++i) {
        const float kd = KKd[t * NP + i], rd = Rd[t * NP + i];
        const float ki = Ki[s * NP + i], ka = KAi[s * NP + i];
        mak += kd * ki;
        mab += kd * ka;
        mrk += rd * ki;
        mra += rd * ka;
      }
      Mak[t * CP + s] = s < t ? mak : 0.f;
      Mab[t * CP + s] = s < t ? mab : 0.f;
      Mrk[t * CP + s] = mrk;
      Mra[t * CP + s] = mra;
    }
    __syncthreads();
    for (int t = w; t < L; t += kWarps) {
      float y = P[t * kCols + lane];
      for (int s = 0; s < t; ++s) y += Mak[t * CP + s] * Vt[s * kCols + lane];
      P[t * kCols + lane] = y;
    }
    __syncthreads();
    // P_t = Y_t + sum_{s<t} Mab[t][s] P_s: once row t is final, every later row adds its share
    // (row t' sees P_0, P_1, ... in ascending order).
    for (int t = 0; t + 1 < L; ++t) {
      for (int p = tid; p < (L - 1 - t) * kCols; p += kThreads) {
        const int t2 = t + 1 + p / kCols, c = p % kCols;
        P[t2 * kCols + c] += Mab[t2 * CP + t] * P[t * kCols + c];
      }
      __syncthreads();
    }
    for (int t = w; t < L; t += kWarps) {
      float o = O[t * kCols + lane];
      for (int s = 0; s <= t; ++s) {
        o += Mrk[t * CP + s] * Vt[s * kCols + lane] + Mra[t * CP + s] * P[s * kCols + lane];
      }
      if (col) b.out[(sq.row + t0 + t) * b.out_stride + hn + j] = o;
    }
    for (int i = w; i < N; i += kWarps) {
      float si = S[i * kCols + lane];
      for (int s = 0; s < L; ++s) {
        si += Ki[s * NP + i] * Vt[s * kCols + lane] + KAi[s * NP + i] * P[s * kCols + lane];
      }
      S[i * kCols + lane] = si * eL[i];
    }
    __syncthreads();  // the next piece rewrites every array
    t0 += L;
  }
  if (col) {
    for (int i = w; i < N; i += kWarps) Sg[static_cast<int64_t>(i) * N] = S[i * kCols + lane];
  }
}

}  // namespace

bool LaunchRwkv7Chunk(const Rwkv7Batch& b) {
  static const bool forced = EnvSaysRecurrent("FLATSTATE_CUDA_RWKV7_PREFILL");
  static size_t limit = 0;
  size_t bytes = 0;
  const int N = b.key_dim;
  const int C = PrefillChunk(Rwkv7ChunkKernel, b.num_prefill, forced, b.chunk,
                             [&](int c) { return ChunkFloats(N, c); }, &limit, &bytes);
  if (C == 0) return false;
  const int tiles = (N + kCols - 1) / kCols;
  Rwkv7ChunkKernel<<<static_cast<unsigned>(b.num_prefill * b.value_heads * tiles), kThreads, bytes,
                     Stream()>>>(b, tiles, C);
  FS_CUDA_CHECK_LAUNCH("Rwkv7ChunkKernel");
  return true;
}

}  // namespace flatstate::cuda
