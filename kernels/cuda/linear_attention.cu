// CUDA body of kernels/linear_attention.h: the fused recurrent decode kernel (the T == 1
// sequences) and the chunked prefill (a features kernel, then a chunk kernel) for the others.
//
// The math is kernels/cpu/linear_attention.cc's, term for term (FAVOR+'s running-max stabiliser,
// cosFormer's cos/sin features at the absolute position, cosine's t^-sigmoid(m) value scaling and
// no denominator). Block shape is fixed (kLinearThreads); reductions are fixed-order trees, so
// results are deterministic, and the feature map and recurrent step are __noinline__ device
// functions shared by the decode and prefill kernels, so a token gives the same floats in both.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/context.h"
#include "kernels/linear_attention.h"

namespace flatstate {
namespace cuda {
namespace {

// Threads per block of every kernel here. The recurrent step, the feature maps and the prefill
// share this block shape and the same (non-inlined) device functions, so a token gives
// bit-identical floats whether it ran in the decode kernel or as a 1-token prefill chunk.
constexpr int kT = 128;
constexpr size_t kSmemLimit = kDefaultSmemLimit;
__device__ __forceinline__ float BlockSum(float v, float* red) { return BlockSumOf<kT>(v, red); }
__device__ __forceinline__ float BlockMax(float v, float* red) { return BlockMaxOf<kT>(v, red); }

// exp(a - b) with a == -inf giving 0 (b finite where used), as the CPU's DecayExp.
__device__ __forceinline__ float DecayExp(float a, float b) {
  return a == -INFINITY ? 0.f : expf(a - b);
}

// Feature maps of one token: fq, fk (F floats), vv (hd floats); returns m (the key's
// log-stabiliser; 0 except FAVOR+). `work` is 2*hd floats and `red` kT floats of shared memory.
// Outputs may be shared or global memory; they are visible to the whole block on return.
__device__ __noinline__ float FeaturesBlock(const LinearHead* hp, const float* q, const float* k,
                                            const float* v, int64_t pos, float* fq, float* fk,
                                            float* vv, float* work, float* red) {
  const LinearHead& h = *hp;
  const int hd = h.head_dim, F = h.feature_dim, tid = threadIdx.x;
  float m = 0.f;
  for (int i = tid; i < hd; i += kT) vv[i] = v[i];
  switch (h.map) {
    case FeatureMap::kEluPlusOne:
      EluPlusOneFeatures(q, k, hd, tid, kT, fq, fk);
      break;
    case FeatureMap::kCosformer: {
      const double ang = static_cast<double>(pos) * h.cosformer_step;
      const float c = static_cast<float>(cos(ang)), s = static_cast<float>(sin(ang));
      CosformerFeatures(q, k, hd, c, s, tid, kT, fq, fk);
      break;
    }
    case FeatureMap::kCosine: {
      float pq = 0.f, pk = 0.f;
      for (int i = tid; i < hd; i += kT) {
        pq += q[i] * q[i];
        pk += k[i] * k[i];
      }
      const float nq = fmaxf(sqrtf(BlockSum(pq, red)), 1e-6f);
      const float nk = fmaxf(sqrtf(BlockSum(pk, red)), 1e-6f);
      const float scale =
          static_cast<float>(pow(static_cast<double>(pos + 1), -h.cosine_exponent));
      for (int i = tid; i < hd; i += kT) {
        fq[i] = q[i] / nq;
        fk[i] = k[i] / nk;
        vv[i] *= scale;
      }
      break;
    }
    case FeatureMap::kFavor: {
      const float s = static_cast<float>(pow(static_cast<double>(hd), -0.25));
      float* qs = work;
      float* ks = work + hd;
      float pq = 0.f, pk = 0.f;
      for (int i = tid; i < hd; i += kT) {
        qs[i] = q[i] * s;
        ks[i] = k[i] * s;
        pq += qs[i] * qs[i];
        pk += ks[i] * ks[i];
      }
      const float q2 = BlockSum(pq, red);  // its barriers also publish qs / ks
      const float k2 = BlockSum(pk, red);
      float mq = -INFINITY, mk = -INFINITY;
      for (int f = tid; f < F; f += kT) {
        const float* w = h.feature_proj + static_cast<int64_t>(f) * hd;
        float dq = 0.f, dk = 0.f;
        for (int i = 0; i < hd; ++i) {
          dq += w[i] * qs[i];
          dk += w[i] * ks[i];
        }
        fq[f] = dq - 0.5f * q2;
        fk[f] = dk - 0.5f * k2;
        mq = fmaxf(mq, fq[f]);
        mk = fmaxf(mk, fk[f]);
      }
      mq = BlockMax(mq, red);
      mk = BlockMax(mk, red);
      for (int f = tid; f < F; f += kT) {  // same thread wrote fq[f] / fk[f] above
        fq[f] = expf(fq[f] - mq);
        fk[f] = expf(fk[f] - mk);
      }
      m = mk;
      break;
    }
  }
  __syncthreads();
  return m;
}

// The recurrent step (decode, and every 1-token prefill chunk): S, z, M updated in place (global
// memory), out (hd floats) written. One pass over S, read once and written once. Threads split
// the columns d and, where hd < kT, the feature rows too: thread tid owns column tid % hd of row
// group tid / hd (kT / hd groups, rows f = group, group + groups, ...; where hd >= kT one group
// and columns tid, tid + kT, ...). For each of its rows a thread rescales S[f][d], adds k_f v_d
// and accumulates the readout fq_f S[f][d]; it loads kRowsInFlight rows before storing any, so
// that many loads are in flight instead of one read-modify-write per memory latency. Partial
// readouts are summed in group order (fixed, so deterministic) through `red`.
constexpr int kRowsInFlight = 8;

__device__ __noinline__ void RecurrentStepBlock(const LinearHead* hp, const float* fq,
                                                const float* fk, float m, const float* vv,
                                                float* S, float* z, float* M, float* out,
                                                float* red) {
  const LinearHead& h = *hp;
  const int F = h.feature_dim, hd = h.head_dim, tid = threadIdx.x;
  const bool favor = h.map == FeatureMap::kFavor;
  const float M_old = *M;
  const float M_new = favor ? fmaxf(M_old, m) : M_old;
  const float scale = favor ? DecayExp(M_old, M_new) : 1.f;
  const float kw_scale = favor ? expf(m - M_new) : 1.f;
  const int cols = hd < kT ? hd : kT;  // threads per row group
  const int groups = kT / cols;
  const int g = tid / cols;
  if (g < groups) {
    for (int d = tid % cols; d < hd; d += cols) {
      const float vd = vv[d];
      float num = 0.f;
      int f = g;
      for (; f + (kRowsInFlight - 1) * groups < F; f += kRowsInFlight * groups) {
        float sv[kRowsInFlight];
#pragma unroll
        for (int u = 0; u < kRowsInFlight; ++u) {
          sv[u] = S[static_cast<int64_t>(f + u * groups) * hd + d];
        }
#pragma unroll
        for (int u = 0; u < kRowsInFlight; ++u) {
          const int fu = f + u * groups;
          const float kw = fk[fu] * kw_scale;
          const float s_new = favor ? sv[u] * scale + kw * vd : sv[u] + kw * vd;
          S[static_cast<int64_t>(fu) * hd + d] = s_new;
          num += fq[fu] * s_new;
        }
      }
      for (; f < F; f += groups) {
        float* sp = S + static_cast<int64_t>(f) * hd + d;
        const float kw = fk[f] * kw_scale;
        const float s_new = favor ? *sp * scale + kw * vd : *sp + kw * vd;
        *sp = s_new;
        num += fq[f] * s_new;
      }
      if (groups > 1) {
        red[g * hd + d] = num;
      } else {
        out[d] = num;
      }
    }
  }
  if (groups > 1) {
    __syncthreads();
    for (int d = tid; d < hd; d += kT) {  // the same thread divides out[d] below
      float num = 0.f;
      for (int j = 0; j < groups; ++j) num += red[j * hd + d];
      out[d] = num;
    }
    __syncthreads();  // `red` is reused by BlockSum below
  }
  float part = 0.f;
  for (int f = tid; f < F; f += kT) {
    const float kw = fk[f] * kw_scale;
    const float zf = favor ? z[f] * scale + kw : z[f] + kw;
    z[f] = zf;
    part += fq[f] * zf;
  }
  const float den = BlockSum(part, red) + h.eps;  // barrier: every thread has read *M
  if (tid == 0) *M = M_new;
  if (h.use_den) {
    for (int d = tid; d < hd; d += kT) out[d] = out[d] / den;  // same thread wrote out[d]
  }
  __syncthreads();
}

struct HeadState {
  float* S;
  float* z;
  float* M;
};

__device__ HeadState StateOf(const LinearBatch& b, const LinearSeq& sq, int h, int F, int hd) {
  float* base = sq.state + b.layer_offset;
  return HeadState{base + b.s_off + static_cast<int64_t>(h) * F * hd,
                   base + b.z_off + static_cast<int64_t>(h) * F, base + b.m_off + h};
}

__global__ void __launch_bounds__(kT) DecodeKernel(LinearBatch b) {
  const int s = blockIdx.x, h = blockIdx.y;
  const LinearHead* hp = b.heads + h;
  const int hd = hp->head_dim, F = hp->feature_dim;
  extern __shared__ float smem[];
  float* fq = smem;
  float* fk = fq + F;
  float* vv = fk + F;
  float* work = vv + hd;
  float* red = work + 2 * hd;
  const LinearSeq sq = b.decode[s];
  const int64_t r = sq.row;
  const int64_t off = r * b.in_stride + static_cast<int64_t>(h) * hd;
  const float m = FeaturesBlock(hp, b.q + off, b.k + off, b.v + off, sq.pos0, fq, fk, vv, work,
                                red);
  const HeadState st = StateOf(b, sq, h, F, hd);
  RecurrentStepBlock(hp, fq, fk, m, vv, st.S, st.z, st.M,
                     b.out + r * b.out_stride + static_cast<int64_t>(h) * hd, red);
}

struct Scratch {
  float *fq, *fk, *m, *Mi, *vv, *A;
  int64_t L;
};

__device__ Scratch ScratchOf(float* workspace, const LinearSeq& sq, int h, int F, int hd,
                             int chunk) {
  Scratch sc;
  float* base = workspace + sq.scratch + static_cast<int64_t>(h) * sq.head_scratch;
  sc.L = sq.T < chunk ? sq.T : chunk;
  sc.fq = base;
  sc.fk = sc.fq + sq.T * F;
  sc.m = sc.fk + sq.T * F;
  sc.Mi = sc.m + sq.T;
  sc.vv = sc.Mi + sq.T;
  sc.A = sc.vv + sq.T * hd;
  return sc;
}

// Grid (rows, H): features of one prefill token for one head, into the sequence's scratch.
__global__ void __launch_bounds__(kT) FeaturesKernel(LinearBatch b, const int32_t* row_seq,
                                                     const int64_t* row_t, float* workspace) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int s = row_seq[i];
  const int64_t t = row_t[i];
  const LinearHead* hp = b.heads + h;
  const int hd = hp->head_dim, F = hp->feature_dim;
  extern __shared__ float smem[];
  float* work = smem;
  float* red = work + 2 * hd;
  const LinearSeq sq = b.prefill[s];
  const Scratch sc = ScratchOf(workspace, sq, h, F, hd, b.chunk);
  const int64_t off = (sq.row + t) * b.in_stride + static_cast<int64_t>(h) * hd;
  const float m = FeaturesBlock(hp, b.q + off, b.k + off, b.v + off, sq.pos0 + t, sc.fq + t * F,
                                sc.fk + t * F, sc.vv + t * hd, work, red);
  if (threadIdx.x == 0) sc.m[t] = m;
}

__device__ float Dot(const float* a, const float* b, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Grid (B, H): the chunk loop of one (sequence, head), chunks in order (each depends on the
// state the previous one left). Shared memory: red [kT], den [chunk].
__global__ void __launch_bounds__(kT) ChunkKernel(LinearBatch b, float* workspace) {
  const int s = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const LinearHead* hp = b.heads + h;
  const LinearHead& head = *hp;
  const int hd = head.head_dim, F = head.feature_dim;
  const bool favor = head.map == FeatureMap::kFavor;
  extern __shared__ float smem[];
  float* red = smem;
  float* den = red + kT;
  const LinearSeq sq = b.prefill[s];
  const int64_t T = sq.T, chunk = b.chunk;
  const Scratch sc = ScratchOf(workspace, sq, h, F, hd, b.chunk);
  const HeadState st = StateOf(b, sq, h, F, hd);
  float* out0 = b.out + sq.row * b.out_stride + static_cast<int64_t>(h) * hd;
  for (int64_t cs = 0, ce = 0; cs < T; cs = ce) {
    ce = min(T, cs + (chunk - (sq.pos0 + cs) % chunk));
    const int64_t n = ce - cs;
    if (n == 1) {
      RecurrentStepBlock(hp, sc.fq + cs * F, sc.fk + cs * F, sc.m[cs], sc.vv + cs * hd, st.S,
                         st.z, st.M, out0 + cs * b.out_stride, red);
      continue;
    }
    const float M_prev = *st.M;
    if (tid == 0) {
      float run = M_prev;
      for (int64_t i = cs; i < ce; ++i) {
        if (favor) run = fmaxf(run, sc.m[i]);
        sc.Mi[i] = run;
      }
    }
    __syncthreads();
    // Intra-chunk scores A[i][j] = (fq_i . fk_j) * exp(m_j - M_i), j <= i.
    for (int64_t idx = tid; idx < n * n; idx += kT) {
      const int64_t i = idx / n, j = idx % n;
      if (j > i) continue;
      float a = Dot(sc.fq + (cs + i) * F, sc.fk + (cs + j) * F, F);
      if (favor) a *= expf(sc.m[cs + j] - sc.Mi[cs + i]);
      sc.A[i * sc.L + j] = a;
    }
    __syncthreads();
    // Numerators (inter-chunk part from S, intra-chunk part from A) and denominators.
    for (int64_t idx = tid; idx < n * hd; idx += kT) {
      const int64_t i = idx / hd;
      const int d = static_cast<int>(idx % hd);
      const float* fqi = sc.fq + (cs + i) * F;
      const float inter = favor ? DecayExp(M_prev, sc.Mi[cs + i]) : 1.f;
      float num = 0.f;
      for (int f = 0; f < F; ++f) num += fqi[f] * st.S[static_cast<int64_t>(f) * hd + d];
      num *= inter;
      for (int64_t j = 0; j <= i; ++j) num += sc.A[i * sc.L + j] * sc.vv[(cs + j) * hd + d];
      out0[(cs + i) * b.out_stride + d] = num;
    }
    for (int64_t i = tid; i < n; i += kT) {
      const float inter = favor ? DecayExp(M_prev, sc.Mi[cs + i]) : 1.f;
      float dn = Dot(sc.fq + (cs + i) * F, st.z, F) * inter;
      for (int64_t j = 0; j <= i; ++j) dn += sc.A[i * sc.L + j];
      den[i] = dn + head.eps;
    }
    __syncthreads();  // all reads of S / z for this chunk's outputs are done; den visible
    if (head.use_den) {
      for (int64_t idx = tid; idx < n * hd; idx += kT) {
        const int64_t i = idx / hd;
        float* o = out0 + (cs + i) * b.out_stride + idx % hd;
        *o = *o / den[i];
      }
    }
    // State update to the end of the chunk.
    const float M_last = sc.Mi[ce - 1];
    const float scale = favor ? DecayExp(M_prev, M_last) : 1.f;
    for (int64_t x = tid; x < static_cast<int64_t>(F) * hd; x += kT) {
      const int64_t f = x / hd, d = x % hd;
      float acc = favor ? st.S[x] * scale : st.S[x];
      for (int64_t j = cs; j < ce; ++j) {
        const float w = favor ? expf(sc.m[j] - M_last) : 1.f;
        acc += sc.fk[j * F + f] * w * sc.vv[j * hd + d];
      }
      st.S[x] = acc;
    }
    for (int f = tid; f < F; f += kT) {
      float zf = favor ? st.z[f] * scale : st.z[f];
      for (int64_t j = cs; j < ce; ++j) {
        const float w = favor ? expf(sc.m[j] - M_last) : 1.f;
        zf += sc.fk[j * F + f] * w;
      }
      st.z[f] = zf;
    }
    __syncthreads();
    if (tid == 0) *st.M = M_last;
    __syncthreads();
  }
}

size_t DecodeSmemBytes(int head_dim, int feature_dim) {
  return sizeof(float) * (2 * static_cast<size_t>(feature_dim) + 3 * head_dim + kT);
}
size_t FeaturesSmemBytes(int head_dim) {
  return sizeof(float) * (2 * static_cast<size_t>(head_dim) + kT);
}
size_t ChunkSmemBytes(int chunk) { return sizeof(float) * (static_cast<size_t>(chunk) + kT); }

}  // namespace
}  // namespace cuda

template <>
absl::Status CheckLinearAttentionShape<Device::kCuda>(int head_dim, int feature_dim, int chunk) {
  if (head_dim < 1 || head_dim > kMaxHeadDim || feature_dim < 1 || chunk < 1 ||
      cuda::DecodeSmemBytes(head_dim, feature_dim) > cuda::kSmemLimit ||
      cuda::FeaturesSmemBytes(head_dim) > cuda::kSmemLimit ||
      cuda::ChunkSmemBytes(chunk) > cuda::kSmemLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device cuda: head_dim ", head_dim, " / feature_dim ", feature_dim, " / chunk_size ",
        chunk, " exceed the linear-attention kernels' shared memory"));
  }
  return absl::OkStatus();
}

template <>
void LinearAttention<Device::kCuda>(const LinearBatch& b, const Parallel& /*par*/) {
  if (b.H <= 0) return;
  cudaStream_t s = cuda::Stream();
  if (b.num_decode > 0) {
    cuda::DecodeKernel<<<dim3(b.num_decode, b.H), cuda::kT,
                         cuda::DecodeSmemBytes(b.head_dim, b.feature_dim), s>>>(b);
    FS_CUDA_CHECK_LAUNCH("DecodeKernel");
  }
  if (b.num_prefill > 0 && b.prefill_rows > 0) {
    cuda::FeaturesKernel<<<dim3(static_cast<unsigned>(b.prefill_rows), b.H), cuda::kT,
                           cuda::FeaturesSmemBytes(b.head_dim), s>>>(
        b, b.row_seq, b.row_t, b.workspace);
    FS_CUDA_CHECK_LAUNCH("FeaturesKernel");
    cuda::ChunkKernel<<<dim3(b.num_prefill, b.H), cuda::kT, cuda::ChunkSmemBytes(b.chunk), s>>>(
        b, b.workspace);
    FS_CUDA_CHECK_LAUNCH("ChunkKernel");
  }
}

}  // namespace flatstate
