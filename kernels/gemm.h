// y[m, n] = x[m, k] * w[n, k]^T (+ y when accumulate). Row-major fp32; w is a weight matrix in the
// PyTorch nn.Linear layout [out, in].
//
// Batch invariance (the property flatstate promises: a session's outputs do not depend on which
// other sessions share its step): row i of y depends only on row i of x and on w, bit for bit,
// whatever m is and wherever the row sits in the batch. The CPU body calls OpenBLAS sgemm, whose
// small-matrix kernel (taken for this layout when m*n <= 1200 and m*n*k <= 1e6 on AVX-512
// machines) accumulates in an order that depends on m; so such calls are padded to enough rows
// (m*n > 1200) to take the regular
// kernel, whose per-element order is fixed (and independent of the column range). Large calls
// split their columns into one slice per thread of `par`; OpenBLAS itself runs with one thread,
// so it never oversubscribes the engine's pool. tests/kernels/gemm_test.cc checks the property
// for every shape the shipped and benchmark models use, with 1 and 2 threads.
#ifndef FLATSTATE_KERNELS_GEMM_H_
#define FLATSTATE_KERNELS_GEMM_H_

#include <cstdint>

#include "kernels/device.h"
#include "kernels/parallel.h"

namespace flatstate {

template <Device D>
void Gemm(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
          bool accumulate, const Parallel& par);

// Call once at start-up: pins the BLAS library to one thread (the engine parallelises itself).
void InitBlasThreads();

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_GEMM_H_
