// CUDA body of kernels/gemm.h: y[m, n] = x[m, k] * w[n, k]^T (+ y), x, y and the weight in device
// memory, `par` unused. Per weight type (GemmWeight::dtype; what the device weight holds is in
// gemm.h):
//   kF32   cublasGemmEx, fp32 operands, CUBLAS_COMPUTE_32F on a handle in CUBLAS_DEFAULT_MATH
//          mode, i.e. plain FP32 (no TF32), so the results match the CPU to fp32 rounding.
//   kBf16  the weight stays bf16 on the device (half the bytes of f32). cublasGemmEx wants both
//          operands of one type, so each call first rounds x to bf16 (nearest-even, the CPU's
//          Bf16FromFloat) into a workspace and then multiplies bf16 x bf16 with fp32 products and
//          sums (CUBLAS_COMPUTE_32F) into the fp32 y. Not the CPU's bits: the CPU keeps x in fp32.
//          Per element |y - y_cpu| <= (2^-8 + 2 k 2^-24) * sum_kk |x w| (the activation's
//          rounding, at most 2^-8 relative, plus fp32 summation in two orders); docs/gpu.md.
//   kInt8, kInt4  quantised on the host exactly as the CPU quantises them (QuantizeBlockInt8 /
//          QuantizeBlockInt4 per column and block of 32 along k), then dequantised once, at
//          prepare, by DequantizeBlocks to an fp32 device weight float(qw) * sw, and multiplied
//          as kF32. It costs f32's 4 bytes per weight on the device (no saving yet) and keeps x in
//          fp32, where the CPU quantises x per block too: the two differ by at most
//          sum over blocks of (max|x_block| / 254) * sum_block |float(qw) * sw| (plus fp32
//          rounding). A weight that arrives quantised (PrepareGemmWeightQuantized: a model file
//          storing int8 / int4) skips the host quantisation: its quants and scales are
//          dequantised by the same kernel, so it gives the device weight its fp32 original gives.
//
// Batch invariance through cuBLAS holds to rounding only: cuBLAS may pick a different kernel
// (tile shape, split-K) for a different m, so a row's floats can change with the batch size.
// Results are deterministic for a given shape (no atomics). See docs/gpu.md.
//
// A weight with `batch_invariant` set is multiplied by GemmFixedOrder instead: every output
// element is one thread's chain acc = fmaf(x[i][kk], w[j][kk], acc), kk = 0..k-1 in order from
// acc = 0, then y = acc or y + acc, with a bf16 weight widened exactly first: the CPU GEMM's order
// of operations for kF32 and kBf16 (gemm.h), so its bits, for any m and any position of the row
// in the batch (kInt8/kInt4 run it on their dequantised fp32 weight: batch-invariant, but not the
// CPU's integer chain). Tiles of 64 rows x 64 columns share x and w through shared memory, 32
// values of k at a time; tiling decides which chains run together, never the order inside one.
#include <cublas_v2.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"
#include "kernels/gemm.h"

namespace flatstate {
namespace {

constexpr int kTileCols = 64;  // threadIdx.x: one output column each
constexpr int kRowGroups = 8;  // threadIdx.y
constexpr int kRowsPerThread = 8;
constexpr int kTileRows = kRowGroups * kRowsPerThread;
constexpr int kTileK = 32;
constexpr int64_t kBlock = PackedWeight::kInt8Block;

__device__ __forceinline__ float Widen(float v) { return v; }
__device__ __forceinline__ float Widen(uint16_t b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}

template <typename W>
__global__ void GemmFixedOrder(const float* __restrict__ x, int m, const W* __restrict__ w, int n,
                               int k, float* __restrict__ y, bool accumulate) {
  __shared__ float ws[kTileK][kTileCols + 1];  // w tile, transposed: [kk][column]
  __shared__ float xs[kTileRows][kTileK];      // x tile: [row][kk]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kTileCols + tx;
  constexpr int kThreads = kTileCols * kRowGroups;
  const int col0 = blockIdx.x * kTileCols, row0 = blockIdx.y * kTileRows;
  float acc[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) acc[r] = 0.f;
  for (int k0 = 0; k0 < k; k0 += kTileK) {
    const int kn = min(kTileK, k - k0);
    // Consecutive threads read consecutive k of one row of w / x (coalesced).
    for (int idx = tid; idx < kTileCols * kTileK; idx += kThreads) {
      const int c = idx / kTileK, kk = idx % kTileK;
      const int col = col0 + c;
      ws[kk][c] = (col < n && kk < kn) ? Widen(w[static_cast<int64_t>(col) * k + k0 + kk]) : 0.f;
    }
    for (int idx = tid; idx < kTileRows * kTileK; idx += kThreads) {
      const int r = idx / kTileK, kk = idx % kTileK;
      const int row = row0 + r;
      xs[r][kk] = (row < m && kk < kn) ? x[static_cast<int64_t>(row) * k + k0 + kk] : 0.f;
    }
    __syncthreads();
    for (int kk = 0; kk < kn; ++kk) {  // only real k: padding never touches a chain
      const float wv = ws[kk][tx];
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        acc[r] = fmaf(xs[ty * kRowsPerThread + r][kk], wv, acc[r]);
      }
    }
    __syncthreads();
  }
  const int col = col0 + tx;
  if (col >= n) return;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = row0 + ty * kRowsPerThread + r;
    if (row >= m) break;
    float* out = y + static_cast<int64_t>(row) * n + col;
    *out = accumulate ? *out + acc[r] : acc[r];
  }
}

// The nearest-even bf16 of each x (NaN stays a quiet NaN): Bf16FromFloat's rule (gemm_bf16.cc).
__global__ void RoundToBf16(const float* __restrict__ x, int64_t count,
                            uint16_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float f = x[i];
    unsigned u = __float_as_uint(f);
    if (isnan(f)) {
      out[i] = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      u += 0x7FFFu + ((u >> 16) & 1u);
      out[i] = static_cast<uint16_t>(u >> 16);
    }
  }
}

// w[j][kk] = float(q[j][kk]) * s[j][kk / 32] for q [n, nb * 32] (zero past k), s [n, nb].
__global__ void DequantizeBlocks(const int8_t* __restrict__ q, const float* __restrict__ s,
                                 int64_t n, int64_t k, int64_t nb, float* __restrict__ w) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * k;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = i / k, kk = i % k;
    w[i] = static_cast<float>(q[j * nb * kBlock + kk]) * s[j * nb + kk / kBlock];
  }
}

unsigned GridFor(int64_t count) {
  return static_cast<unsigned>(std::clamp<int64_t>((count + 255) / 256, 1, 4096));
}

// The bf16 activations of kBf16's cuBLAS path: one device buffer for every kCuda GEMM, grown as
// needed and never freed. Reusing it call after call is safe because every kCuda op runs in
// order on cuda::Stream() and one thread enqueues at a time (growing frees the old buffer, and
// cudaFree waits for the device first). nullptr (the failure recorded) when allocation fails.
uint16_t* ActivationWorkspace(int64_t elems) {
  static std::mutex* mu = new std::mutex();
  static Buffer<Device::kCuda>* buf = new Buffer<Device::kCuda>();  // never destroyed
  std::lock_guard<std::mutex> lock(*mu);
  if (!buf->Reserve(sizeof(uint16_t) * static_cast<size_t>(elems)).ok()) {
    cuda::RecordCudaError(cudaErrorMemoryAllocation, "bf16 activation workspace", __FILE__,
                          __LINE__);
    return nullptr;
  }
  return buf->as<uint16_t>();
}

GemmWeight<Device::kCuda> Shell(int64_t n, int64_t k, const GemmWeightOptions& options) {
  GemmWeight<Device::kCuda> gw;
  gw.dtype = options.dtype;
  gw.n = n;
  gw.k = k;
  gw.batch_invariant = options.batch_invariant;
  return gw;
}

absl::Status Upload(Buffer<Device::kCuda>* dst, const void* src, size_t bytes) {
  if (absl::Status st = dst->Reserve(bytes); !st.ok()) return st;
  return CopyToDevice<Device::kCuda>(dst->data(), src, bytes);
}

// `st` after waiting for the copies already enqueued, whose host sources are temporaries.
absl::Status DrainThen(absl::Status st) {
  Synchronize<Device::kCuda>().IgnoreError();
  return st;
}

// kInt8 / kInt4 from quants q [n, nb * 32] (zero past k) and scales s [n, nb]: dequantised to an
// fp32 device weight. q and s are host temporaries of the caller: this waits for the copies.
absl::StatusOr<GemmWeight<Device::kCuda>> Dequantized(const int8_t* q, const float* s, int64_t n,
                                                      int64_t k, const GemmWeightOptions& options) {
  GemmWeight<Device::kCuda> gw = Shell(n, k, options);
  const int64_t nb = (k + kBlock - 1) / kBlock;
  Buffer<Device::kCuda> dq, ds;
  if (absl::Status st = Upload(&dq, q, static_cast<size_t>(n * nb * kBlock)); !st.ok()) {
    return DrainThen(st);
  }
  if (absl::Status st = Upload(&ds, s, sizeof(float) * static_cast<size_t>(n * nb)); !st.ok()) {
    return DrainThen(st);
  }
  if (absl::Status st = gw.data.Reserve(sizeof(float) * static_cast<size_t>(n * k)); !st.ok()) {
    return DrainThen(st);
  }
  DequantizeBlocks<<<GridFor(n * k), 256, 0, cuda::Stream()>>>(dq.as<int8_t>(), ds.as<float>(), n,
                                                               k, nb, gw.data.as<float>());
  cuda::CheckLaunch("DequantizeBlocks", __FILE__, __LINE__);
  // q and s (host and device) are temporaries: the copies and the kernel must finish first.
  if (absl::Status st = Synchronize<Device::kCuda>(); !st.ok()) return st;
  return gw;
}

// kInt8 / kInt4: the CPU's quantisation on the host, dequantised to fp32 on the device.
absl::StatusOr<GemmWeight<Device::kCuda>> PrepareQuantized(const float* w, int64_t n, int64_t k,
                                                           const GemmWeightOptions& options) {
  const int64_t nb = (k + kBlock - 1) / kBlock;
  std::vector<int8_t> q(static_cast<size_t>(n * nb * kBlock));
  std::vector<float> s(static_cast<size_t>(n * nb));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* block = w + j * k + b * kBlock;
      const int64_t len = std::min(kBlock, k - b * kBlock);
      int8_t* qb = q.data() + (j * nb + b) * kBlock;
      s[j * nb + b] = options.dtype == WeightDtype::kInt4 ? QuantizeBlockInt4(block, len, qb)
                                                          : QuantizeBlockInt8(block, len, qb);
    }
  }
  return Dequantized(q.data(), s.data(), n, k, options);
}

}  // namespace

template <>
absl::StatusOr<GemmWeight<Device::kCuda>> PrepareGemmWeight<Device::kCuda>(
    const float* w, int64_t n, int64_t k, const GemmWeightOptions& options) {
  const size_t count = static_cast<size_t>(n * k);
  switch (options.dtype) {
    case WeightDtype::kBf16Dot:
      return absl::InvalidArgumentError(
          "weight_dtype bf16dot is a CPU type (vdpbf16ps's chain); on cuda use bf16, whose cuBLAS "
          "path rounds the activations to bf16 too");
    case WeightDtype::kInt8:
    case WeightDtype::kInt4:
      return PrepareQuantized(w, n, k, options);
    case WeightDtype::kBf16: {
      GemmWeight<Device::kCuda> gw = Shell(n, k, options);
      std::vector<uint16_t> bits(count);
      for (size_t i = 0; i < count; ++i) bits[i] = Bf16FromFloat(w[i]);
      if (absl::Status st = Upload(&gw.data, bits.data(), sizeof(uint16_t) * count); !st.ok()) {
        return DrainThen(st);
      }
      if (absl::Status st = Synchronize<Device::kCuda>(); !st.ok()) return st;  // `bits` dies
      return gw;
    }
    case WeightDtype::kF32:
      break;
  }
  GemmWeight<Device::kCuda> gw = Shell(n, k, options);
  if (absl::Status st = Upload(&gw.data, w, sizeof(float) * count); !st.ok()) return st;
  return gw;
}

template <>
absl::StatusOr<GemmWeight<Device::kCuda>> PrepareGemmWeightBf16<Device::kCuda>(
    const uint16_t* wb, int64_t n, int64_t k, const GemmWeightOptions& options) {
  const size_t count = static_cast<size_t>(n * k);
  if (options.dtype == WeightDtype::kBf16) {
    GemmWeight<Device::kCuda> gw = Shell(n, k, options);
    if (absl::Status st = Upload(&gw.data, wb, sizeof(uint16_t) * count); !st.ok()) return st;
    return gw;
  }
  std::vector<float> wide(count);
  for (size_t i = 0; i < count; ++i) wide[i] = FloatFromBf16(wb[i]);
  absl::StatusOr<GemmWeight<Device::kCuda>> gw =
      PrepareGemmWeight<Device::kCuda>(wide.data(), n, k, options);
  if (!gw.ok()) return DrainThen(gw.status());
  if (absl::Status st = Synchronize<Device::kCuda>(); !st.ok()) return st;  // `wide` dies
  return gw;
}

template <>
absl::StatusOr<GemmWeight<Device::kCuda>> PrepareGemmWeightQuantized<Device::kCuda>(
    const QuantizedWeightView& w, const GemmWeightOptions& options) {
  if (absl::Status st = CheckQuantizedTarget(w, options.dtype); !st.ok()) return st;
  if (options.dtype == w.dtype) {
    // The stored quants and scales, dequantised exactly as PrepareQuantized's own.
    std::vector<int8_t> q(static_cast<size_t>(w.n * QuantizedBlocks(w.k) * kBlock));
    UnpackQuants(w, q.data());
    return Dequantized(q.data(), w.scales, w.n, w.k, options);
  }
  std::vector<float> wide(static_cast<size_t>(w.n * w.k));
  DequantizeWeight(w, wide.data());
  absl::StatusOr<GemmWeight<Device::kCuda>> gw =
      PrepareGemmWeight<Device::kCuda>(wide.data(), w.n, w.k, options);
  if (!gw.ok()) return DrainThen(gw.status());
  if (absl::Status st = Synchronize<Device::kCuda>(); !st.ok()) return st;  // `wide` dies
  return gw;
}

template <>
void Gemm<Device::kCuda>(const float* x, int64_t m, const GemmWeight<Device::kCuda>& wt, float* y,
                         bool accumulate, const Parallel& /*par*/) {
  const int64_t n = wt.n, k = wt.k;
  if (m <= 0 || n <= 0) return;
  const bool bf16 = wt.dtype == WeightDtype::kBf16;
  if (wt.batch_invariant) {
    const dim3 grid(static_cast<unsigned>((n + kTileCols - 1) / kTileCols),
                    static_cast<unsigned>((m + kTileRows - 1) / kTileRows));
    const dim3 block(kTileCols, kRowGroups);
    if (bf16) {
      GemmFixedOrder<uint16_t><<<grid, block, 0, cuda::Stream()>>>(
          x, static_cast<int>(m), wt.data.as<uint16_t>(), static_cast<int>(n), static_cast<int>(k),
          y, accumulate);
    } else {
      GemmFixedOrder<float><<<grid, block, 0, cuda::Stream()>>>(
          x, static_cast<int>(m), wt.data.as<float>(), static_cast<int>(n), static_cast<int>(k), y,
          accumulate);
    }
    cuda::CheckLaunch("GemmFixedOrder", __FILE__, __LINE__);
    return;
  }
  cublasHandle_t handle = cuda::Blas();
  if (handle == nullptr) return;  // recorded by Blas()
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  const void* a = wt.data.data();
  const void* b = x;
  cudaDataType_t type = CUDA_R_32F;
  if (bf16) {
    uint16_t* xb = ActivationWorkspace(m * k);
    if (xb == nullptr) return;
    RoundToBf16<<<GridFor(m * k), 256, 0, cuda::Stream()>>>(x, m * k, xb);
    cuda::CheckLaunch("RoundToBf16", __FILE__, __LINE__);
    b = xb;
    type = CUDA_R_16BF;
  }
  // Column-major view: y^T [n x m] = w [n x k] (stored as k x n, so OP_T) * x^T [k x m].
  cuda::RecordCublasError(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), &alpha, a, type, static_cast<int>(k), b, type,
                   static_cast<int>(k), &beta, y, CUDA_R_32F, static_cast<int>(n),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx", __FILE__, __LINE__);
}

}  // namespace flatstate
