// CUDA body of kernels/gated_delta.h: one block per (sequence, value head), each thread owning
// value columns j (strided by the block), running the recurrent form token by token for decode
// and prefill sequences alike (S in the sequence's device slot; q and k normalised in shared
// memory). Prefill on the GPU is therefore the recurrent form, equal to the CPU's chunked form
// within the op's tolerance, not bit for bit. Compiled; not yet run on a GPU (issue 32).
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"
#include "kernels/gated_delta.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kThreads = 128;

// Sum of `v` over the block (every thread gets it); `red` holds kThreads floats.
__device__ float BlockSum(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float out = red[0];
  __syncthreads();
  return out;
}

__global__ void __launch_bounds__(kThreads) GatedDeltaKernel(GatedDeltaBatch b) {
  extern __shared__ float smem[];
  float* qn = smem;             // [Kd]
  float* kn = qn + b.key_dim;   // [Kd]
  float* red = kn + b.key_dim;  // [kThreads]
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
    float sq_q = 0.f, sq_k = 0.f;
    for (int i = threadIdx.x; i < Kd; i += kThreads) sq_q += q[i] * q[i], sq_k += k[i] * k[i];
    const float nq = BlockSum(sq_q, red), nk = BlockSum(sq_k, red);
    const float fq = b.l2norm_qk ? b.scale * rsqrtf(nq + 1e-6f) : b.scale;
    const float fk = b.l2norm_qk ? rsqrtf(nk + 1e-6f) : 1.f;
    for (int i = threadIdx.x; i < Kd; i += kThreads) qn[i] = q[i] * fq, kn[i] = k[i] * fk;
    __syncthreads();
    const float decay = b.g == nullptr ? 1.f : expf(b.g[r * b.gb_stride + h]);
    const float beta = b.beta[r * b.gb_stride + h];
    const float* v = b.v + r * b.v_stride + static_cast<int64_t>(h) * Vd;
    float* o = b.out + r * b.out_stride + static_cast<int64_t>(h) * Vd;
    for (int j = threadIdx.x; j < Vd; j += kThreads) {
      float kv = 0.f;
      for (int i = 0; i < Kd; ++i) {
        const float s = S[static_cast<int64_t>(i) * Vd + j] * decay;
        S[static_cast<int64_t>(i) * Vd + j] = s;
        kv += kn[i] * s;
      }
      const float u = beta * (v[j] - kv);
      float acc = 0.f;
      for (int i = 0; i < Kd; ++i) {
        const float s = S[static_cast<int64_t>(i) * Vd + j] + kn[i] * u;
        S[static_cast<int64_t>(i) * Vd + j] = s;
        acc += qn[i] * s;
      }
      o[j] = acc;
    }
    __syncthreads();  // qn / kn are rewritten for the next token
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
  const size_t smem = sizeof(float) * (2 * b.key_dim + cuda::kThreads);
  cuda::GatedDeltaKernel<<<static_cast<unsigned>(seqs * b.value_heads), cuda::kThreads, smem,
                           cuda::Stream()>>>(b);
  FS_CUDA_CHECK_LAUNCH("GatedDeltaKernel");
}

}  // namespace flatstate
