// CUDA bodies of kernels/elementwise.h (device pointers; asynchronous on cuda::Stream(); failures
// recorded in the CUDA context). Same math as cpu/elementwise.cc; RMSNorm accumulates in double
// like the CPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/elementwise.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kThreads = 256;

unsigned Blocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);  // grid-stride loops cover rest
}

// One block per row of `dim` floats; row r at x + r * stride (y likewise). HeadRmsNorm passes
// every head of every row as a row: block b is head b % heads of row b / heads.
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const float* x, const float* weight, int64_t dim, float eps, float* y, int heads,
                  int64_t stride) {
  __shared__ double red[kNormThreads];
  const int64_t b = blockIdx.x;
  const int64_t off = (b / heads) * stride + (b % heads) * dim;
  const float* xr = x + off;
  float* yr = y + off;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    ss += static_cast<double>(xr[i]) * xr[i];
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kNormThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = static_cast<float>(1.0 / sqrt(red[0] / dim + eps));
  // y may alias x: each thread rewrites exactly the elements it alone read above.
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) yr[i] = xr[i] * inv * weight[i];
}

// One block per row.
__global__ void __launch_bounds__(kNormThreads)
    LayerNormKernel(const float* x, const float* weight, const float* bias, int64_t dim, float eps,
                    float* y) {
  __shared__ double red[kNormThreads];
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  double s = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) s += xr[i];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int k = kNormThreads / 2; k > 0; k >>= 1) {
    if (static_cast<int>(threadIdx.x) < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const double mean = red[0] / dim;
  __syncthreads();
  double v = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) v += (xr[i] - mean) * (xr[i] - mean);
  red[threadIdx.x] = v;
  __syncthreads();
  for (int k = kNormThreads / 2; k > 0; k >>= 1) {
    if (static_cast<int>(threadIdx.x) < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const float inv = static_cast<float>(1.0 / sqrt(red[0] / dim + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    yr[i] = (xr[i] - m) * inv * weight[i] + (bias != nullptr ? bias[i] : 0.f);
  }
}

__global__ void GeluKernel(float* x, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = 0.5f * x[i] * (1.f + erff(x[i] * kInvSqrt2));
  }
}

__global__ void AddKernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void BiasKernel(float* y, const float* bias, int64_t n, int64_t dim) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[i % dim];
  }
}

__global__ void SwiGluKernel(const float* in, int64_t n, int64_t F, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, c = i % F;
    const float g = in[r * 2 * F + c];
    out[i] = g / (1.f + expf(-g)) * in[r * 2 * F + F + c];
  }
}

// The convolution's outputs: a block is 32 channels x 8 rows of one sequence (grid (channel
// tiles, sequences, row groups)); its threads stride over the sequence's rows by 8 x row groups,
// so a long prefill spreads over the GPU and a batch of one-token steps over its sequences. Each
// output sums its K taps in ascending order, as the CPU does. The windows are read here and
// replaced only by ConvWindowKernel, launched after this one.
constexpr int kConvCols = 32, kConvRows = 8;
__global__ void __launch_bounds__(kConvCols* kConvRows)
    ConvKernel(const float* in, int64_t dim, int K, const float* w, const ConvSeq* seqs,
               int64_t layer_offset, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kConvCols) + threadIdx.x;
  if (c >= dim) return;
  const ConvSeq sq = seqs[blockIdx.y];
  const float* window = sq.window + layer_offset;
  const int64_t hist = K - 1;
  const float* src = in + sq.row * dim;
  float* dst = out + sq.row * dim;
  const int64_t stride = static_cast<int64_t>(kConvRows) * gridDim.z;
  for (int64_t t = blockIdx.z * static_cast<int64_t>(kConvRows) + threadIdx.y; t < sq.T;
       t += stride) {
    float o = 0.f;
    for (int i = 0; i < K; ++i) {
      const int64_t f = t + i;  // row f of [window; in]
      o += (f < hist ? window[f * dim + c] : src[(f - hist) * dim + c]) * w[c * K + i];
    }
    dst[t * dim + c] = o;
  }
}

// Each window becomes the last K-1 rows of [window; in]: one thread per channel of a sequence,
// ascending rows (row r reads row T + r > r, not yet overwritten).
__global__ void ConvWindowKernel(const float* in, int64_t dim, int K, const ConvSeq* seqs,
                                 int64_t layer_offset) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const ConvSeq sq = seqs[blockIdx.y];
  float* window = sq.window + layer_offset;
  const int64_t hist = K - 1;
  const float* src = in + sq.row * dim;
  for (int64_t r = 0; r < hist; ++r) {
    const int64_t f = sq.T + r;
    window[r * dim + c] = f < hist ? window[f * dim + c] : src[(f - hist) * dim + c];
  }
}

__global__ void GatherKernel(const float* src, const int32_t* idx, int64_t dim, float* dst) {
  const int64_t r = blockIdx.x;
  const float* s = src + static_cast<int64_t>(idx[r]) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[r * dim + i] = s[i];
}

}  // namespace

}  // namespace cuda

template <>
void RmsNorm<Device::kCuda>(const float* x, const float* weight, int64_t rows, int64_t dim,
                            float eps, float* y) {
  if (rows <= 0) return;
  cuda::RmsNormKernel<<<static_cast<unsigned>(rows), cuda::kNormThreads, 0, cuda::Stream()>>>(
      x, weight, dim, eps, y, 1, dim);
  FS_CUDA_CHECK_LAUNCH("RmsNormKernel");
}

template <>
void LayerNorm<Device::kCuda>(const float* x, const float* weight, const float* bias, int64_t rows,
                              int64_t dim, float eps, float* y) {
  if (rows <= 0) return;
  cuda::LayerNormKernel<<<static_cast<unsigned>(rows), cuda::kNormThreads, 0, cuda::Stream()>>>(
      x, weight, bias, dim, eps, y);
  FS_CUDA_CHECK_LAUNCH("LayerNormKernel");
}

template <>
void Gelu<Device::kCuda>(float* x, int64_t n) {
  if (n <= 0) return;
  cuda::GeluKernel<<<cuda::Blocks(n, cuda::kThreads), cuda::kThreads, 0, cuda::Stream()>>>(x, n);
  FS_CUDA_CHECK_LAUNCH("GeluKernel");
}

template <>
void HeadRmsNorm<Device::kCuda>(float* x, int64_t rows, int64_t stride, int heads, int head_dim,
                                const float* weight, float eps) {
  if (rows <= 0 || heads <= 0) return;
  cuda::
      RmsNormKernel<<<static_cast<unsigned>(rows * heads), cuda::kNormThreads, 0, cuda::Stream()>>>(
          x, weight, head_dim, eps, x, heads, stride);
  FS_CUDA_CHECK_LAUNCH("RmsNormKernel (heads)");
}

template <>
void AddBias<Device::kCuda>(float* y, const float* bias, int64_t rows, int64_t dim) {
  const int64_t n = rows * dim;
  if (n <= 0) return;
  cuda::BiasKernel<<<cuda::Blocks(n, cuda::kThreads), cuda::kThreads, 0, cuda::Stream()>>>(y, bias,
                                                                                           n, dim);
  FS_CUDA_CHECK_LAUNCH("BiasKernel");
}

template <>
void SwiGlu<Device::kCuda>(const float* in, int64_t rows, int64_t F, float* out) {
  const int64_t n = rows * F;
  if (n <= 0) return;
  cuda::SwiGluKernel<<<cuda::Blocks(n, cuda::kThreads), cuda::kThreads, 0, cuda::Stream()>>>(
      in, n, F, out);
  FS_CUDA_CHECK_LAUNCH("SwiGluKernel");
}

template <>
void AddInPlace<Device::kCuda>(float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  cuda::AddKernel<<<cuda::Blocks(n, cuda::kThreads), cuda::kThreads, 0, cuda::Stream()>>>(y, x, n);
  FS_CUDA_CHECK_LAUNCH("AddKernel");
}

template <>
void CausalConv<Device::kCuda>(const float* in, int64_t dim, int K, const float* w,
                               const ConvSeq* seqs, int B, int64_t layer_offset, float* out) {
  if (B <= 0 || dim <= 0) return;
  // The sequences' lengths are on the device, so the row groups come from B alone: 64 / B, so
  // that a lone sequence still spreads (768 channels: 24 x 64 blocks; a 4096-token prefill, 8
  // rows per thread), one from 64 sequences on.
  const unsigned tiles = static_cast<unsigned>((dim + cuda::kConvCols - 1) / cuda::kConvCols);
  const unsigned groups = static_cast<unsigned>(B >= 64 ? 1 : 64 / B);
  cuda::ConvKernel<<<dim3(tiles, B, groups), dim3(cuda::kConvCols, cuda::kConvRows), 0,
                     cuda::Stream()>>>(in, dim, K, w, seqs, layer_offset, out);
  FS_CUDA_CHECK_LAUNCH("ConvKernel");
  if (K > 1) {
    const unsigned wtiles = static_cast<unsigned>((dim + 127) / 128);
    cuda::ConvWindowKernel<<<dim3(wtiles, B), 128, 0, cuda::Stream()>>>(in, dim, K, seqs,
                                                                        layer_offset);
    FS_CUDA_CHECK_LAUNCH("ConvWindowKernel");
  }
}

template <>
void GatherRows<Device::kCuda>(const float* src, const int32_t* idx, int64_t n, int64_t dim,
                               float* dst) {
  if (n <= 0) return;
  cuda::GatherKernel<<<static_cast<unsigned>(n), 256, 0, cuda::Stream()>>>(src, idx, dim, dst);
  FS_CUDA_CHECK_LAUNCH("GatherKernel");
}

}  // namespace flatstate
