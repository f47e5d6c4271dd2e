// y[m, n] = x[m, k] * w[n, k]^T (+ y when accumulate). x and y are row-major fp32; w is a weight
// matrix in the PyTorch nn.Linear layout [out, in], held as fp32, bf16, int8 or int4
// (WeightDtype).
//
// Batch invariance (the property flatstate promises: a session's outputs do not depend on which
// other sessions share its step): row i of y depends only on row i of x and on w, bit for bit,
// whatever m is, wherever the row sits in the batch and however many threads run the call.
//
// The CPU body is flatstate's own GEMM, not a BLAS: the weight is rearranged once into column
// panels (PackedWeight) and every output element is one fixed chain of operations over k in
// order, from acc = 0, then y = acc (or y + acc):
//   kF32   acc = fma(x[i][kk], w[j][kk], acc) for kk = 0..k-1.
//   kBf16  the same chain on the bf16 weight widened to fp32 (exact): acc = fma(x[i][kk],
//          float(wb[j][kk]), acc). wb is w rounded to nearest-even bf16 once, at Pack.
//   kInt8  per block b of 32 along k (like llama.cpp's Q8_0): the weight is qw[j][kk] * sw[j][b]
//          (qw int8 in [-127, 127], one fp32 scale per column and block, fixed at Pack) and the
//          row is quantised the same way per block when the call starts, qx[i][kk] * sx[i][b]
//          (QuantizeRowInt8 below: it depends on the row alone). Then for b = 0, 1, ... in order
//          acc = fma(float(isum_b), sx[i][b] * sw[j][b], acc), where isum_b is the exact integer
//          sum of qx * qw over the block (|isum_b| < 2^24, so float(isum_b) is exact too).
//   kInt4  kInt8's chain with qw in [-7, 7] and sw = max|w| / 7 per column and block of 32
//          (QuantizeBlockInt4); the activations are int8 as for kInt8.
//   kBf16Dot  kBf16's weight, and the row rounded to nearest-even bf16 too when the call starts
//          (xb, depending on the row alone); then per pair t of k, in order,
//          acc = F(fma(F(xb[i][2t+1]), F(wb[j][2t+1]), acc)), then the same for 2t, F flushing
//          a subnormal to a zero of its sign: AVX512-BF16's vdpbf16ps, two products per
//          instruction (odd first), the other bodies emulating it (cpu/gemm_bf16_dot.cc). Lossier
//          than kBf16 (activations lose 16 bits), about 2x its arithmetic rate where the
//          instruction exists; llama.cpp's BF16 rounds activations the same way on such CPUs.
// Register tiling (rows x panel columns) and threading (over panels and row blocks) only decide
// which chains run together, never the order inside one, and integer sums are exact whatever
// instruction adds them, so the result is also identical across the AVX-512, AVX2 and scalar
// bodies: a session computes the same bits on any x86-64 machine. tests/kernels/gemm_test.cc
// checks all of it, for every type and body, on every shape the shipped and benchmark models use.
//
// Bodies per type: kF32 and kBf16 are AVX-512F, AVX2+FMA or scalar fma chains (bf16 widening is a
// 16-bit shift, so no AVX512-BF16 is needed; vdpbf16ps would round the activations, which is
// kBf16Dot's chain, not kBf16's). kBf16Dot is vdpbf16ps (AVX512-BF16) or its exact emulation
// (AVX2 under kAvx2 and on AVX-512F CPUs without BF16, scalar): cpu/gemm_bf16_dot.cc.
// kInt8 and kInt4 sum blocks with AVX512-VNNI vpdpbusd, or AVX2 vpmaddubsw/vpmaddwd, or scalar
// integer multiply-adds; a CPU with AVX-512F but no VNNI runs their AVX2 bodies under kAvx512.
//
// The op is Gemm<D> over a GemmWeight<D>, a weight prepared once at load for device D's GEMM by
// PrepareGemmWeight<D> from an fp32 host weight, by PrepareGemmWeightBf16<D> from a bf16 one (a
// model file that stores its layer weights as BF16; docs/model-format.md), or by
// PrepareGemmWeightQuantized<D> from stored int8 / int4 quants and scales (QuantizedWeightView).
// kCpu: the PackedWeight panels, and Gemm<kCpu> is GemmPacked. kCuda (cuda/gemm.cu): a device copy
// of the weight multiplied by cuBLAS, which is batch-invariant to rounding only, or, with the
// weight's `batch_invariant` set, by flatstate's own kernel, which keeps the CPU's order of
// operations above and so its bits (kF32, kBf16). On kCuda, kBf16 keeps the weight as bf16 and its
// cuBLAS path rounds the activations to bf16 too (cublasGemmEx takes no mixed bf16 x fp32
// operands), and kInt8/kInt4 are dequantised once at prepare to an fp32 device weight (float(qw) *
// sw, the CPU's blocks and scales), so neither is the CPU's chain: docs/gpu.md gives the
// tolerances. The weight's element type is a field of the weight (WeightDtype): a new type is a new
// value there plus the bodies that read it, never a change in the caller.
#ifndef FLATSTATE_KERNELS_GEMM_H_
#define FLATSTATE_KERNELS_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/bf16.h"
#include "kernels/device.h"
#include "kernels/memory.h"
#include "kernels/parallel.h"

namespace flatstate {

// Element types a GemmWeight can hold (the activations x and y are always fp32 in memory; kBf16Dot
// rounds them inside the GEMM). See the top of this file for each type's chain and
// docs/model-format.md for which tensors take it. kBf16Dot is a CPU type (kCuda refuses it).
enum class WeightDtype { kF32, kBf16, kInt8, kInt4, kBf16Dot };

// "f32" | "bf16" | "int8" | "int4" | "bf16dot"
const char* WeightDtypeName(WeightDtype dtype);
// Parses --weight_dtype values; InvalidArgument naming the accepted ones otherwise.
absl::StatusOr<WeightDtype> ParseWeightDtype(absl::string_view name);

// A weight [n, k] already quantised as kInt8 or kInt4, in the layout a model file stores it
// (docs/model-format.md, "Stored int8 and int4"): per column j and block b of 32 along k (nb =
// ceil(k / 32) blocks per column; the last one is short when 32 does not divide k) the weight is
// float(q[j][kk]) * scales[j * nb + kk / 32], the scales row-major [n, nb], and q is
//   kInt8  n * k bytes, row-major: q[j][kk] as an int8 in [-127, 127].
//   kInt4  n * ceil(k / 2) bytes, row-major: byte i of row j holds q[j][2i] + 8 in its low nibble
//          and q[j][2i + 1] + 8 in its high nibble, each q in [-7, 7] (nibbles 1 .. 15); for an
//          odd k each row's last high nibble is 8 (a zero).
// These are exactly the quants and scales PackedWeight::Pack computes for those types (and
// QuantizeWeight returns). A view: owns nothing, points into memory the caller keeps alive.
// Nothing here checks the ranges (Model::Load does, for a model file); out-of-range quants give
// wrong numbers, never a crash.
struct QuantizedWeightView {
  WeightDtype dtype = WeightDtype::kInt8;  // kInt8 or kInt4
  const uint8_t* q = nullptr;
  const float* scales = nullptr;
  int64_t n = 0, k = 0;
};

// A weight [n, k] rearranged for the CPU GEMM: ceil(n / 64) panels of 64 output columns (zero past
// n), each panel_bytes() long, 64-byte aligned. Inside panel p, column j is w[p*64 + j]:
//   kF32   k rows of 64 floats: w[j][kk] at float kk*64 + j.
//   kBf16, kBf16Dot  ceil(k / 2) rows of 64 pairs: w[j][kk] at uint16 (kk/2)*128 + j*2 + kk%2,
//          its bf16 (an odd k's last pair has a zero second half, which only kBf16Dot reads).
//   kInt8  ceil(k / 32) blocks of kInt8BlockBytes: 2048 bytes of quants, qw[j][b*32 + 4*g + t]
//          at byte g*256 + j*4 + t as the unsigned byte qw + 128 (the operand order vpdpbusd
//          wants), then the block's 64 fp32 scales sw[j][b]; k past the end quantises as 0.
//          Per column and block: sw = max|w| / 127 and qw = nearest-even(w / sw) (all 0 where
//          max|w| is 0). 36 bytes per 32 weights (Q8_0 has 34: an fp16 scale).
//   kInt4  ceil(k / 32) blocks of kInt4BlockBytes: 1024 bytes of nibbles, the byte at
//          g*256 + j*4 + t (g = 0..3) holding qw[j][b*32 + 8*g + t] + 8 in its low and
//          qw[j][b*32 + 8*g + 4 + t] + 8 in its high nibble, then the 64 fp32 scales sw[j][b]
//          (sw = max|w| / 7, qw = nearest-even(w / sw) in [-7, 7]). 20 bytes per 32 weights.
// Owns its buffer; immutable after Pack, so safe to share between threads.
class PackedWeight {
 public:
  static constexpr int64_t kPanel = 64;
  static constexpr int64_t kInt8Block = 32;  // k per int8 scale
  static constexpr size_t kInt8BlockBytes = 2048 + 64 * sizeof(float);
  static constexpr size_t kInt4BlockBytes = 1024 + 64 * sizeof(float);

  PackedWeight() = default;
  // Throws std::bad_alloc when memory runs out (PrepareGemmWeight<kCpu> turns it into a status).
  static PackedWeight Pack(const float* w, int64_t n, int64_t k,
                           WeightDtype dtype = WeightDtype::kF32);
  // kBf16 (or kBf16Dot) panels from a weight already in bf16 (wb [n, k], each element an fp32's
  // top 16 bits): the bits are copied as they are, so this is Pack(w, n, k, dtype) for any w whose
  // nearest-even bf16 is wb, byte for byte. Throws std::bad_alloc like Pack.
  static PackedWeight PackBf16(const uint16_t* wb, int64_t n, int64_t k,
                               WeightDtype dtype = WeightDtype::kBf16);
  // kInt8 / kInt4 panels (w.dtype) from a weight already quantised (QuantizedWeightView below):
  // the quants and scales are placed as they are, nothing is rounded again, so this is
  // Pack(v, n, k, w.dtype) byte for byte when w is QuantizeWeight(v, n, k, w.dtype). Throws
  // std::bad_alloc like Pack. (cpu/gemm_stored.cc)
  static PackedWeight PackQuantized(const QuantizedWeightView& w);

  WeightDtype dtype() const { return dtype_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  size_t panel_bytes() const { return PanelBytes(dtype_, k_); }
  size_t bytes() const { return Bytes(dtype_, n_, k_); }
  const uint8_t* panel_data(int64_t p) const { return data_.get() + p * panel_bytes(); }
  // kF32 only: panel p's floats.
  const float* panel(int64_t p) const { return reinterpret_cast<const float*>(panel_data(p)); }

  static size_t PanelBytes(WeightDtype dtype, int64_t k);
  // Bytes of the panels of an n x k weight of `dtype`.
  static size_t Bytes(WeightDtype dtype, int64_t n, int64_t k) {
    return static_cast<size_t>((n + kPanel - 1) / kPanel) * PanelBytes(dtype, k);
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  static PackedWeight Allocate(WeightDtype dtype, int64_t n, int64_t k);
  std::unique_ptr<uint8_t, Free> data_;
  WeightDtype dtype_ = WeightDtype::kF32;
  int64_t n_ = 0, k_ = 0;
};

// Bf16FromFloat / FloatFromBf16: kernels/bf16.h.

// kInt8's quantisation of one block of `len` (<= 32) activations, the rule the weights use too:
// scale = max|x| / 127, q[t] = nearest-even(x[t] / scale), clamped to [-127, 127]; all q = 0 (and
// scale 0) when max|x| is 0. A block holding an Inf or NaN gets scale NaN, so its outputs are NaN
// as with fp32 weights. q[len..31] = 0. Returns the scale.
float QuantizeBlockInt8(const float* x, int64_t len, int8_t* q);
// The same rule to [-7, 7]: scale = max|x| / 7 (kInt4's weights).
float QuantizeBlockInt4(const float* x, int64_t len, int8_t* q);

// Bytes of one row of q (k for kInt8, ceil(k / 2) for kInt4) and scales per row (ceil(k / 32)).
int64_t QuantizedRowBytes(WeightDtype dtype, int64_t k);
int64_t QuantizedBlocks(int64_t k);

// A quantised weight in owned memory (the layout of QuantizedWeightView). Movable, not shared.
struct QuantizedWeight {
  WeightDtype dtype = WeightDtype::kInt8;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> q;
  std::vector<float> scales;
  QuantizedWeightView view() const { return {dtype, q.data(), scales.data(), n, k}; }
};

// w [n, k] quantised per column and block of 32 as PackedWeight::Pack(w, n, k, dtype) quantises
// it (QuantizeBlockInt8 / QuantizeBlockInt4), in the stored layout; dtype kInt8 or kInt4. A block
// holding an Inf or NaN gets a NaN scale and zero quants, as in Pack (a model file may not hold
// one). Throws std::bad_alloc when memory runs out.
QuantizedWeight QuantizeWeight(const float* w, int64_t n, int64_t k, WeightDtype dtype);
// a's rows followed by b's (the same dtype and k): the quantised form of the row-concatenated
// fp32 weight, since each column is quantised on its own. Throws std::bad_alloc.
QuantizedWeight ConcatRows(const QuantizedWeightView& a, const QuantizedWeightView& b);
// out[j * k + kk] = float(q[j][kk]) * scale (one fp32 multiply, rounded to nearest: the values
// the kCuda path multiplies by, and what a quantised file holds as fp32).
void DequantizeWeight(const QuantizedWeightView& w, float* out);
// q as one int8 per weight, each row padded with zeros to QuantizedBlocks(k) * 32 values (out:
// n times that many): the form the kCuda path dequantises from.
void UnpackQuants(const QuantizedWeightView& w, int8_t* out);
// OK when a weight stored as w.dtype (kInt8 or kInt4) may be prepared as `target` (the same type,
// kF32 or kBf16); InvalidArgument naming both types otherwise (or w.dtype when it is not an
// integer type).
absl::Status CheckQuantizedTarget(const QuantizedWeightView& w, WeightDtype target);

// y[m, w.n()] = x[m, w.k()] * w^T (+ y). See the top of this file for the order of operations.
void GemmPacked(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                const Parallel& par);

// How PrepareGemmWeight prepares a weight: its element type and, on kCuda, whether the
// fixed-order kernel multiplies it (GemmWeight::batch_invariant).
struct GemmWeightOptions {
  WeightDtype dtype = WeightDtype::kF32;
  bool batch_invariant = false;
};

// A weight w [n, k] (nn.Linear layout) prepared for device D's GEMM. Owns its storage; immutable
// after PrepareGemmWeight, so safe to share between threads. Move-only.
template <Device D>
struct GemmWeight {
  WeightDtype dtype = WeightDtype::kF32;
  int64_t n = 0, k = 0;
  PackedWeight packed;  // kCpu: the panels GemmPacked reads
  // Devices whose memory is not host memory (kCuda): w [n, k], row-major, in D's memory: as bf16
  // bits for kBf16, as fp32 for kF32, and for kInt8/kInt4 as the fp32 values float(qw) * sw of
  // the quantised weight (dequantised at prepare; 4 bytes per weight, as f32).
  Buffer<D> data;
  // kCuda: multiply with the fixed-order kernel (bitwise batch-invariant; for kF32 and kBf16
  // equal to the CPU's GEMM bit for bit) instead of cuBLAS. The CPU's GEMM is always
  // batch-invariant.
  bool batch_invariant = false;
};

// Bytes of w [n, k] prepared for `device` as `dtype`: what one GEMM over it reads (benchmarks
// count a step's bytes with it). kCpu: its packed panels (PackedWeight::bytes()); kCuda: the
// buffer `data` above, 2 bytes a weight for kBf16 and 4 otherwise (kBf16Dot: none, kCuda refuses
// it).
inline size_t PreparedWeightBytes(Device device, WeightDtype dtype, int64_t n, int64_t k) {
  if (device == Device::kCpu) return PackedWeight::Bytes(dtype, n, k);
  return static_cast<size_t>(n) * static_cast<size_t>(k) * (dtype == WeightDtype::kBf16 ? 2 : 4);
}

// Prepares the host weight w [n, k] (fp32) for D as options.dtype (kCpu quantises it here; kCuda
// quantises on the host and dequantises kInt8/kInt4 on the device). `w` is only read during the
// call except for kCuda kF32, whose copy completes at the next Synchronize<kCuda> (`w` must stay
// valid until then). Fails with ResourceExhausted when D is out of memory (or the device's error).
template <Device D>
absl::StatusOr<GemmWeight<D>> PrepareGemmWeight(const float* w, int64_t n, int64_t k,
                                                const GemmWeightOptions& options = {});

// The same from a bf16 host weight wb [n, k] (each element an fp32's top 16 bits, as safetensors
// BF16 stores it): exactly PrepareGemmWeight<D> on the widened fp32 values (widening is exact).
// kBf16 and kBf16Dot use the bits as they are (so a bf16 file and the f32 file it was rounded
// from, prepared as either, give the same weight); kF32 widens, kInt8/kInt4 quantise the widened
// values (a temporary fp32 copy of n * k floats during the call). kCuda kBf16: the copy completes
// at the next Synchronize<kCuda> (`wb` must stay valid until then). Fails like PrepareGemmWeight.
template <Device D>
absl::StatusOr<GemmWeight<D>> PrepareGemmWeightBf16(const uint16_t* wb, int64_t n, int64_t k,
                                                    const GemmWeightOptions& options = {});

// The same from a weight already quantised (a model file that stores its layer weights as int8
// or int4), prepared as options.dtype:
//   options.dtype == w.dtype  the stored quants and scales as they are, never rounded again: kCpu
//       packs them (PackedWeight::PackQuantized), kCuda dequantises them on the device as it does
//       its own quantisation. So the result is PrepareGemmWeight<D>(v, ...) for every fp32 v
//       whose quantisation is w, bit for bit.
//   kF32, kBf16, kBf16Dot  PrepareGemmWeight<D> on DequantizeWeight's fp32 values (a temporary fp32
//   copy
//       of n * k floats during the call).
//   the other integer type: InvalidArgument (re-quantising quantised weights is not done).
// Fails otherwise like PrepareGemmWeight. `w` is only read during the call.
template <Device D>
absl::StatusOr<GemmWeight<D>> PrepareGemmWeightQuantized(const QuantizedWeightView& w,
                                                         const GemmWeightOptions& options = {});

// y[m, w.n] = x[m, w.k] * w^T (+ y when accumulate). x and y are in D's memory. kCpu: exactly
// GemmPacked (the order of operations above); kCuda: asynchronous, `par` unused; kBf16 through
// cuBLAS converts x to bf16 in a device workspace shared by all kCuda GEMMs (one thread enqueues
// kCuda work at a time: kernels/cuda/context.h).
template <Device D>
void Gemm(const float* x, int64_t m, const GemmWeight<D>& w, float* y, bool accumulate,
          const Parallel& par);

// Which bodies GemmPacked runs. All give identical bits; they differ only in speed.
enum class GemmIsa { kScalar, kAvx2, kAvx512 };
const char* GemmIsaName(GemmIsa isa);
// The fastest body this CPU supports (AVX-512F, else AVX2 + FMA, else scalar).
GemmIsa BestGemmIsa();
// The body selected now. At start it is the environment variable FLATSTATE_ISA's ("avx512",
// "avx2" or "scalar") when set to one this CPU supports (so a developer on an AVX-512 machine can
// measure the AVX2 bodies: docs/benchmarks.md), else BestGemmIsa(); IsaFromEnvironment says which.
GemmIsa ActiveGemmIsa();
// What FLATSTATE_ISA asked for, for logs: "" when unset, else its value and whether it was taken,
// e.g. "avx2 (from FLATSTATE_ISA)" or "FLATSTATE_ISA=avx9 ignored: unknown or unsupported".
std::string IsaFromEnvironment();
// Selects a body (tests and benchmarks compare them). Returns false, changing nothing, when the
// CPU lacks it. Not synchronised with running GEMMs: call it while none runs.
bool SetGemmIsa(GemmIsa isa);
// The body that runs `dtype` while `isa` is selected, e.g. "avx512-vnni" for kInt8 and kInt4
// under kAvx512 on a CPU with AVX512-VNNI, "avx2" on one without; "avx512-bf16" or "avx2" for
// kBf16Dot (tests and benchmarks name what they ran).
const char* GemmBodyName(GemmIsa isa, WeightDtype dtype);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_GEMM_H_
