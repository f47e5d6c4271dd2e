// CUDA body of kernels/window_attention.h: sliding-window softmax attention over a ring of the
// last W RoPE-rotated keys and values.
//
// The math is kernels/cpu/window_attention.cc's, term for term: RoPE angles in double, scores
// q . k / sqrt(hd), softmax with the max subtracted, then o = sum_t (e_t * (1 / sum)) v_t in
// ascending position. One block (kWarps warps) per (sequence, head), in three phases separated
// by barriers: (1) rotate q and k of the sequence's rows in place; (2) per query, in order, the
// scores (one warp per key, lanes over hd, a fixed shuffle tree) into shared memory, the block's
// max and sum (fixed-order trees) and the weighted sum of values (one thread per column, keys in
// ascending position); (3) write the call's last min(T, W) keys and values into the ring. Only
// this block touches its (sequence, head)'s slice of the ring and of the rows, and every read of
// the ring (phase 2) is before the barrier that precedes the writes (phase 3). Deterministic;
// equal to the CPU body up to fp32 rounding (its normaliser is summed in double).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/context.h"
#include "kernels/window_attention.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kT = kWarps * 32;
constexpr size_t kSmemLimit = kDefaultSmemLimit;
__device__ __forceinline__ float BlockSum(float v, float* red) { return BlockSumOf<kT>(v, red); }
__device__ __forceinline__ float BlockMax(float v, float* red) { return BlockMaxOf<kT>(v, red); }

// Grid (num, H). Shared memory: qs [hd], sc [W], red [kT].
__global__ void __launch_bounds__(kT) WindowKernel(WindowBatch b) {
  const int h = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int hd = b.head_dim, half = hd / 2, W = b.window;
  extern __shared__ float smem[];
  float* qs = smem;
  float* sc = qs + hd;
  float* red = sc + W;
  const WindowSeq sq = b.seqs[blockIdx.x];
  const int64_t D = static_cast<int64_t>(b.H) * hd, P = sq.pos0, T = sq.T;
  const int64_t head = static_cast<int64_t>(h) * hd;
  float* q0 = b.q + sq.row * b.in_stride + head;
  float* k0 = b.k + sq.row * b.in_stride + head;
  const float* v0 = b.v + sq.row * b.in_stride + head;
  float* ring_k = sq.state + b.ring_k + head;
  float* ring_v = sq.state + b.ring_v + head;

  // Phase 1: rotate-half RoPE of q and k at their absolute positions (angles in double as the
  // CPU's RopeAngles).
  for (int64_t x = tid; x < T * half; x += kT) {
    const int64_t t = x / half;
    const int i = static_cast<int>(x % half);
    const double inv = pow(static_cast<double>(b.rope_theta), -2.0 * i / hd);
    const double p = static_cast<double>(P + t);
    const float c = static_cast<float>(cos(p * inv));
    const float s = static_cast<float>(sin(p * inv));
    float* qv = q0 + t * b.in_stride;
    float* kv = k0 + t * b.in_stride;
    const float q1 = qv[i], q2 = qv[i + half];
    qv[i] = q1 * c - q2 * s;
    qv[i + half] = q2 * c + q1 * s;
    const float k1 = kv[i], k2 = kv[i + half];
    kv[i] = k1 * c - k2 * s;
    kv[i + half] = k2 * c + k1 * s;
  }
  __syncthreads();  // the rotated rows are read by other threads below

  // Phase 2: attention, one query at a time. Key / value of position t: the ring's for
  // positions before the call, else the call's (rotated) rows.
  const float scale = 1.f / sqrtf(static_cast<float>(hd));
  for (int64_t i = 0; i < T; ++i) {
    const int64_t p = P + i;
    const int64_t lo = p - W + 1 > 0 ? p - W + 1 : 0;
    const int n = static_cast<int>(p - lo + 1);  // 1 .. W
    const float* qi = q0 + i * b.in_stride;
    for (int d = tid; d < hd; d += kT) qs[d] = qi[d];
    __syncthreads();
    for (int j = warp; j < n; j += kWarps) {
      const int64_t t = lo + j;
      const float* kt = t < P ? ring_k + (t % W) * D : k0 + (t - P) * b.in_stride;
      float part = 0.f;
      for (int d = lane; d < hd; d += 32) part += qs[d] * kt[d];
      for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
      if (lane == 0) sc[j] = part * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = tid; j < n; j += kT) mx = fmaxf(mx, sc[j]);
    mx = BlockMax(mx, red);
    float part = 0.f;
    for (int j = tid; j < n; j += kT) {  // the same thread read sc[j] above
      const float e = expf(sc[j] - mx);
      sc[j] = e;
      part += e;
    }
    const float inv = 1.f / BlockSum(part, red);  // its barriers publish sc
    float* o = b.out + (sq.row + i) * b.out_stride + head;
    for (int d = tid; d < hd; d += kT) {
      float acc = 0.f;
      for (int j = 0; j < n; ++j) {
        const int64_t t = lo + j;
        const float* vt = t < P ? ring_v + (t % W) * D : v0 + (t - P) * b.in_stride;
        acc += (sc[j] * inv) * vt[d];
      }
      o[d] = acc;
    }
    __syncthreads();  // qs and sc are rewritten by the next query; last reads of the ring
  }

  // Phase 3: every read of the old ring is done (the barrier above); write the call's last
  // min(T, W) positions into their slots.
  const int64_t first = P + T - W > P ? P + T - W : P;
  const int64_t m = P + T - first;
  for (int64_t x = tid; x < m * hd; x += kT) {
    const int64_t t = first + x / hd;
    const int d = static_cast<int>(x % hd);
    const int64_t slot = (t % W) * D;
    ring_k[slot + d] = k0[(t - P) * b.in_stride + d];
    ring_v[slot + d] = v0[(t - P) * b.in_stride + d];
  }
}

size_t SmemBytes(int head_dim, int window) {
  return sizeof(float) * (static_cast<size_t>(head_dim) + static_cast<size_t>(window) + kT);
}

}  // namespace
}  // namespace cuda

template <>
absl::Status CheckWindowAttentionShape<Device::kCuda>(int head_dim, int window) {
  if (head_dim < 2 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", head_dim, " must be even"));
  }
  if (window < 1) {
    return absl::InvalidArgumentError(absl::StrCat("window_size ", window, " must be >= 1"));
  }
  if (cuda::SmemBytes(head_dim, window) > cuda::kSmemLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("device cuda: head_dim ", head_dim, " + window_size ", window, " need ",
                     cuda::SmemBytes(head_dim, window),
                     " bytes of shared memory in the window-attention "
                     "kernel, over its ",
                     cuda::kSmemLimit, "-byte (48 KiB) limit"));
  }
  return absl::OkStatus();
}

template <>
void WindowAttention<Device::kCuda>(const WindowBatch& b, const Parallel& /*par*/) {
  if (b.num <= 0 || b.H <= 0) return;
  cuda::WindowKernel<<<dim3(static_cast<unsigned>(b.num), static_cast<unsigned>(b.H)), cuda::kT,
                       cuda::SmemBytes(b.head_dim, b.window), cuda::Stream()>>>(b);
  FS_CUDA_CHECK_LAUNCH("WindowAttention WindowKernel");
}

}  // namespace flatstate
