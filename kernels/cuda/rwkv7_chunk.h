// The chunked form of RWKV-7's generalized delta rule on CUDA (kernels/rwkv7.h) for the prefill
// sequences of a batch, the math of kernels/cpu/rwkv7_chunk.cc (the WY / UT form, pieces cut
// where a channel's cumulative log decay would pass -48, one-token pieces in the recurrent form).
// Only compiled with FLATSTATE_HAVE_CUDA.
#ifndef FLATSTATE_KERNELS_CUDA_RWKV7_CHUNK_H_
#define FLATSTATE_KERNELS_CUDA_RWKV7_CHUNK_H_

#include "kernels/rwkv7.h"

namespace flatstate::cuda {

// Queues the chunked kernel on Stream() for b's prefill sequences (b.prefill[0 ..
// b.num_prefill)) and returns true; returns false, queueing nothing, when no chunk's tile fits in
// shared memory (kernels/cuda/shared_tile.h) or FLATSTATE_CUDA_RWKV7_PREFILL=recurrent (read
// once): the caller then runs them in the recurrent form. Launch failures are recorded in the
// CUDA context. Not thread-safe (one enqueueing thread, kernels/cuda/context.h).
bool LaunchRwkv7Chunk(const Rwkv7Batch& b);

}  // namespace flatstate::cuda

#endif  // FLATSTATE_KERNELS_CUDA_RWKV7_CHUNK_H_
