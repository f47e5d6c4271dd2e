// CUDA body of kernels/gated_attention.h: RFA-Gate, every token through the recurrent step.
//
// The math is kernels/cpu/gated_attention.cc's recurrent step, term for term: q and k divided by
// max(|x|, kGatedNormFloor), u_r = rfa_scale * (W_r . xn), phi = sqrt(1/R) [sin u, cos u], the
// gate g = sigmoid(a) and 1 - g = sigmoid(-a) (two-branch, never 1 - g), kw_f = (1 - g) phi(k)_f,
// S = g S + kw v^T, z = g z + kw, n = g n + (1 - g), o = (phi(q)^T S) / max(phi(q) . z,
// kGatedDenFloor * n). The GPU has no chunked form: a prefill runs its tokens in order through
// the same step, which agrees with the CPU's chunked prefill up to fp32 rounding.
//
// One block (kT threads) per (sequence, head), the decode sequences first, then the prefill
// ones; the tokens of a sequence in order, each ending with a barrier. Reductions are
// fixed-order trees and the thread owning an element of S, z is the same for every token, so
// results are deterministic. The block ignores `par` and LinearBatch::workspace (its scratch is
// shared memory).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/context.h"
#include "kernels/gated_attention.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kT = 128;
constexpr size_t kSmemLimit = kDefaultSmemLimit;
__device__ __forceinline__ float BlockSum(float v, float* red) { return BlockSumOf<kT>(v, red); }

// sigmoid(a) without overflow, as the CPU's Sigmoid.
__device__ __forceinline__ float Sigmoid(float a) {
  if (a >= 0.f) return 1.f / (1.f + expf(-a));
  const float e = expf(a);
  return e / (1.f + e);
}

// Grid (num_decode + num_prefill, H). Shared memory: qn, kn, vv [hd]; fq, fk [F]; red [kT].
//
// The S update and readout split the columns d over the threads and, where hd < kT, the feature
// rows too: thread tid owns column tid % cols of row group tid / cols (cols = min(hd, kT),
// groups = kT / cols; rows f = group, group + groups, ...). Each group's partial readout goes to
// red[group * hd + d] (groups * hd <= kT) and is summed in group order.
__global__ void __launch_bounds__(kT) GatedKernel(LinearBatch b) {
  const int h = blockIdx.y, tid = threadIdx.x;
  const int hd = b.head_dim, F = b.feature_dim, R = F / 2;
  const LinearHead& head = b.heads[h];
  const float* proj = head.feature_proj;  // [R][hd]
  const float rfa_scale = head.rfa_scale, gate_bias = head.gate_bias;
  extern __shared__ float smem[];
  float* qn = smem;
  float* kn = qn + hd;
  float* vv = kn + hd;
  float* fq = vv + hd;
  float* fk = fq + F;
  float* red = fk + F;
  const int s = blockIdx.x;
  const LinearSeq sq = s < b.num_decode ? b.decode[s] : b.prefill[s - b.num_decode];
  float* base = sq.state + b.layer_offset;
  float* S = base + b.s_off + static_cast<int64_t>(h) * F * hd;
  float* z = base + b.z_off + static_cast<int64_t>(h) * F;
  float* np = base + b.m_off + h;
  const float amp = sqrtf(1.f / static_cast<float>(R));
  const int cols = hd < kT ? hd : kT;
  const int groups = kT / cols;
  const int grp = tid / cols;
  float n = *np;  // every thread keeps the same copy; thread 0 stores it at the end
  for (int64_t t = 0; t < sq.T; ++t) {
    const int64_t r = sq.row + t;
    const int64_t off = r * b.in_stride + static_cast<int64_t>(h) * hd;
    const float* q = b.q + off;
    const float* k = b.k + off;
    const float* v = b.v + off;
    // Norms; BlockSum's barriers publish the loads into qn / kn / vv.
    float pq = 0.f, pk = 0.f;
    for (int i = tid; i < hd; i += kT) {
      const float qi = q[i], ki = k[i];
      qn[i] = qi;
      kn[i] = ki;
      vv[i] = v[i];
      pq += qi * qi;
      pk += ki * ki;
    }
    const float nq = fmaxf(sqrtf(BlockSum(pq, red)), kGatedNormFloor);
    const float nk = fmaxf(sqrtf(BlockSum(pk, red)), kGatedNormFloor);
    for (int i = tid; i < hd; i += kT) {  // the same thread loaded qn[i] / kn[i]
      qn[i] = qn[i] / nq;
      kn[i] = kn[i] / nk;
    }
    __syncthreads();
    // Random Fourier features: u_r = rfa_scale * (W_r . xn).
    for (int rr = tid; rr < R; rr += kT) {
      const float* w = proj + static_cast<int64_t>(rr) * hd;
      float dq = 0.f, dk = 0.f;
      for (int i = 0; i < hd; ++i) {
        dq += w[i] * qn[i];
        dk += w[i] * kn[i];
      }
      const float uq = rfa_scale * dq, uk = rfa_scale * dk;
      fq[rr] = amp * sinf(uq);
      fq[R + rr] = amp * cosf(uq);
      fk[rr] = amp * sinf(uk);
      fk[R + rr] = amp * cosf(uk);
    }
    __syncthreads();
    const float a = b.gate[r * b.in_stride + h] + gate_bias;
    const float g = Sigmoid(a);
    const float omg = Sigmoid(-a);  // 1 - g
    // z and the denominator.
    float part = 0.f;
    for (int f = tid; f < F; f += kT) {
      const float zf = g * z[f] + omg * fk[f];
      z[f] = zf;
      part += fq[f] * zf;
    }
    const float den = BlockSum(part, red);  // its last barrier frees `red` for the partials
    n = g * n + omg;
    const float dn = fmaxf(den, kGatedDenFloor * n);
    // S and the numerator.
    if (grp < groups) {
      for (int d = tid % cols; d < hd; d += cols) {
        const float vd = vv[d];
        float num = 0.f;
        for (int f = grp; f < F; f += groups) {
          float* sp = S + static_cast<int64_t>(f) * hd + d;
          const float kw = omg * fk[f];
          const float s_new = g * *sp + kw * vd;
          *sp = s_new;
          num += fq[f] * s_new;
        }
        if (groups > 1) {
          red[grp * hd + d] = num;
        } else {
          b.out[r * b.out_stride + static_cast<int64_t>(h) * hd + d] = num / dn;
        }
      }
    }
    if (groups > 1) {
      __syncthreads();
      for (int d = tid; d < hd; d += kT) {
        float num = 0.f;
        for (int j = 0; j < groups; ++j) num += red[j * hd + d];
        b.out[r * b.out_stride + static_cast<int64_t>(h) * hd + d] = num / dn;
      }
    }
    __syncthreads();  // shared memory (red, qn .. fk) is rewritten by the next token
  }
  if (tid == 0 && sq.T > 0) *np = n;
}

size_t SmemBytes(int head_dim, int feature_dim) {
  return sizeof(float) *
         (3 * static_cast<size_t>(head_dim) + 2 * static_cast<size_t>(feature_dim) + kT);
}

}  // namespace
}  // namespace cuda

template <>
absl::Status CheckGatedAttentionShape<Device::kCuda>(int head_dim, int feature_dim) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", head_dim, " is outside [1, ", kMaxHeadDim, "]"));
  }
  if (feature_dim < 2 || feature_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gated feature_dim ", feature_dim, " must be 2 * rfa_num_features"));
  }
  if (cuda::SmemBytes(head_dim, feature_dim) > cuda::kSmemLimit) {
    return absl::InvalidArgumentError(absl::StrCat("device cuda: head_dim ", head_dim,
                                                   " / feature_dim ", feature_dim, " need ",
                                                   cuda::SmemBytes(head_dim, feature_dim),
                                                   " bytes of shared memory in the gated-attention "
                                                   "kernel, over its ",
                                                   cuda::kSmemLimit, "-byte (48 KiB) limit"));
  }
  return absl::OkStatus();
}

template <>
void GatedAttention<Device::kCuda>(const LinearBatch& b, const Parallel& /*par*/) {
  const int num = b.num_decode + b.num_prefill;
  if (num <= 0 || b.H <= 0) return;
  cuda::GatedKernel<<<dim3(static_cast<unsigned>(num), static_cast<unsigned>(b.H)), cuda::kT,
                      cuda::SmemBytes(b.head_dim, b.feature_dim), cuda::Stream()>>>(b);
  FS_CUDA_CHECK_LAUNCH("GatedAttention GatedKernel");
}

}  // namespace flatstate
