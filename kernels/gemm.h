// y[m, n] = x[m, k] * w[n, k]^T (+ y when accumulate). Row-major fp32; w is a weight matrix in the
// PyTorch nn.Linear layout [out, in].
//
// Batch invariance (the property flatstate promises: a session's outputs do not depend on which
// other sessions share its step): row i of y depends only on row i of x and on w, bit for bit,
// whatever m is, wherever the row sits in the batch and however many threads run the call.
//
// The CPU body is flatstate's own GEMM, not a BLAS: the weight is rearranged once into column
// panels (PackedWeight) and every output element is one chain of fused multiply-adds over k in
// order, acc = fma(x[i][kk], w[j][kk], acc) for kk = 0..k-1 from acc = 0, then y = acc (or
// y + acc). Register tiling (rows x panel columns) and threading (over panels and row blocks)
// only decide which chains run together, never the order inside one, so the result is also
// identical across the AVX-512, AVX2 and scalar bodies: a session computes the same bits on
// any x86-64 machine. tests/kernels/gemm_test.cc checks all of it for every shape the shipped and
// benchmark models use.
//
// The op is Gemm<D> over a GemmWeight<D>, a weight prepared once at load for device D's GEMM by
// PrepareGemmWeight<D> (kCpu: the PackedWeight panels, and Gemm<kCpu> is GemmPacked; kCuda: a
// device copy of w, multiplied by cuBLAS, which is batch-invariant to rounding only, or, with the
// weight's `batch_invariant` set, by flatstate's own kernel, which keeps the CPU's order of
// operations above and so its bits; see gemm_gpu.cu). The weight's
// element type is a field of the weight (WeightDtype): a new type is a new value there plus the
// bodies that read it, never a change in the caller.
#ifndef FLATSTATE_KERNELS_GEMM_H_
#define FLATSTATE_KERNELS_GEMM_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/device.h"
#include "kernels/memory.h"
#include "kernels/parallel.h"

namespace flatstate {

// A weight [n, k] rearranged for the CPU GEMM: ceil(n / 64) panels of 64 output columns; panel p
// holds, for kk = 0..k-1, the 64 floats w[p*64 + 0..63][kk] contiguously (zero past n). Owns its
// 64-byte-aligned buffer; immutable after Pack, so safe to share between threads.
class PackedWeight {
 public:
  static constexpr int64_t kPanel = 64;

  PackedWeight() = default;
  // Throws std::bad_alloc when memory runs out (PrepareGemmWeight<kCpu> turns it into a status).
  static PackedWeight Pack(const float* w, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  const float* panel(int64_t p) const { return data_.get() + p * kPanel * k_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  int64_t n_ = 0, k_ = 0;
};

// y[m, w.n()] = x[m, w.k()] * w^T (+ y). See the top of this file for the order of operations.
void GemmPacked(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                const Parallel& par);

// Element types a GemmWeight can hold (the activations x and y are always fp32).
enum class WeightDtype { kF32 };

// A weight w [n, k] (nn.Linear layout) prepared for device D's GEMM. Owns its storage; immutable
// after PrepareGemmWeight, so safe to share between threads. Move-only.
template <Device D>
struct GemmWeight {
  WeightDtype dtype = WeightDtype::kF32;
  int64_t n = 0, k = 0;
  PackedWeight packed;  // kCpu: the panels GemmPacked reads
  Buffer<D> data;       // devices whose memory is not host memory: w [n, k] in D's memory
  // kCuda: multiply with the fixed-order kernel (bitwise batch-invariant, and equal to the CPU's
  // GEMM bit for bit) instead of cuBLAS. The CPU's GEMM is always batch-invariant.
  bool batch_invariant = false;
};

// Prepares the host weight w [n, k] (fp32) for D. Fails with ResourceExhausted when D is out of
// memory (or the device's error); kCuda: the copy completes at the next Synchronize<kCuda>.
template <Device D>
absl::StatusOr<GemmWeight<D>> PrepareGemmWeight(const float* w, int64_t n, int64_t k);

// y[m, w.n] = x[m, w.k] * w^T (+ y when accumulate). x and y are in D's memory. kCpu: exactly
// GemmPacked (the order of operations above); kCuda: asynchronous, `par` unused.
template <Device D>
void Gemm(const float* x, int64_t m, const GemmWeight<D>& w, float* y, bool accumulate,
          const Parallel& par);

// Which body GemmPacked runs. All give identical bits; they differ only in speed.
enum class GemmIsa { kScalar, kAvx2, kAvx512 };
const char* GemmIsaName(GemmIsa isa);
// The fastest body this CPU supports (AVX-512F, else AVX2 + FMA, else scalar).
GemmIsa BestGemmIsa();
GemmIsa ActiveGemmIsa();
// Selects a body (tests and benchmarks compare them). Returns false, changing nothing, when the
// CPU lacks it. Not synchronised with running GEMMs: call it while none runs.
bool SetGemmIsa(GemmIsa isa);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_GEMM_H_
