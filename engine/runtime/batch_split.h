// How a CPU step's batch is divided among the threads of the pool when each thread runs the whole
// layer loop on its own share (DeviceForward<kCpu>): a pure function of the rows.
//
// With every row on every op split across threads, a batched step hands work to the pool a few
// hundred times (each op of each layer) and both threads wait at every op for the slower one;
// at batch 32 on two threads that waiting was a fifth of the step (docs/benchmarks.md). Once every
// thread has enough rows for its GEMMs to be limited by arithmetic rather than by streaming the
// weights, giving each thread whole sequences and the whole layer loop (the head excepted:
// device_forward.h) hands work over once. Every op is row-invariant, so a sequence's bits do not
// depend on which share it is in.
#ifndef FLATSTATE_ENGINE_RUNTIME_BATCH_SPLIT_H_
#define FLATSTATE_ENGINE_RUNTIME_BATCH_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flatstate {

// Fewest rows a thread takes in a split step: below it the GEMMs stream weights faster than they
// use them, and each thread streaming all of them costs more than the hand-offs it saves
// (measured on RWKV-7 0.1B, docs/benchmarks.md).
inline constexpr int64_t kMinSplitRowsPerThread = 16;

// The batch's division into `threads` contiguous runs of whole sequences, as sequence indices
// {0, c1, ..., batch size}, or {} when the step runs whole on the pool instead: fewer than two
// threads, fewer than kMinSplitRowsPerThread rows per thread, or sequences too long to divide
// evenly (a share would exceed its even part by more than a quarter, or be empty: one long
// prefill). row_start[s] is sequence s's first row, row_start.back() the rows (as
// DeviceStep::Build takes them).
std::vector<size_t> SplitSequences(const std::vector<int64_t>& row_start, int threads);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_BATCH_SPLIT_H_
