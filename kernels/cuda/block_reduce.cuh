// Fixed-order tree reductions over one thread block, shared by the CUDA op bodies. The order of
// the additions depends only on the block size, so a result never depends on timing, the grid or
// the batch (deterministic, batch-invariant kernels). CUDA only (included by the cuda/<op>.cu bodies).
#ifndef FLATSTATE_KERNELS_CUDA_BLOCK_REDUCE_CUH_
#define FLATSTATE_KERNELS_CUDA_BLOCK_REDUCE_CUH_

#include <cstddef>

namespace flatstate::cuda {

// Dynamic shared memory a block may use without opting in (every kernel here stays within it;
// the shape checks enforce it).
inline constexpr size_t kDefaultSmemLimit = 48 * 1024;

// The block's sum (Max: maximum) of `v`; every thread gets the result. `red` holds kThreads
// floats of shared memory. Must be called by all kThreads threads of the block; its barriers
// also publish every shared / global write made before the call.
template <int kThreads>
__device__ float BlockSumOf(float v, float* red) {
  static_assert((kThreads & (kThreads - 1)) == 0, "tree reductions need a power-of-two block");
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

template <int kThreads>
__device__ float BlockMaxOf(float v, float* red) {
  static_assert((kThreads & (kThreads - 1)) == 0, "tree reductions need a power-of-two block");
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    }
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

}  // namespace flatstate::cuda

#endif  // FLATSTATE_KERNELS_CUDA_BLOCK_REDUCE_CUH_
