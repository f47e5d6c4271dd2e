// The chunked RWKV-7 kernel (kernels/cuda/rwkv7_chunk.h): one block of 256 threads per (prefill
// sequence, head, tile of kCols value columns), the state tile S [N][kCols] in shared memory for
// the whole call. kCols is 32 (a lane per column), or 16 (two rows per warp) when tiles of 32
// would leave SMs idle (a lone prefill: RWKV-7 0.1B's 12 heads give 24 blocks); every column's
// sums are the same in both, so the choice does not change a bit. Per chunk (aligned to absolute
// positions like the CPU's) a piece of L tokens, cut where some channel's cumulative log decay
// passes -kMaxLogSpan (the same float sums as the CPU's, so the same cuts); with E_t the cumulative
// decay (kernels/cpu/rwkv7_chunk.cc has the derivation):
//   rows     KKd_t = kk_t E_{t-1}, Rd_t = r_t E_t, Ki_t = k_t / E_t, KAi_t = -(kk_t a_t) / E_t
//            (the log decays summed by one thread per channel, t ascending; the rows by every
//            thread)
//   products Y_t = S_0^T KKd_t, O_t = S_0^T Rd_t (a row per warp, or per half-warp with 16
//            columns; a lane per column) and the four L x L products Mak = KKd.Ki, Mab =
//            KKd.KAi (s < t), Mrk = Rd.Ki, Mra = Rd.KAi (s <= t) (a thread per pair)
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
constexpr float kMaxLogSpan = 48.f;  // as kernels/cpu/rwkv7_chunk.cc

// Shared floats for head_dim N, chunk C and kCols columns: S, the four row arrays (padded to
// N + 1), the four L x L products (padded to C + 1), V, P, O tiles, E_L, the piece length.
size_t ChunkFloats(int N, int C, int kCols) {
  return static_cast<size_t>(kCols * N + 4 * C * (N + 1) + 4 * C * (C + 1) + 3 * C * kCols + N + 1);
}

template <int kCols>
__global__ void __launch_bounds__(kThreads) Rwkv7ChunkKernel(Rwkv7Batch b, int tiles, int C) {
  static_assert(kCols == 16 || kCols == 32);
  constexpr int kSub = 32 / kCols;         // rows a warp works on at once
  constexpr int kRowStep = kWarps * kSub;  // rows the block works on at once
  extern __shared__ float sm[];
  const int N = b.key_dim, NP = N + 1, CP = C + 1;
  float* S = sm;               // [N][kCols]
  float* KKd = S + N * kCols;  // [C][NP]
  float* Rd = KKd + C * NP;    // [C][NP]
  float* Ki = Rd + C * NP;     // [C][NP]
  float* KAi = Ki + C * NP;    // [C][NP] (negated)
  float* Mak = KAi + C * NP;   // [C][CP]
  float* Mab = Mak + C * CP;   // [C][CP]
  float* Mrk = Mab + C * CP;   // [C][CP]
  float* Mra = Mrk + C * CP;   // [C][CP]
  float* Vt = Mra + C * CP;    // [C][kCols]
  float* P = Vt + C * kCols;   // [C][kCols] Y, then P
  float* O = P + C * kCols;    // [C][kCols]
  float* eL = O + C * kCols;   // [N] E_L
  int* cut = reinterpret_cast<int*>(eL + N);
  // A thread's column in the tile (lane) and first row (w0) for the column-wise loops.
  const int tid = static_cast<int>(threadIdx.x), w = tid >> 5, lane = tid % kCols;
  const int w0 = w * kSub + (tid & 31) / kCols;
  const int tile = static_cast<int>(blockIdx.x) % tiles;
  const int h = (static_cast<int>(blockIdx.x) / tiles) % b.value_heads;
  const int seq = static_cast<int>(blockIdx.x) / tiles / b.value_heads;
  const LinearSeq& sq = b.prefill[seq];
  const int64_t hn = static_cast<int64_t>(h) * N;
  const int j = tile * kCols + lane;
  const bool col = j < N;
  float* Sg = sq.state + b.layer_offset + b.s_off + hn * N + j;
  for (int i = w0; i < N; i += kRowStep)
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
    if (L == 1) {  // the recurrent step on this tile's columns (warp 0's first kCols lanes)
      if (tid < kCols) {
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
    for (int t = w0; t < L; t += kRowStep) {
      Vt[t * kCols + lane] = col ? b.v[(sq.row + t0 + t) * b.v_stride + hn + j] : 0.f;
    }
    __syncthreads();
    for (int t = w0; t < L; t += kRowStep) {
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
    for (int t = w0; t < L; t += kRowStep) {
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
    for (int t = w0; t < L; t += kRowStep) {
      float o = O[t * kCols + lane];
      for (int s = 0; s <= t; ++s) {
        o += Mrk[t * CP + s] * Vt[s * kCols + lane] + Mra[t * CP + s] * P[s * kCols + lane];
      }
      if (col) b.out[(sq.row + t0 + t) * b.out_stride + hn + j] = o;
    }
    for (int i = w0; i < N; i += kRowStep) {
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
    for (int i = w0; i < N; i += kRowStep) Sg[static_cast<int64_t>(i) * N] = S[i * kCols + lane];
  }
}

}  // namespace

bool LaunchRwkv7Chunk(const Rwkv7Batch& b) {
  static const bool forced = EnvSaysRecurrent("FLATSTATE_CUDA_RWKV7_PREFILL");
  static size_t limit32 = 0, limit16 = 0;
  const int N = b.key_dim;
  // The chunk comes from the 32-column tile (the larger) whichever width runs, so a sequence's
  // pieces, and its bits, do not depend on the batch it came in.
  size_t bytes = 0;
  const int C = PrefillChunk(
      Rwkv7ChunkKernel<32>, b.num_prefill, forced, b.chunk,
      [&](int c) { return ChunkFloats(N, c, 32); }, &limit32, &bytes);
  if (C == 0) return false;
  const int64_t blocks32 = static_cast<int64_t>(b.num_prefill) * b.value_heads * ((N + 31) / 32);
  if (blocks32 < SmCount()) {
    const size_t bytes16 = ChunkFloats(N, C, 16) * sizeof(float);
    if (AllowSharedBytes(Rwkv7ChunkKernel<16>, bytes16, &limit16)) {
      const int tiles = (N + 15) / 16;
      Rwkv7ChunkKernel<16><<<static_cast<unsigned>(b.num_prefill * b.value_heads * tiles), kThreads,
                             bytes16, Stream()>>>(b, tiles, C);
      FS_CUDA_CHECK_LAUNCH("Rwkv7ChunkKernel<16>");
      return true;
    }
  }
  const int tiles = (N + 31) / 32;
  Rwkv7ChunkKernel<32>
      <<<static_cast<unsigned>(b.num_prefill * b.value_heads * tiles), kThreads, bytes, Stream()>>>(
          b, tiles, C);
  FS_CUDA_CHECK_LAUNCH("Rwkv7ChunkKernel<32>");
  return true;
}

}  // namespace flatstate::cuda
