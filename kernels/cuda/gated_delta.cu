// CUDA body of kernels/gated_delta.h: the recurrent form, token by token, for decode and
// prefill sequences alike (prefill on the GPU is therefore the recurrent form, equal to the CPU's
// chunked form within the op's tolerance, not bit for bit).
//
// One block per (sequence, value head, tile of 32 value columns), W = ceil(key_dim / 32) warps:
// lane c of warp w owns column j = 32 * tile + c and the key rows i = 32 w .. 32 w + 31 of the
// state, held in 32 registers for the whole call: S is read once and written once however many
// tokens the sequence has (the first version read and wrote it twice per token, every thread
// walking all key_dim rows one dependent load at a time: latency-bound, 16 busy SMs at batch 1 on
// Qwen3.5-0.8B's 16 heads). Per token: the warps' partial sums of S^T k (and then S^T q) for a
// column meet in shared memory and are added in warp order, so the result is deterministic and
// independent of the batch. q and k are L2-normalised in shared memory first.
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"
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
  cuda::GatedDeltaKernel<<<static_cast<unsigned>(seqs * b.value_heads * tiles),
                           static_cast<unsigned>(32 * warps), 0, cuda::Stream()>>>(b, tiles);
  FS_CUDA_CHECK_LAUNCH("GatedDeltaKernel");
}

}  // namespace flatstate
