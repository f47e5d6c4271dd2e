// CUDA bodies of kernels/recurrent_gates.h (device pointers; asynchronous on cuda::Stream();
// failures recorded in the CUDA context). Same math as cpu/recurrent_gates.cc; the norm
// accumulates in double like the CPU. Run on an H200 on 2026-11-26 (docs/gpu.md).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/recurrent_gates.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float SiluF(float x) { return x / (1.f + expf(-x)); }

__global__ void SiluRowsKernel(float* x, int64_t rows, int64_t stride, int64_t dim) {
  const int64_t n = rows * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float* p = x + (i / dim) * stride + i % dim;
    *p = SiluF(*p);
  }
}

__global__ void DeltaGatesKernel(const float* a_in, const float* b_in, int64_t in_stride,
                                 int64_t rows, int heads, const float* A_log, const float* dt_bias,
                                 float* g, float* beta, int64_t out_stride) {
  const int64_t n = rows * heads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / heads;
    const int h = static_cast<int>(i % heads);
    const float x = a_in[r * in_stride + h] + dt_bias[h];
    const float sp = x > 20.f ? x : log1pf(expf(x));
    g[r * out_stride + h] = -expf(A_log[h]) * sp;
    beta[r * out_stride + h] = 1.f / (1.f + expf(-b_in[r * in_stride + h]));
  }
}

__global__ void DeltaBetaKernel(const float* b_in, int64_t in_stride, int64_t rows, int heads,
                                float scale, float* beta, int64_t out_stride) {
  const int64_t n = rows * heads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / heads, h = i % heads;
    const float s = b_in == nullptr ? 1.f : 1.f / (1.f + expf(-b_in[r * in_stride + h]));
    beta[r * out_stride + h] = scale * s;
  }
}

__global__ void SigmoidMulKernel(float* x, int64_t x_stride, const float* gate, int64_t gate_stride,
                                 int64_t rows, int64_t dim) {
  const int64_t n = rows * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim, c = i % dim;
    x[r * x_stride + c] *= 1.f / (1.f + expf(-gate[r * gate_stride + c]));
  }
}

__global__ void GlaGatesKernel(float* x, int64_t rows, int64_t stride, int64_t dim,
                               const float* bias, float normalizer, float clamp_min) {
  const int64_t n = rows * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim, c = i % dim;
    float* p = x + r * stride + c;
    const float a = *p + bias[c];
    const float ls = fminf(a, 0.f) - log1pf(expf(-fabsf(a)));
    *p = fmaxf(ls / normalizer, clamp_min);
  }
}

__global__ void SsmGatesKernel(const float* dt_in, int64_t in_stride, int64_t rows, int heads,
                               const float* A_log, const float* dt_bias, float dt_min, float dt_max,
                               float* g, float* dt, int64_t out_stride) {
  const int64_t n = rows * heads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / heads;
    const int h = static_cast<int>(i % heads);
    const float x = dt_in[r * in_stride + h] + dt_bias[h];
    const float d = fminf(fmaxf(x > 20.f ? x : log1pf(expf(x)), dt_min), dt_max);
    dt[r * out_stride + h] = d;
    g[r * out_stride + h] = -expf(A_log[h]) * d;
  }
}

// per_row: s[r * s_stride + h] (ScaleHeads, writing out); else s[h] added into out (AddScaled).
__global__ void ScaleHeadsKernel(const float* x, int64_t x_stride, const float* s, int64_t s_stride,
                                 int64_t rows, int heads, int head_dim, float* out,
                                 int64_t out_stride, bool accumulate) {
  const int64_t width = static_cast<int64_t>(heads) * head_dim, n = rows * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, c = i % width;
    const int h = static_cast<int>(c / head_dim);
    const float v = s[r * s_stride + h] * x[r * x_stride + c];
    if (accumulate) {
      out[r * out_stride + c] += v;
    } else {
      out[r * out_stride + c] = v;
    }
  }
}

// One block per (row, head).
__global__ void __launch_bounds__(kThreads)
    GatedNormKernel(float* x, int64_t x_stride, const float* z, int64_t z_stride, int heads,
                    int head_dim, const float* weight, int64_t weight_stride, float eps,
                    bool gate_first) {
  __shared__ double red[kThreads];
  const int64_t r = blockIdx.x / heads;
  const int h = blockIdx.x % heads;
  float* xh = x + r * x_stride + static_cast<int64_t>(h) * head_dim;
  const float* zh = z + r * z_stride + static_cast<int64_t>(h) * head_dim;
  const float* wh = weight + h * weight_stride;
  double ss = 0;
  for (int i = threadIdx.x; i < head_dim; i += kThreads) {
    const float u = gate_first ? xh[i] * SiluF(zh[i]) : xh[i];
    if (gate_first) xh[i] = u;
    ss += static_cast<double>(u) * u;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = static_cast<float>(1.0 / sqrt(red[0] / head_dim + eps));
  for (int i = threadIdx.x; i < head_dim; i += kThreads) {
    xh[i] = gate_first ? xh[i] * inv * wh[i] : xh[i] * inv * wh[i] * SiluF(zh[i]);
  }
}

unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

}  // namespace
}  // namespace cuda

template <>
void SiluRows<Device::kCuda>(float* x, int64_t rows, int64_t stride, int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  cuda::SiluRowsKernel<<<cuda::Blocks(rows * dim), cuda::kThreads, 0, cuda::Stream()>>>(
      x, rows, stride, dim);
  FS_CUDA_CHECK_LAUNCH("SiluRowsKernel");
}

template <>
void DeltaGates<Device::kCuda>(const float* a_in, const float* b_in, int64_t in_stride,
                               int64_t rows, int heads, const float* A_log, const float* dt_bias,
                               float* g, float* beta, int64_t out_stride) {
  if (rows <= 0 || heads <= 0) return;
  cuda::DeltaGatesKernel<<<cuda::Blocks(rows * heads), cuda::kThreads, 0, cuda::Stream()>>>(
      a_in, b_in, in_stride, rows, heads, A_log, dt_bias, g, beta, out_stride);
  FS_CUDA_CHECK_LAUNCH("DeltaGatesKernel");
}

template <>
void DeltaBeta<Device::kCuda>(const float* b_in, int64_t in_stride, int64_t rows, int heads,
                              float scale, float* beta, int64_t out_stride) {
  if (rows <= 0 || heads <= 0) return;
  cuda::DeltaBetaKernel<<<cuda::Blocks(rows * heads), cuda::kThreads, 0, cuda::Stream()>>>(
      b_in, in_stride, rows, heads, scale, beta, out_stride);
  FS_CUDA_CHECK_LAUNCH("DeltaBetaKernel");
}

template <>
void SigmoidMulRows<Device::kCuda>(float* x, int64_t x_stride, const float* gate,
                                   int64_t gate_stride, int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  cuda::SigmoidMulKernel<<<cuda::Blocks(rows * dim), cuda::kThreads, 0, cuda::Stream()>>>(
      x, x_stride, gate, gate_stride, rows, dim);
  FS_CUDA_CHECK_LAUNCH("SigmoidMulKernel");
}

template <>
void GlaGates<Device::kCuda>(float* x, int64_t rows, int64_t stride, int64_t dim, const float* bias,
                             float normalizer, float clamp_min) {
  if (rows <= 0 || dim <= 0) return;
  cuda::GlaGatesKernel<<<cuda::Blocks(rows * dim), cuda::kThreads, 0, cuda::Stream()>>>(
      x, rows, stride, dim, bias, normalizer, clamp_min);
  FS_CUDA_CHECK_LAUNCH("GlaGatesKernel");
}

template <>
void SsmGates<Device::kCuda>(const float* dt_in, int64_t in_stride, int64_t rows, int heads,
                             const float* A_log, const float* dt_bias, float dt_min, float dt_max,
                             float* g, float* dt, int64_t out_stride) {
  if (rows <= 0 || heads <= 0) return;
  cuda::SsmGatesKernel<<<cuda::Blocks(rows * heads), cuda::kThreads, 0, cuda::Stream()>>>(
      dt_in, in_stride, rows, heads, A_log, dt_bias, dt_min, dt_max, g, dt, out_stride);
  FS_CUDA_CHECK_LAUNCH("SsmGatesKernel");
}

template <>
void ScaleHeads<Device::kCuda>(const float* x, int64_t x_stride, const float* s, int64_t s_stride,
                               int64_t rows, int heads, int head_dim, float* out,
                               int64_t out_stride) {
  if (rows <= 0 || heads <= 0 || head_dim <= 0) return;
  cuda::ScaleHeadsKernel<<<cuda::Blocks(rows * heads * head_dim), cuda::kThreads, 0,
                           cuda::Stream()>>>(x, x_stride, s, s_stride, rows, heads, head_dim, out,
                                             out_stride, false);
  FS_CUDA_CHECK_LAUNCH("ScaleHeadsKernel");
}

template <>
void AddScaledHeads<Device::kCuda>(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                   const float* s, int64_t rows, int heads, int head_dim) {
  if (rows <= 0 || heads <= 0 || head_dim <= 0) return;
  cuda::ScaleHeadsKernel<<<cuda::Blocks(rows * heads * head_dim), cuda::kThreads, 0,
                           cuda::Stream()>>>(x, x_stride, s, 0, rows, heads, head_dim, y, y_stride,
                                             true);
  FS_CUDA_CHECK_LAUNCH("ScaleHeadsKernel");
}

template <>
void GatedHeadRmsNorm<Device::kCuda>(float* x, int64_t x_stride, const float* z, int64_t z_stride,
                                     int64_t rows, int heads, int head_dim, const float* weight,
                                     int64_t weight_stride, float eps, GateOrder order) {
  if (rows <= 0 || heads <= 0) return;
  cuda::GatedNormKernel<<<static_cast<unsigned>(rows * heads), cuda::kThreads, 0, cuda::Stream()>>>(
      x, x_stride, z, z_stride, heads, head_dim, weight, weight_stride, eps,
      order == GateOrder::kGateThenNorm);
  FS_CUDA_CHECK_LAUNCH("GatedNormKernel");
}

}  // namespace flatstate
