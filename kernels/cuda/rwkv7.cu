// CUDA bodies of kernels/rwkv7.h (device pointers; asynchronous on cuda::Stream(); failures
// recorded in the CUDA context). Same math as cpu/rwkv7.cc; reductions accumulate in double like
// the CPU. The recurrence: decode sequences (and prefill ones where the chunked kernel of
// cuda/rwkv7_chunk.cu does not fit) one block per (sequence, head), thread j owning value column
// j of S (read and written in global memory, coalesced across the block), the per-token key
// vectors in shared memory. Run on an H200 on 2026-11-26 (docs/gpu.md): the RWKV-7 folder's logits
// within 1e-5 of the float64 reference, 64/64 greedy tokens.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/cuda/rwkv7_chunk.h"
#include "kernels/rwkv7.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadThreads = 128;
constexpr float kLogDecayScale = -0.6065306597126334f;

__device__ inline float SigmoidF(float x) { return 1.f / (1.f + expf(-x)); }

unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

#define FS_GRID_LOOP(i, n)                                                               \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void MixKernel(const float* x, const float* d, const float* mu, int n_mu, int64_t rows,
                          int64_t dim, float* out) {
  const int64_t per = rows * dim;
  FS_GRID_LOOP(i, per * n_mu) {
    const int64_t j = i / per, rc = i % per;
    out[i] = x[rc] + d[rc] * mu[j * dim + rc % dim];
  }
}

__global__ void ActivateKernel(float* x, int64_t n, int act) {
  FS_GRID_LOOP(i, n) {
    const float v = x[i];
    switch (act) {
      case 0:
        x[i] = SigmoidF(v);
        break;
      case 1:
        x[i] = tanhf(v);
        break;
      case 2:
        x[i] = v > 0.f ? v * v : 0.f;
        break;
      default:
        x[i] = kLogDecayScale * SigmoidF(v);
        break;
    }
  }
}

__global__ void LerpKernel(float* v, const float* t, const float* z, int64_t n) {
  FS_GRID_LOOP(i, n) { v[i] += (t[i] - v[i]) * SigmoidF(z[i]); }
}

// One block per (row, head); block-wide double reductions.
__device__ double BlockSum(double x, double* red) {
  red[threadIdx.x] = x;
  __syncthreads();
  for (int s = kHeadThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const double out = red[0];
  __syncthreads();
  return out;
}

__global__ void __launch_bounds__(kHeadThreads)
    KeysKernel(float* k, const float* a, const float* k_k, const float* k_a, int heads,
               int head_dim, bool fused_l2, float* kk) {
  __shared__ double red[kHeadThreads];
  const int64_t r = blockIdx.x / heads;
  const int h = blockIdx.x % heads;
  const int64_t off = r * heads * static_cast<int64_t>(head_dim) + int64_t{h} * head_dim;
  const int64_t c0 = int64_t{h} * head_dim;
  double n2 = 0;
  for (int i = threadIdx.x; i < head_dim; i += kHeadThreads) {
    const float u = k[off + i] * k_k[c0 + i];
    kk[off + i] = u;
    n2 += static_cast<double>(u) * u;
  }
  n2 = BlockSum(n2, red);
  const double norm = fused_l2 ? sqrt(n2 + 1e-6) : fmax(sqrt(n2), 1e-12);
  const float inv = static_cast<float>(1.0 / norm);
  for (int i = threadIdx.x; i < head_dim; i += kHeadThreads) {
    kk[off + i] *= inv;
    k[off + i] = k[off + i] * (1.f + (a[off + i] - 1.f) * k_a[c0 + i]);
  }
}

__global__ void __launch_bounds__(kHeadThreads)
    OutputKernel(float* o, const float* r, const float* k, const float* v, const float* g,
                 const float* r_k, const float* gn_w, const float* gn_b, int heads, int head_dim,
                 float eps) {
  __shared__ double red[kHeadThreads];
  const int64_t row = blockIdx.x / heads;
  const int h = blockIdx.x % heads;
  const int64_t off = row * heads * static_cast<int64_t>(head_dim) + int64_t{h} * head_dim;
  const int64_t c0 = int64_t{h} * head_dim;
  double s = 0, bonus = 0;
  for (int i = threadIdx.x; i < head_dim; i += kHeadThreads) {
    s += o[off + i];
    bonus += static_cast<double>(r[off + i]) * k[off + i] * r_k[c0 + i];
  }
  const double mean = BlockSum(s, red) / head_dim;
  bonus = BlockSum(bonus, red);
  double var = 0;
  for (int i = threadIdx.x; i < head_dim; i += kHeadThreads) {
    var += (o[off + i] - mean) * (o[off + i] - mean);
  }
  var = BlockSum(var, red);
  const float inv = static_cast<float>(1.0 / sqrt(var / head_dim + eps));
  const float m = static_cast<float>(mean), bf = static_cast<float>(bonus);
  for (int i = threadIdx.x; i < head_dim; i += kHeadThreads) {
    const float n = (o[off + i] - m) * inv * gn_w[c0 + i] + gn_b[c0 + i];
    o[off + i] = (n + bf * v[off + i]) * g[off + i];
  }
}

__global__ void __launch_bounds__(kHeadThreads) RecurrenceKernel(Rwkv7Batch b) {
  extern __shared__ float sh[];  // [N] each: exp(logw), kk, kk * a, k, r
  const int N = b.key_dim;
  float* w = sh;
  float* kk = w + N;
  float* ka = kk + N;
  float* kv = ka + N;
  float* rv = kv + N;
  const int seq = blockIdx.x / b.value_heads;
  const int h = blockIdx.x % b.value_heads;
  const LinearSeq& sq = seq < b.num_decode ? b.decode[seq] : b.prefill[seq - b.num_decode];
  float* S = sq.state + b.layer_offset + b.s_off + static_cast<int64_t>(h) * N * N;
  const int64_t hn = int64_t{h} * N;
  for (int64_t t = 0; t < sq.T; ++t) {
    const int64_t r = sq.row + t;
    for (int i = threadIdx.x; i < N; i += kHeadThreads) {
      w[i] = expf(b.logw[r * b.wka_stride + hn + i]);
      kk[i] = b.kk[r * b.wka_stride + hn + i];
      ka[i] = kk[i] * b.a[r * b.wka_stride + hn + i];
      kv[i] = b.k[r * b.qk_stride + hn + i];
      rv[i] = b.q[r * b.qk_stride + hn + i];
    }
    __syncthreads();
    const float* v = b.v + r * b.v_stride + hn;
    float* o = b.out + r * b.out_stride + hn;
    for (int j = threadIdx.x; j < N; j += kHeadThreads) {
      float u = 0.f;
      for (int i = 0; i < N; ++i) u += kk[i] * S[static_cast<int64_t>(i) * N + j];
      float acc = 0.f;
      for (int i = 0; i < N; ++i) {
        float* s = S + static_cast<int64_t>(i) * N + j;
        *s = w[i] * *s - ka[i] * u + kv[i] * v[j];
        acc += rv[i] * *s;
      }
      o[j] = acc;
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace cuda

template <>
void TokenShiftMix<Device::kCuda>(const float* x, const float* d, const float* mu, int n_mu,
                                  int64_t rows, int64_t dim, float* out) {
  if (rows <= 0 || dim <= 0 || n_mu <= 0) return;
  cuda::MixKernel<<<cuda::Blocks(rows * dim * n_mu), cuda::kThreads, 0, cuda::Stream()>>>(
      x, d, mu, n_mu, rows, dim, out);
  FS_CUDA_CHECK_LAUNCH("MixKernel");
}

template <>
void ActivateRows<Device::kCuda>(float* x, int64_t rows, int64_t dim, Activation act) {
  if (rows <= 0 || dim <= 0) return;
  cuda::ActivateKernel<<<cuda::Blocks(rows * dim), cuda::kThreads, 0, cuda::Stream()>>>(
      x, rows * dim, static_cast<int>(act));
  FS_CUDA_CHECK_LAUNCH("ActivateKernel");
}

template <>
void LerpToward<Device::kCuda>(float* v, const float* target, const float* z, int64_t rows,
                               int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  cuda::LerpKernel<<<cuda::Blocks(rows * dim), cuda::kThreads, 0, cuda::Stream()>>>(v, target, z,
                                                                                    rows * dim);
  FS_CUDA_CHECK_LAUNCH("LerpKernel");
}

template <>
void Rwkv7Keys<Device::kCuda>(float* k, const float* a, const float* k_k, const float* k_a,
                              int64_t rows, int heads, int head_dim, bool fused_l2, float* kk) {
  if (rows <= 0 || heads <= 0) return;
  cuda::KeysKernel<<<static_cast<unsigned>(rows * heads), cuda::kHeadThreads, 0, cuda::Stream()>>>(
      k, a, k_k, k_a, heads, head_dim, fused_l2, kk);
  FS_CUDA_CHECK_LAUNCH("KeysKernel");
}

template <>
absl::Status CheckRwkv7Shape<Device::kCuda>(int heads, int head_dim) {
  return CheckRwkv7Shape<Device::kCpu>(heads, head_dim);
}

template <>
void Rwkv7Recurrence<Device::kCuda>(const Rwkv7Batch& b, const Parallel& /*par*/) {
  if (b.num_decode + b.num_prefill == 0 || b.value_heads == 0) return;
  // Prefill sequences in the chunked form where it fits (kernels/cuda/rwkv7_chunk.h); the
  // recurrent kernel takes the decode sequences and the rest (its block index runs over decode,
  // then prefill).
  const int seqs = cuda::LaunchRwkv7Chunk(b) ? b.num_decode : b.num_decode + b.num_prefill;
  if (seqs == 0) return;
  cuda::RecurrenceKernel<<<static_cast<unsigned>(seqs * b.value_heads), cuda::kHeadThreads,
                           sizeof(float) * 5 * b.key_dim, cuda::Stream()>>>(b);
  FS_CUDA_CHECK_LAUNCH("Rwkv7RecurrenceKernel");
}

template <>
void Rwkv7Output<Device::kCuda>(float* o, const float* r, const float* k, const float* v,
                                const float* g, const float* r_k, const float* gn_w,
                                const float* gn_b, int64_t rows, int heads, int head_dim,
                                float eps) {
  if (rows <= 0 || heads <= 0) return;
  cuda::
      OutputKernel<<<static_cast<unsigned>(rows * heads), cuda::kHeadThreads, 0, cuda::Stream()>>>(
          o, r, k, v, g, r_k, gn_w, gn_b, heads, head_dim, eps);
  FS_CUDA_CHECK_LAUNCH("OutputKernel");
}

}  // namespace flatstate
