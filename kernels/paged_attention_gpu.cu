// CUDA body of kernels/paged_attention.h and the batched RopeAndWriteKv / PagedAttentionRows
// launchers of kernels/cuda/batched_ops.h: softmax attention of one query over a paged KV cache
// in the PagedKv layout (block b, layer l, K/V, slot: base + (((b*L + l)*2 + kv)*bs + slot)*hidden).
//
// One block (kWarps warps) per (query row, head). Each warp walks tokens t = warp, warp + kWarps,
// ...: the q.k dot product is a warp reduction, and the warp keeps an online-softmax state
// (running max, sum and accumulator row in shared memory); the warps' states are merged at the
// end. Equal to the CPU's max-then-sum softmax up to fp32 rounding.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/batched_ops.h"
#include "kernels/cuda/context.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace cuda {

void RopeRows(float* x, int64_t stride, const PagedRow* rows, int64_t n, int heads, int head_dim,
              float theta);  // elementwise_gpu.cu

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

__device__ __forceinline__ const float* PoolRow(const PagedPool& p, int32_t block, int layer,
                                                int kv, int64_t slot) {
  return p.base + (((static_cast<int64_t>(block) * p.num_layers + layer) * 2 + kv) *
                       p.block_size + slot) * static_cast<int64_t>(p.hidden);
}

// Shared memory: q [hd], acc [kWarps][hd], wm [kWarps], wl [kWarps].
__device__ void AttendBlock(const PagedPool& p, const int32_t* table, int layer, int head,
                            int hd, const float* q, int64_t ctx, float* out) {
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
  const int64_t off = static_cast<int64_t>(head) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = q[d];
  float* my = acc + warp * hd;
  for (int d = lane; d < hd; d += 32) my[d] = 0.f;
  __syncthreads();
  float m = -INFINITY, l = 0.f;
  for (int64_t t = warp; t < ctx; t += kWarps) {
    const int32_t blk = table[t / p.block_size];
    const int64_t slot = t % p.block_size;
    const float* k = PoolRow(p, blk, layer, 0, slot) + off;
    float part = 0.f;
    for (int d = lane; d < hd; d += 32) part += qs[d] * k[d];
    for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    const float s = part * scale;
    const float m_new = fmaxf(m, s);
    const float c = expf(m - m_new);  // m == -inf on the first token: 0
    const float pr = expf(s - m_new);
    l = l * c + pr;
    const float* v = PoolRow(p, blk, layer, 1, slot) + off;
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

__global__ void __launch_bounds__(kThreads)
    SingleKernel(PagedPool p, const int32_t* table, int layer, int head, int hd, const float* q,
                 int64_t ctx, float* out) {
  AttendBlock(p, table, layer, head, hd, q, ctx, out);
}

// Grid (rows, heads).
__global__ void __launch_bounds__(kThreads)
    RowsKernel(PagedPool p, const int32_t* tables, const PagedRow* rows, const float* qkv,
               int64_t stride, float* out, int64_t out_stride, int layer, int hd) {
  const PagedRow r = rows[blockIdx.x];
  const int h = blockIdx.y;
  AttendBlock(p, tables + r.table, layer, h, hd, qkv + r.row * stride + static_cast<int64_t>(h) * hd,
              r.ctx, out + r.row * out_stride + static_cast<int64_t>(h) * hd);
}

// One block per row: K (qkv + hidden) and V (qkv + 2 hidden) into the row's slot.
__global__ void WriteKvKernel(PagedPool p, const int32_t* tables, const PagedRow* rows,
                              const float* qkv, int64_t stride, int layer) {
  const PagedRow r = rows[blockIdx.x];
  const int64_t pos = r.ctx - 1;
  const int32_t blk = tables[r.table + pos / p.block_size];
  const int64_t slot = pos % p.block_size;
  float* kd = const_cast<float*>(PoolRow(p, blk, layer, 0, slot));
  float* vd = const_cast<float*>(PoolRow(p, blk, layer, 1, slot));
  const float* src = qkv + r.row * stride;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    kd[i] = src[p.hidden + i];
    vd[i] = src[2 * static_cast<int64_t>(p.hidden) + i];
  }
}

size_t SmemBytes(int hd) { return sizeof(float) * (static_cast<size_t>(kWarps + 1) * hd + 2 * kWarps); }

}  // namespace

void RopeAndWriteKv(const PagedPool& pool, const int32_t* tables, const PagedRow* rows,
                    int64_t n, float* qkv, int64_t stride, int layer, int heads, int head_dim,
                    float theta) {
  if (n <= 0) return;
  RopeRows(qkv, stride, rows, n, heads, head_dim, theta);                 // q
  RopeRows(qkv + pool.hidden, stride, rows, n, heads, head_dim, theta);   // k
  WriteKvKernel<<<static_cast<unsigned>(n), 128, 0, Stream()>>>(pool, tables, rows, qkv, stride,
                                                                 layer);
  FS_CUDA_CHECK_LAUNCH("WriteKvKernel");
}

void PagedAttentionRows(const PagedPool& pool, const int32_t* tables, const PagedRow* rows,
                        int64_t n, const float* qkv, int64_t stride, float* out,
                        int64_t out_stride, int layer, int heads, int head_dim) {
  if (n <= 0 || heads <= 0) return;
  RowsKernel<<<dim3(static_cast<unsigned>(n), heads), kThreads, SmemBytes(head_dim), Stream()>>>(
      pool, tables, rows, qkv, stride, out, out_stride, layer, head_dim);
  FS_CUDA_CHECK_LAUNCH("PagedAttention RowsKernel");
}

size_t PagedAttentionSmemBytes(int head_dim) { return SmemBytes(head_dim); }

}  // namespace cuda

// Device pointers: kv.base, table, q, out. `scratch` is unused (online softmax needs none).
template <>
void PagedAttention<Device::kCuda>(const PagedKv& kv, const int32_t* table, int layer, int head,
                                   int head_dim, const float* q, int64_t ctx, float* out,
                                   float* /*scratch*/) {
  const cuda::PagedPool p{kv.base, kv.block_size, kv.num_layers, kv.hidden};
  cuda::SingleKernel<<<1, cuda::kThreads, cuda::SmemBytes(head_dim), cuda::Stream()>>>(
      p, table, layer, head, head_dim, q, ctx, out);
  FS_CUDA_CHECK_LAUNCH("PagedAttention SingleKernel");
}

// One launch per head of the single-head kernel (device pointers; scratch unused). The engine's
// CUDA forward uses the batched PagedAttentionRows instead.
template <>
void PagedAttentionAllHeads<Device::kCuda>(const PagedKv& kv, const int32_t* table, int layer,
                                           int heads, int head_dim, const float* q, int64_t ctx,
                                           float* out, float* scratch) {
  for (int h = 0; h < heads; ++h) {
    PagedAttention<Device::kCuda>(kv, table, layer, h, head_dim,
                                  q + static_cast<int64_t>(h) * head_dim, ctx,
                                  out + static_cast<int64_t>(h) * head_dim, scratch);
  }
}

}  // namespace flatstate
