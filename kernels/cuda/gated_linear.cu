// CUDA body of kernels/gated_linear.h: one block per (sequence, value head), each thread owning
// value columns j, running the recurrent form token by token for decode and prefill sequences
// alike (S in the sequence's device slot). Prefill on the GPU is therefore the recurrent form,
// equal to the CPU's chunked form within the op's tolerance, not bit for bit. Compiled; not yet
// run on a GPU (issue 32).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/context.h"
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
  cuda::GatedLinearKernel<<<static_cast<unsigned>(seqs * b.value_heads), cuda::kThreads,
                            sizeof(float) * b.key_dim, cuda::Stream()>>>(b);
  FS_CUDA_CHECK_LAUNCH("GatedLinearKernel");
}

}  // namespace flatstate
