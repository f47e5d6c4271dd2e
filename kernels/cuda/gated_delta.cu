// CUDA body of kernels/gated_delta.h. Decode sequences (T == 1) run the recurrent form;
// prefill sequences (T > 1) the chunked WY / UT form on the engine's chunk, halved while over 64
// or while its tile does not fit in shared memory (64 x 256 keys fits on sm_90; no chunk fits:
// the recurrent form, token by token; kernels/cuda/shared_tile.h). Both agree with the CPU's
// forms within the op's tolerance, not bit for bit.
//
// Recurrent kernel: one block per (sequence, value head, tile of 32 value columns), W =
// ceil(key_dim / 32) warps: lane c of warp w owns column j = 32 * tile + c and the key rows i =
// 32 w .. 32 w + 31 of the state, held in 32 registers for the whole call: S is read once and
// written once however many tokens the sequence has. Per token: the warps' partial sums of S^T k
// (and then S^T q) for a column meet in shared memory and are added in warp order, so the result
// is deterministic and independent of the batch. q and k are L2-normalised in shared memory
// first.
//
// Chunked kernel: one block of 256 threads per (prefill sequence, value head, tile of 32 value
// columns), the state tile S [key_dim][32] in shared memory. Per chunk (aligned to absolute
// positions like the CPU's): the chunk's normalised q and k rows, A (beta-scaled, decayed k.k)
// and the decayed q.k products, K S_0 and Q S_0, the pseudo-values U by a right-looking forward
// substitution (one barrier per row), the outputs, and S_L. Every sum runs in a fixed order in
// one thread (or a fixed butterfly for the norms), so a sequence's results do not depend on the
// batch. A and the q.k products do not depend on the column tile: each tile's block computes
// them again (key_dim x chunk^2 work, against key_dim x chunk x 32 for the rest).
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/shared_tile.h"
#include "kernels/gated_delta.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kCols = 32;  // value columns per block (one per lane)
constexpr int kRows = 32;  // key rows per warp (one register each per thread)
constexpr int kMaxWarps = kMaxDeltaHeadDim / kRows;

// Sum of `v` over the block's W warps (every thread gets it): a fixed butterfly in each warp,
// then the warps' sums in warp order. `part` holds kMaxWarps floats.
__device__ float BlockSum(float v, float* part, int warps) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float out = 0.f;
  for (int w = 0; w < warps; ++w) out += part[w];
  __syncthreads();
  return out;
}

__global__ void __launch_bounds__(kMaxDeltaHeadDim) GatedDeltaKernel(GatedDeltaBatch b, int tiles) {
  __shared__ float qn[kMaxDeltaHeadDim];
  __shared__ float kn[kMaxDeltaHeadDim];
  __shared__ float red[kMaxWarps][kCols];
  __shared__ float part[kMaxWarps];
  __shared__ float ush[kCols];
  const int warps = static_cast<int>(blockDim.x) >> 5;
  const int w = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int tile = static_cast<int>(blockIdx.x) % tiles;
  const int h = (static_cast<int>(blockIdx.x) / tiles) % b.value_heads;
  const int seq = static_cast<int>(blockIdx.x) / tiles / b.value_heads;
  const LinearSeq& sq = seq < b.num_decode ? b.decode[seq] : b.prefill[seq - b.num_decode];
  const int group = b.value_heads / b.key_heads;
  const int Kd = b.key_dim, Vd = b.value_dim;
  const int j = tile * kCols + lane;
  const bool col = j < Vd;
  const int i0 = w * kRows;
  const int nr = col ? min(kRows, Kd - i0) : 0;  // this thread's rows (none past the columns)
  // Column j of this warp's rows: Sj[r * Vd].
  float* Sj = sq.state + b.layer_offset + b.s_off + static_cast<int64_t>(h) * Kd * Vd +
              static_cast<int64_t>(i0) * Vd + j;
  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = r < nr ? Sj[r * Vd] : 0.f;
  for (int64_t t = 0; t < sq.T; ++t) {
    const int64_t row = sq.row + t;
    const float* q = b.q + row * b.qk_stride + static_cast<int64_t>(h / group) * Kd;
    const float* k = b.k + row * b.qk_stride + static_cast<int64_t>(h / group) * Kd;
    const int x = static_cast<int>(threadIdx.x);  // blockDim.x >= Kd: one element each at most
    const float qx = x < Kd ? q[x] : 0.f, kx = x < Kd ? k[x] : 0.f;
    const float nq = BlockSum(qx * qx, part, warps), nk = BlockSum(kx * kx, part, warps);
    const float fq = b.l2norm_qk ? b.scale * rsqrtf(nq + 1e-6f) : b.scale;
    const float fk = b.l2norm_qk ? rsqrtf(nk + 1e-6f) : 1.f;
    if (x < Kd) qn[x] = qx * fq, kn[x] = kx * fk;
    const float decay = b.g == nullptr ? 1.f : expf(b.g[row * b.gb_stride + h]);
    const float beta = b.beta[row * b.gb_stride + h];
    __syncthreads();
    float kv = 0.f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < nr) {
        s[r] *= decay;
        kv += kn[i0 + r] * s[r];
      }
    }
    red[w][lane] = kv;
    __syncthreads();
    if (w == 0) {
      float sum = 0.f;
      for (int v = 0; v < warps; ++v) sum += red[v][lane];
      ush[lane] =
          col ? beta * (b.v[row * b.v_stride + static_cast<int64_t>(h) * Vd + j] - sum) : 0.f;
    }
    __syncthreads();
    const float u = ush[lane];
    float acc = 0.f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < nr) {
        s[r] += kn[i0 + r] * u;
        acc += qn[i0 + r] * s[r];
      }
    }
    red[w][lane] = acc;
    __syncthreads();
    if (w == 0 && col) {
      float sum = 0.f;
      for (int v = 0; v < warps; ++v) sum += red[v][lane];
      b.out[row * b.out_stride + static_cast<int64_t>(h) * Vd + j] = sum;
    }
    __syncthreads();  // qn, kn, red and ush are rewritten for the next token
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < nr) Sj[r * Vd] = s[r];
  }
}

constexpr int kChunkThreads = 256;
constexpr int kChunkWarps = kChunkThreads / 32;

// Shared floats of the chunked kernel for key_dim Kd and chunk C (q and k rows padded to Kd + 1,
// A and the q.k products to C + 1, so that a warp reading 32 rows at one column hits 32 banks).
size_t ChunkSharedFloats(int Kd, int C) {
  return static_cast<size_t>(2 * C * (Kd + 1) + 2 * C * (C + 1) + Kd * kCols + 3 * C * kCols +
                             3 * C);
}

__global__ void __launch_bounds__(kChunkThreads)
    GatedDeltaChunkKernel(GatedDeltaBatch b, int tiles, int C) {
  extern __shared__ float sm[];
  const int Kd = b.key_dim, Vd = b.value_dim, P = Kd + 1, CP = C + 1;
  float* Qs = sm;                 // [C][P]  normalised, scaled q rows
  float* Ks = Qs + C * P;         // [C][P]  normalised k rows
  float* A = Ks + C * P;          // [C][CP] beta_t exp(G_t - G_s) k_t.k_s, s < t
  float* QK = A + C * CP;         // [C][CP] exp(G_t - G_s) q_t.k_s, s <= t
  float* S = QK + C * CP;         // [Kd][32] the state tile
  float* R = S + Kd * kCols;      // [C][32] right-hand sides, then (in place) U
  float* QS = R + C * kCols;      // [C][32] exp(G_t) (Q S_0)_t
  float* Vt = QS + C * kCols;     // [C][32] the chunk's values
  float* G = Vt + C * kCols;      // [C] cumulative log decay
  float* Bt = G + C;              // [C] beta
  float* E = Bt + C;              // [C] exp(G_L - G_s)
  const int tid = static_cast<int>(threadIdx.x), w = tid >> 5, lane = tid & 31;
  const int tile = static_cast<int>(blockIdx.x) % tiles;
  const int h = (static_cast<int>(blockIdx.x) / tiles) % b.value_heads;
  const int seq = static_cast<int>(blockIdx.x) / tiles / b.value_heads;
  const LinearSeq& sq = b.prefill[seq];
  const int group = b.value_heads / b.key_heads;
  const int j = tile * kCols + lane;
  const bool col = j < Vd;
  float* Sg = sq.state + b.layer_offset + b.s_off + static_cast<int64_t>(h) * Kd * Vd + j;
  for (int i = w; i < Kd; i += kChunkWarps) S[i * kCols + lane] = col ? Sg[i * Vd] : 0.f;
  for (int64_t t0 = 0; t0 < sq.T;) {
    const int64_t to_grid = C - (sq.pos0 + t0) % C;  // tokens to the next multiple of C
    const int L = static_cast<int>(sq.T - t0 < to_grid ? sq.T - t0 : to_grid);
    // The chunk's rows: q, k normalised by one warp each (a fixed butterfly), v's tile, g, beta.
    for (int t = w; t < L; t += kChunkWarps) {
      const int64_t row = sq.row + t0 + t;
      const float* q = b.q + row * b.qk_stride + static_cast<int64_t>(h / group) * Kd;
      const float* k = b.k + row * b.qk_stride + static_cast<int64_t>(h / group) * Kd;
      float nq = 0.f, nk = 0.f;
      for (int i = lane; i < Kd; i += 32) {
        const float a = q[i], c = k[i];
        nq += a * a;
        nk += c * c;
        Qs[t * P + i] = a;
        Ks[t * P + i] = c;
      }
      for (int o = 16; o > 0; o >>= 1) {
        nq += __shfl_xor_sync(0xffffffffu, nq, o);
        nk += __shfl_xor_sync(0xffffffffu, nk, o);
      }
      const float fq = b.l2norm_qk ? b.scale * rsqrtf(nq + 1e-6f) : b.scale;
      const float fk = b.l2norm_qk ? rsqrtf(nk + 1e-6f) : 1.f;
      for (int i = lane; i < Kd; i += 32) {
        Qs[t * P + i] *= fq;
        Ks[t * P + i] *= fk;
      }
      Vt[t * kCols + lane] = col ? b.v[row * b.v_stride + static_cast<int64_t>(h) * Vd + j] : 0.f;
      if (lane == 0) {
        G[t] = b.g == nullptr ? 0.f : b.g[row * b.gb_stride + h];
        Bt[t] = b.beta[row * b.gb_stride + h];
      }
    }
    __syncthreads();
    if (tid == 0) {
      float acc = 0.f;
      for (int t = 0; t < L; ++t) G[t] = acc += G[t];
    }
    __syncthreads();
    for (int t = tid; t < L; t += kChunkThreads) E[t] = expf(G[L - 1] - G[t]);
    // A and the q.k products (pairs s <= t; a warp's 32 lanes share t, so q_t and k_t are read
    // as broadcasts and k_s from 32 banks).
    for (int p = tid; p < L * L; p += kChunkThreads) {
      const int t = p / L, s = p % L;
      if (s > t) continue;
      float dk = 0.f, dq = 0.f;
      for (int i = 0; i < Kd; ++i) {
        const float ks = Ks[s * P + i];
        dk += Ks[t * P + i] * ks;
        dq += Qs[t * P + i] * ks;
      }
      const float e = expf(G[t] - G[s]);
      QK[t * CP + s] = e * dq;
      if (s < t) A[t * CP + s] = Bt[t] * e * dk;
    }
    // K S_0 and Q S_0 -> R_t = beta_t (v_t - exp(G_t) (K S_0)_t), QS_t = exp(G_t) (Q S_0)_t.
    for (int t = w; t < L; t += kChunkWarps) {
      float ks = 0.f, qs = 0.f;
      for (int i = 0; i < Kd; ++i) {
        const float si = S[i * kCols + lane];
        ks += Ks[t * P + i] * si;
        qs += Qs[t * P + i] * si;
      }
      const float eg = expf(G[t]);
      R[t * kCols + lane] = Bt[t] * (Vt[t * kCols + lane] - eg * ks);
      QS[t * kCols + lane] = eg * qs;
    }
    __syncthreads();
    // (I + A) U = R, right-looking: once row t is final, every later row subtracts its share
    // (row t' sees U_0, U_1, ... in ascending order, as the CPU's substitution does).
    for (int t = 0; t + 1 < L; ++t) {
      for (int p = tid; p < (L - 1 - t) * kCols; p += kChunkThreads) {
        const int t2 = t + 1 + p / kCols, c = p % kCols;
        R[t2 * kCols + c] -= A[t2 * CP + t] * R[t * kCols + c];
      }
      __syncthreads();
    }
    // o_t = QS_t + sum_{s<=t} QK[t][s] u_s.
    for (int t = w; t < L; t += kChunkWarps) {
      float o = QS[t * kCols + lane];
      for (int s = 0; s <= t; ++s) o += QK[t * CP + s] * R[s * kCols + lane];
      if (col) b.out[(sq.row + t0 + t) * b.out_stride + static_cast<int64_t>(h) * Vd + j] = o;
    }
    // S_L = exp(G_L) S_0 + sum_s exp(G_L - G_s) k_s u_s^T.
    const float eL = expf(G[L - 1]);
    for (int i = w; i < Kd; i += kChunkWarps) {
      float si = S[i * kCols + lane] * eL;
      for (int s = 0; s < L; ++s) si += E[s] * Ks[s * P + i] * R[s * kCols + lane];
      S[i * kCols + lane] = si;
    }
    __syncthreads();  // the next chunk rewrites every array
    t0 += L;
  }
  if (col) {
    for (int i = w; i < Kd; i += kChunkWarps) Sg[i * Vd] = S[i * kCols + lane];
  }
}

}  // namespace
}  // namespace cuda

template <>
absl::Status CheckGatedDeltaShape<Device::kCuda>(int key_heads, int value_heads, int key_dim,
                                                 int value_dim, int chunk) {
  return CheckGatedDeltaShape<Device::kCpu>(key_heads, value_heads, key_dim, value_dim, chunk);
}

template <>
void GatedDeltaRule<Device::kCuda>(const GatedDeltaBatch& b, const Parallel& /*par*/) {
  const int seqs = b.num_decode + b.num_prefill;
  if (seqs == 0 || b.value_heads == 0) return;
  const int tiles = (b.value_dim + cuda::kCols - 1) / cuda::kCols;
  const int warps = (b.key_dim + cuda::kRows - 1) / cuda::kRows;
  // FLATSTATE_CUDA_DELTA_PREFILL=recurrent (read once): prefill token by token, as before the
  // chunked kernel (kept for benchmarks against it). Otherwise the engine's chunk, halved while its
  // tile does not fit (or over 64).
  static const bool forced = cuda::EnvSaysRecurrent("FLATSTATE_CUDA_DELTA_PREFILL");
  static size_t limit = 0;
  size_t chunk_bytes = 0;
  const int C = cuda::PrefillChunk(
      cuda::GatedDeltaChunkKernel, b.num_prefill, forced, b.chunk,
      [&](int c) { return cuda::ChunkSharedFloats(b.key_dim, c); }, &limit, &chunk_bytes);
  // The recurrent kernel takes the decode sequences, and the prefill ones too when the chunked
  // tile does not fit (its block index runs over decode, then prefill).
  const int recurrent = C > 0 ? b.num_decode : seqs;
  if (recurrent > 0) {
    cuda::GatedDeltaKernel<<<static_cast<unsigned>(recurrent * b.value_heads * tiles),
                             static_cast<unsigned>(32 * warps), 0, cuda::Stream()>>>(b, tiles);
    FS_CUDA_CHECK_LAUNCH("GatedDeltaKernel");
  }
  if (C > 0) {
    cuda::GatedDeltaChunkKernel<<<static_cast<unsigned>(b.num_prefill * b.value_heads * tiles),
                                  cuda::kChunkThreads, chunk_bytes, cuda::Stream()>>>(b, tiles, C);
    FS_CUDA_CHECK_LAUNCH("GatedDeltaChunkKernel");
  }
}

}  // namespace flatstate
