// CUDA body of kernels/gated_linear.h. Decode sequences (T == 1) run the recurrent form;
// prefill sequences (T > 1) the chunked form when its tile fits in shared memory (key_dim up to
// ~1350 at chunk 64 on sm_90; otherwise the recurrent form, token by token). Both agree with the
// CPU's forms within the op's tolerance, not bit for bit.
//
// Recurrent kernel: one block per (sequence, value head), each thread owning value columns j,
// token by token (S in the sequence's device slot, read and written per token).
//
// Chunked kernel: one block of 256 threads per (prefill sequence, value head, tile of 32 value
// columns), the state tile S [key_dim][32] in shared memory for the whole call. Per chunk
// (aligned to absolute positions like the CPU's, of C tokens, C dividing the engine's chunk so
// that a run split at multiples of the engine's chunk computes the same floats): the chunk's
// value tile, then the keys in slices of 32 - q, k and the cumulative log decays B of the slice
// (per key, or one per row for a scalar decay), A[t][s] += sum_i q_t[i] k_s[i] exp(B_t[i] -
// B_s[i]) over s <= t, q and k rescaled in place to q exp(B_t) and k exp(B_L - B_s), O_t +=
// (those q) S_0 for the slice's rows, and those rows of S updated to exp(B_L) S + K^T V - then
// o_t = O_t + sum_{s<=t} A[t][s] v_s. Every sum runs in one thread in a fixed order, so a
// sequence's results do not depend on the batch. A does not depend on the column tile: each
// tile's block computes it again (key_dim x chunk^2 work, against key_dim x chunk x 32 for the
// rest).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/cuda/shared_tile.h"
#include "kernels/gated_linear.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) GatedLinearKernel(GatedLinearBatch b) {
  extern __shared__ float decay[];  // [Kd]: exp(g) of this token
  const int seq = blockIdx.x / b.value_heads;
  const int h = blockIdx.x % b.value_heads;
  const LinearSeq& sq = seq < b.num_decode ? b.decode[seq] : b.prefill[seq - b.num_decode];
  const int group = b.value_heads / b.key_heads;
  const int Kd = b.key_dim, Vd = b.value_dim;
  float* S = sq.state + b.layer_offset + b.s_off + static_cast<int64_t>(h) * Kd * Vd;
  for (int64_t t = 0; t < sq.T; ++t) {
    const int64_t r = sq.row + t;
    const float* q = b.q + r * b.qk_stride + static_cast<int64_t>(h / group) * Kd;
    const float* k = b.k + r * b.qk_stride + static_cast<int64_t>(h / group) * Kd;
    for (int i = threadIdx.x; i < Kd; i += kThreads) {
      float g = 0.f;
      if (b.g != nullptr) {
        g = b.per_key_decay ? b.g[r * b.g_stride + static_cast<int64_t>(h) * Kd + i]
                            : b.g[r * b.g_stride + h];
      }
      decay[i] = expf(g);
    }
    __syncthreads();
    const float* v = b.v + r * b.v_stride + static_cast<int64_t>(h) * Vd;
    float* o = b.out + r * b.out_stride + static_cast<int64_t>(h) * Vd;
    for (int j = threadIdx.x; j < Vd; j += kThreads) {
      float acc = 0.f;
      for (int i = 0; i < Kd; ++i) {
        const float s = decay[i] * S[static_cast<int64_t>(i) * Vd + j] + k[i] * v[j];
        S[static_cast<int64_t>(i) * Vd + j] = s;
        acc += q[i] * b.scale * s;
      }
      o[j] = acc;
    }
    __syncthreads();
  }
}

constexpr int kChunkThreads = 256;
constexpr int kChunkWarps = kChunkThreads / 32;
constexpr int kCols = 32;   // value columns per block (one per lane)
constexpr int kSlice = 32;  // key columns per pass over the chunk

// Shared floats for key_dim Kd and chunk C (slices padded to kSlice + 1 and A to C + 1, so that
// a warp reading 32 rows at one column hits 32 banks).
size_t ChunkSharedFloats(int Kd, int C) {
  return static_cast<size_t>(3 * C * (kSlice + 1) + C * (C + 1) + Kd * kCols + 2 * C * kCols + C +
                             kSlice);
}

__global__ void __launch_bounds__(kChunkThreads)
    GatedLinearChunkKernel(GatedLinearBatch b, int tiles, int C) {
  extern __shared__ float sm[];
  const int Kd = b.key_dim, Vd = b.value_dim, P = kSlice + 1, CP = C + 1;
  float* Qs = sm;              // [C][P]  the slice of q (scaled), then q exp(B_t)
  float* Ks = Qs + C * P;      // [C][P]  the slice of k, then k exp(B_L - B_s)
  float* Bs = Ks + C * P;      // [C][P]  the slice's cumulative log decays (per key)
  float* A = Bs + C * P;       // [C][CP] decayed q_t.k_s, s <= t
  float* S = A + C * CP;       // [Kd][32] the state tile
  float* Vt = S + Kd * kCols;  // [C][32] the chunk's values
  float* O = Vt + C * kCols;   // [C][32] (q exp(B_t))^T S_0
  float* Bc = O + C * kCols;   // [C] cumulative log decay (one per row)
  float* eL = Bc + C;          // [kSlice] exp(B_L) of the slice's keys
  const int tid = static_cast<int>(threadIdx.x), w = tid >> 5, lane = tid & 31;
  const int tile = static_cast<int>(blockIdx.x) % tiles;
  const int h = (static_cast<int>(blockIdx.x) / tiles) % b.value_heads;
  const int seq = static_cast<int>(blockIdx.x) / tiles / b.value_heads;
  const LinearSeq& sq = b.prefill[seq];
  const int group = b.value_heads / b.key_heads;
  const int64_t qk_head = static_cast<int64_t>(h / group) * Kd;
  const bool per_key = b.per_key_decay;
  const int j = tile * kCols + lane;
  const bool col = j < Vd;
  float* Sg = sq.state + b.layer_offset + b.s_off + static_cast<int64_t>(h) * Kd * Vd + j;
  for (int i = w; i < Kd; i += kChunkWarps) S[i * kCols + lane] = col ? Sg[i * Vd] : 0.f;
  for (int64_t t0 = 0; t0 < sq.T;) {
    const int64_t to_grid = C - (sq.pos0 + t0) % C;  // tokens to the next multiple of C
    const int L = static_cast<int>(sq.T - t0 < to_grid ? sq.T - t0 : to_grid);
    for (int t = w; t < L; t += kChunkWarps) {
      const int64_t row = sq.row + t0 + t;
      Vt[t * kCols + lane] = col ? b.v[row * b.v_stride + static_cast<int64_t>(h) * Vd + j] : 0.f;
      O[t * kCols + lane] = 0.f;
    }
    if (!per_key && tid == 0) {
      float acc = 0.f;
      for (int t = 0; t < L; ++t) {
        if (b.g != nullptr) acc += b.g[(sq.row + t0 + t) * b.g_stride + h];
        Bc[t] = acc;
      }
    }
    for (int i0 = 0; i0 < Kd; i0 += kSlice) {
      const int n = Kd - i0 < kSlice ? Kd - i0 : kSlice;
      for (int p = tid; p < L * kSlice; p += kChunkThreads) {
        const int t = p / kSlice, c = p % kSlice;
        const int64_t row = sq.row + t0 + t;
        float qv = 0.f, kv = 0.f, gv = 0.f;
        if (c < n) {
          qv = b.q[row * b.qk_stride + qk_head + i0 + c] * b.scale;
          kv = b.k[row * b.qk_stride + qk_head + i0 + c];
          if (per_key && b.g != nullptr) {
            gv = b.g[row * b.g_stride + static_cast<int64_t>(h) * Kd + i0 + c];
          }
        }
        Qs[t * P + c] = qv;
        Ks[t * P + c] = kv;
        Bs[t * P + c] = gv;
      }
      __syncthreads();
      if (per_key) {
        for (int c = tid; c < kSlice; c += kChunkThreads) {
          float acc = 0.f;
          for (int t = 0; t < L; ++t) Bs[t * P + c] = acc += Bs[t * P + c];
        }
        __syncthreads();
      }
      // The slice's share of A (pairs s <= t; a warp's lanes share t, so q_t is a broadcast and
      // k_s comes from 32 banks). With one decay per row the exp is applied once, after the last
      // slice.
      for (int p = tid; p < L * L; p += kChunkThreads) {
        const int t = p / L, s = p % L;
        if (s > t) continue;
        float d = 0.f;
        if (per_key) {
          for (int c = 0; c < n; ++c) {
            d += Qs[t * P + c] * Ks[s * P + c] * expf(Bs[t * P + c] - Bs[s * P + c]);
          }
        } else {
          for (int c = 0; c < n; ++c) d += Qs[t * P + c] * Ks[s * P + c];
        }
        A[t * CP + s] = i0 == 0 ? d : A[t * CP + s] + d;
      }
      __syncthreads();
      for (int p = tid; p < L * kSlice; p += kChunkThreads) {
        const int t = p / kSlice, c = p % kSlice;
        const float bt = per_key ? Bs[t * P + c] : Bc[t];
        const float bl = per_key ? Bs[(L - 1) * P + c] : Bc[L - 1];
        Qs[t * P + c] *= expf(bt);
        Ks[t * P + c] *= expf(bl - bt);
      }
      for (int c = tid; c < kSlice; c += kChunkThreads) {
        eL[c] = expf(per_key ? Bs[(L - 1) * P + c] : Bc[L - 1]);
      }
      __syncthreads();
      for (int t = w; t < L; t += kChunkWarps) {
        float o = O[t * kCols + lane];
        for (int c = 0; c < n; ++c) o += Qs[t * P + c] * S[(i0 + c) * kCols + lane];
        O[t * kCols + lane] = o;
      }
      __syncthreads();  // the slice's rows of S_0 are read; now they become S_L
      for (int c = w; c < n; c += kChunkWarps) {
        float si = S[(i0 + c) * kCols + lane] * eL[c];
        for (int s = 0; s < L; ++s) si += Ks[s * P + c] * Vt[s * kCols + lane];
        S[(i0 + c) * kCols + lane] = si;
      }
      __syncthreads();  // the next slice rewrites Qs, Ks, Bs and eL
    }
    if (!per_key) {
      for (int p = tid; p < L * L; p += kChunkThreads) {
        const int t = p / L, s = p % L;
        if (s <= t) A[t * CP + s] *= expf(Bc[t] - Bc[s]);
      }
      __syncthreads();
    }
    for (int t = w; t < L; t += kChunkWarps) {
      float o = O[t * kCols + lane];
      for (int s = 0; s <= t; ++s) o += A[t * CP + s] * Vt[s * kCols + lane];
      if (col) b.out[(sq.row + t0 + t) * b.out_stride + static_cast<int64_t>(h) * Vd + j] = o;
    }
    __syncthreads();  // the next chunk rewrites Vt, O, Bc and A
    t0 += L;
  }
  if (col) {
    for (int i = w; i < Kd; i += kChunkWarps) Sg[i * Vd] = S[i * kCols + lane];
  }
}

}  // namespace
}  // namespace cuda

template <>
absl::Status CheckGatedLinearShape<Device::kCuda>(int key_heads, int value_heads, int key_dim,
                                                  int value_dim, int chunk) {
  return CheckGatedLinearShape<Device::kCpu>(key_heads, value_heads, key_dim, value_dim, chunk);
}

template <>
void GatedLinear<Device::kCuda>(const GatedLinearBatch& b, const Parallel& /*par*/) {
  const int seqs = b.num_decode + b.num_prefill;
  if (seqs == 0 || b.value_heads == 0) return;
  // FLATSTATE_CUDA_LINEAR_PREFILL=recurrent (read once): prefill token by token, as before the
  // chunked kernel (kept for benchmarks against it). Otherwise the engine's chunk, halved while its
  // tile does not fit (or over 64).
  static const bool forced = cuda::EnvSaysRecurrent("FLATSTATE_CUDA_LINEAR_PREFILL");
  static size_t limit = 0;
  size_t chunk_bytes = 0;
  const int C = cuda::PrefillChunk(
      cuda::GatedLinearChunkKernel, b.num_prefill, forced, b.chunk,
      [&](int c) { return cuda::ChunkSharedFloats(b.key_dim, c); }, &limit, &chunk_bytes);
  // The recurrent kernel takes the decode sequences, and the prefill ones too when no chunked
  // tile fits (its block index runs over decode, then prefill).
  const int recurrent = C > 0 ? b.num_decode : seqs;
  if (recurrent > 0) {
    cuda::GatedLinearKernel<<<static_cast<unsigned>(recurrent * b.value_heads), cuda::kThreads,
                              sizeof(float) * b.key_dim, cuda::Stream()>>>(b);
    FS_CUDA_CHECK_LAUNCH("GatedLinearKernel");
  }
  if (C > 0) {
    const int tiles = (b.value_dim + cuda::kCols - 1) / cuda::kCols;
    cuda::GatedLinearChunkKernel<<<static_cast<unsigned>(b.num_prefill * b.value_heads * tiles),
                                   cuda::kChunkThreads, chunk_bytes, cuda::Stream()>>>(b, tiles, C);
    FS_CUDA_CHECK_LAUNCH("GatedLinearChunkKernel");
  }
}

}  // namespace flatstate
