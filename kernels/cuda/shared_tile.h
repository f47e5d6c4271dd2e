// Sizing the shared-memory tiles of the chunked CUDA kernels (gated_delta.cu, gated_linear.cu,
// rwkv7_chunk.cu): which chunk a kernel runs for the engine's chunk, raising a kernel's dynamic
// shared memory limit to its tile, and the device facts that decide them. Not thread-safe: called
// where the ops are enqueued (one thread at a time, kernels/cuda/context.h). Only compiled with
// FLATSTATE_HAVE_CUDA.
#ifndef FLATSTATE_KERNELS_CUDA_SHARED_TILE_H_
#define FLATSTATE_KERNELS_CUDA_SHARED_TILE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <string_view>

namespace flatstate::cuda {

// The current device's opt-in shared memory per block, in bytes (read once; 0 if unreadable).
inline size_t SharedOptinBytes() {
  static const size_t bytes = [] {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess) {
      return size_t{0};
    }
    return static_cast<size_t>(optin);
  }();
  return bytes;
}

// The current device's multiprocessor count (read once; 0 if unreadable).
inline int SmCount() {
  static const int n = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return 0;
    }
    return sms;
  }();
  return n;
}

// The chunk a chunked kernel runs for the engine's `chunk`: the largest of chunk, chunk / 2, ...
// (halved while even) that is at most `max_chunk`, at least 2, and whose tile of floats(C) floats
// fits in SharedOptinBytes(); 0 if none (the caller runs the recurrent form). A halved chunk keeps
// the kernel's grid a refinement of the engine's: a run split at multiples of `chunk` computes
// the same floats.
template <typename FloatsFn>
int FitChunk(int chunk, int max_chunk, FloatsFn floats) {
  int c = chunk;
  while (c >= 2 && (c > max_chunk || floats(c) * sizeof(float) > SharedOptinBytes())) {
    if (c % 2 != 0) return 0;
    c /= 2;
  }
  return c >= 2 ? c : 0;
}

// Lets `kernel` take `bytes` of dynamic shared memory; *limit remembers the largest size set so
// far (one per kernel). False if the device refuses.
template <typename Kernel>
bool AllowSharedBytes(Kernel kernel, size_t bytes, size_t* limit) {
  if (bytes <= *limit) return true;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) != cudaSuccess) {
    return false;
  }
  *limit = bytes;
  return true;
}

// Whether the environment variable `var` is "recurrent" (the chunked kernels' switch back to the
// token-by-token form, for benchmarks against it). Read at each call: callers keep it in a static.
inline bool EnvSaysRecurrent(const char* var) {
  const char* e = std::getenv(var);
  return e != nullptr && std::string_view(e) == "recurrent";
}

// The chunk `kernel` runs for a batch's prefill sequences, or 0 for the recurrent form: 0 without
// prefill sequences or when `forced` (EnvSaysRecurrent), else FitChunk(chunk, 64, floats) once
// `kernel` may take that tile (AllowSharedBytes; `limit` is the kernel's own). *bytes gets the
// tile's size (0 with the recurrent form).
template <typename Kernel, typename FloatsFn>
int PrefillChunk(Kernel kernel, int num_prefill, bool forced, int chunk, FloatsFn floats,
                 size_t* limit, size_t* bytes) {
  *bytes = 0;
  if (num_prefill == 0 || forced) return 0;
  const int c = FitChunk(chunk, 64, floats);
  if (c == 0) return 0;
  const size_t tile = floats(c) * sizeof(float);
  if (!AllowSharedBytes(kernel, tile, limit)) return 0;
  *bytes = tile;
  return c;
}

}  // namespace flatstate::cuda

#endif  // FLATSTATE_KERNELS_CUDA_SHARED_TILE_H_
