// CUDA bodies of kernels/paged_attention.h: RoPE + K/V write, and softmax attention of every
// query row over a paged KV cache addressed through PagedKv (its RowOffset is the one formula).
//
// One block (kWarps warps) per (query row, head). Each warp walks tokens t = warp, warp + kWarps,
// ...: the q.k dot product is a warp reduction, and the warp keeps an online-softmax state
// (running max, sum and accumulator row in shared memory); the warps' states are merged at the
// end. Equal to the CPU's max-then-sum softmax up to fp32 rounding.
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr size_t kSmemLimit = 48 * 1024;  // default dynamic shared memory per block (no opt-in)

// One block per row; pairs (head, i) over the threads. Angles in double like the CPU.
__global__ void RopeKernel(float* x, int64_t stride, const PagedRow* rows, int heads, int head_dim,
                           const double* inv_freq, int rotary_dim) {
  const PagedRow r = rows[blockIdx.x];
  const int64_t pos = r.ctx - 1;
  float* row = x + r.row * stride;
  const int half = rotary_dim / 2;
  for (int p = threadIdx.x; p < heads * half; p += blockDim.x) {
    const int h = p / half, i = p % half;
    const double inv = inv_freq[i];
    const float c = static_cast<float>(cos(static_cast<double>(pos) * inv));
    const float s = static_cast<float>(sin(static_cast<double>(pos) * inv));
    float* v = row + static_cast<int64_t>(h) * head_dim;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

// Shared memory: q [hd], acc [kWarps][hd], wm [kWarps], wl [kWarps].
// `kv_head`: the K/V head query head's q reads.
__device__ void AttendBlock(const PagedKv& p, const int32_t* table, int layer, int kv_head, int hd,
                            const float* q, int64_t ctx, float* out) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* acc = qs + hd;
  float* wm = acc + kWarps * hd;
  float* wl = wm + kWarps;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (ctx <= 0) {  // as the CPU body: nothing to attend to gives zeros
    for (int d = tid; d < hd; d += kThreads) out[d] = 0.f;
    return;
  }
  const float scale = 1.f / sqrtf(static_cast<float>(hd));
  const int64_t off = static_cast<int64_t>(kv_head) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = q[d];
  float* my = acc + warp * hd;
  for (int d = lane; d < hd; d += 32) my[d] = 0.f;
  __syncthreads();
  float m = -INFINITY, l = 0.f;
  for (int64_t t = warp; t < ctx; t += kWarps) {
    const float* k = p.Key(table, layer, t) + off;
    float part = 0.f;
    for (int d = lane; d < hd; d += 32) part += qs[d] * k[d];
    for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    const float s = part * scale;
    const float m_new = fmaxf(m, s);
    const float c = expf(m - m_new);  // m == -inf on the first token: 0
    const float pr = expf(s - m_new);
    l = l * c + pr;
    const float* v = p.Value(table, layer, t) + off;
    for (int d = lane; d < hd; d += 32) my[d] = my[d] * c + pr * v[d];
    m = m_new;
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w]);
  float L = 0.f;
  for (int w = 0; w < kWarps; ++w) L += wm[w] == -INFINITY ? 0.f : wl[w] * expf(wm[w] - M);
  for (int d = tid; d < hd; d += kThreads) {
    float o = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      if (wm[w] != -INFINITY) o += acc[w * hd + d] * expf(wm[w] - M);
    }
    out[d] = o / L;
  }
}

// Grid (rows, heads).
__global__ void __launch_bounds__(kThreads)
    RowsKernel(PagedKv p, const int32_t* tables, const PagedRow* rows, const float* qkv,
               int64_t stride, float* out, int64_t out_stride, int layer, int hd, int group) {
  const PagedRow r = rows[blockIdx.x];
  const int h = blockIdx.y;
  AttendBlock(p, tables + r.table, layer, h / group, hd,
              qkv + r.row * stride + static_cast<int64_t>(h) * hd, r.ctx,
              out + r.row * out_stride + static_cast<int64_t>(h) * hd);
}

// One block per row: K (qkv + q_width) and V (after K) into the row's slot (p.hidden elements
// each).
__global__ void WriteKvKernel(PagedKv p, const int32_t* tables, const PagedRow* rows,
                              const float* qkv, int64_t stride, int layer, int q_width) {
  const PagedRow r = rows[blockIdx.x];
  const int64_t pos = r.ctx - 1;
  float* kd = p.Key(tables + r.table, layer, pos);
  float* vd = p.Value(tables + r.table, layer, pos);
  const float* src = qkv + r.row * stride + q_width;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    kd[i] = src[i];
    vd[i] = src[static_cast<int64_t>(p.hidden) + i];
  }
}

size_t SmemBytes(int hd) {
  return sizeof(float) * (static_cast<size_t>(kWarps + 1) * hd + 2 * kWarps);
}

}  // namespace
}  // namespace cuda

template <>
absl::Status CheckPagedAttentionShape<Device::kCuda>(int head_dim, KvDtype dtype) {
  if (dtype != KvDtype::kF32) {
    return absl::UnimplementedError(absl::StrCat("device cuda: --kv_dtype ", KvDtypeName(dtype),
                                                 " has no CUDA body yet (use f32)"));
  }
  if (head_dim < 1 || cuda::SmemBytes(head_dim) > cuda::kSmemLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("device cuda: head_dim ", head_dim, " exceeds the paged-attention kernel"));
  }
  return absl::OkStatus();
}

template <>
void RopeAndWriteKv<Device::kCuda>(const PagedKv& kv, const int32_t* tables, const PagedRow* rows,
                                   int64_t n, float* qkv, int64_t stride, int layer,
                                   const AttentionShape& shape, const RopeTable& rope,
                                   const Parallel& /*par*/) {
  if (n <= 0) return;
  cudaStream_t s = cuda::Stream();
  const unsigned grid = static_cast<unsigned>(n);
  cuda::RopeKernel<<<grid, 128, 0, s>>>(qkv, stride, rows, shape.heads, shape.head_dim,
                                        rope.inv_freq, rope.rotary_dim);  // q
  FS_CUDA_CHECK_LAUNCH("RopeKernel");
  cuda::RopeKernel<<<grid, 128, 0, s>>>(qkv + shape.q_width(), stride, rows, shape.kv_heads,
                                        shape.head_dim, rope.inv_freq, rope.rotary_dim);  // k
  FS_CUDA_CHECK_LAUNCH("RopeKernel");
  cuda::WriteKvKernel<<<grid, 128, 0, s>>>(kv, tables, rows, qkv, stride, layer, shape.q_width());
  FS_CUDA_CHECK_LAUNCH("WriteKvKernel");
}

template <>
void PagedAttention<Device::kCuda>(const PagedKv& kv, const int32_t* tables, const PagedRow* rows,
                                   int64_t n, const float* qkv, int64_t stride, float* out,
                                   int64_t out_stride, int layer, const AttentionShape& shape,
                                   const Parallel& /*par*/) {
  if (n <= 0 || shape.heads <= 0) return;
  cuda::RowsKernel<<<dim3(static_cast<unsigned>(n), shape.heads), cuda::kThreads,
                     cuda::SmemBytes(shape.head_dim), cuda::Stream()>>>(
      kv, tables, rows, qkv, stride, out, out_stride, layer, shape.head_dim, shape.group());
  FS_CUDA_CHECK_LAUNCH("PagedAttention RowsKernel");
}

}  // namespace flatstate
