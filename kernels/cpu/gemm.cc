// CPU GEMM on packed weights: see kernels/gemm.h for the contract (one in-order chain per output
// element, identical bits from every body). This file holds the fp32 bodies, packing and the
// dispatch by weight type; bf16 and int8 bodies are in cpu/gemm_bf16.cc and cpu/gemm_int8.cc.
//
// Work is cut into tiles of (up to 96 rows) x (one 64-column panel) (cpu/gemm_internal.h).
// Inside a tile the body walks row blocks of MR rows, keeping MR x 64 accumulators in registers
// while it streams the panel (k x 64 floats) from cache: AVX-512 uses MR = 6 (24 zmm
// accumulators; the tail as one block of 1-5 rows; the later blocks prefetch the next panel,
// cpu::PanelRowsAvx512); the AVX2 body (cpu/gemm_f32_avx2.cc) walks 16-column strips in L1-sized k
// blocks with up to 6 rows x 2 ymm. Up to cpu::kStreamMaxRows rows (decode) both stream 4 panels at
// once in 4-row chunks with prefetch instead (cpu/gemm_stream.cc).
#include "kernels/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm_internal.h"

namespace flatstate {
namespace {

using cpu::kP;
using cpu::Store;

// ---- Scalar body: the definition every other body must equal bit for bit. ----
template <int MR>
void BlockScalar(const float* x, int64_t ldx, const float* p, int64_t k, float* y, int64_t ldy,
                 int64_t cols, bool accumulate) {
  alignas(64) float acc[MR * kP] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* wk = p + kk * kP;
    for (int i = 0; i < MR; ++i) {
      const float xv = x[i * ldx + kk];
      float* a = acc + i * kP;
      for (int64_t j = 0; j < kP; ++j) a[j] = std::fma(xv, wk[j], a[j]);
    }
  }
  Store<MR>(acc, y, ldy, cols, accumulate);
}

// ---- AVX-512F body (MR rows; cpu::PanelRowsAvx512 walks a panel's rows with it). ----
struct F32Avx512 {
  template <int MR>
  __attribute__((target("avx512f"))) static void Block(const float* x, int64_t ldx, const float* p,
                                                       int64_t k, float* y, int64_t ldy,
                                                       int64_t cols, bool accumulate,
                                                       cpu::SpreadPrefetch* pf) {
    __m512 acc[MR][4];
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* wk = p + kk * kP;
      pf->Step();
      const __m512 w0 = _mm512_load_ps(wk), w1 = _mm512_load_ps(wk + 16);
      const __m512 w2 = _mm512_load_ps(wk + 32), w3 = _mm512_load_ps(wk + 48);
      for (int i = 0; i < MR; ++i) {
        const __m512 xb = _mm512_set1_ps(x[i * ldx + kk]);
        acc[i][0] = _mm512_fmadd_ps(xb, w0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(xb, w1, acc[i][1]);
        acc[i][2] = _mm512_fmadd_ps(xb, w2, acc[i][2]);
        acc[i][3] = _mm512_fmadd_ps(xb, w3, acc[i][3]);
      }
    }
    cpu::StoreZmm<MR>(acc, y, ldy, cols, accumulate);
  }
};

void RowsAvx512(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel, float* y,
                int64_t ldy, int64_t cols, bool accumulate) {
  cpu::PanelRowsAvx512<F32Avx512>(
      x, k, r0, r1, panel, static_cast<int64_t>(PackedWeight::PanelBytes(WeightDtype::kF32, k)), y,
      ldy, cols, accumulate);
}

// Rows [r0, r1) of one panel, in blocks of kMr rows (the tail one row at a time).
using BlockFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                         bool);

template <int kMr, BlockFn kBlock, BlockFn kOne>
void RunRows(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel, float* y,
             int64_t ldy, int64_t cols, bool accumulate) {
  int64_t r = r0;
  for (; r + kMr <= r1; r += kMr) {
    kBlock(x + r * k, k, panel, k, y + r * ldy, ldy, cols, accumulate);
  }
  for (; r < r1; ++r) kOne(x + r * k, k, panel, k, y + r * ldy, ldy, cols, accumulate);
}

using RowsFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, float*, int64_t,
                        int64_t, bool);

RowsFn RowsFor(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return &RowsAvx512;
    case GemmIsa::kAvx2:
      return &cpu::F32RowsAvx2;
    case GemmIsa::kScalar:
      break;
  }
  return &RunRows<4, &BlockScalar<4>, &BlockScalar<1>>;
}

}  // namespace

namespace {

bool Supports(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::kScalar:
      return true;
  }
  return false;
}

// FLATSTATE_ISA's body, when it names one this CPU supports.
bool IsaFromEnv(GemmIsa* out) {
  const char* env = std::getenv("FLATSTATE_ISA");
  if (env == nullptr) return false;
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2, GemmIsa::kScalar}) {
    if (absl::AsciiStrToLower(env) == GemmIsaName(isa) && Supports(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

std::atomic<GemmIsa>& Active() {
  static std::atomic<GemmIsa> isa{[] {
    GemmIsa from_env;
    return IsaFromEnv(&from_env) ? from_env : BestGemmIsa();
  }()};
  return isa;
}

}  // namespace

size_t PackedWeight::PanelBytes(WeightDtype dtype, int64_t k) {
  switch (dtype) {
    case WeightDtype::kBf16:
    case WeightDtype::kBf16Dot:
      return static_cast<size_t>((k + 1) / 2) * kPanel * 2 * sizeof(uint16_t);
    case WeightDtype::kInt8:
      return static_cast<size_t>((k + kInt8Block - 1) / kInt8Block) * kInt8BlockBytes;
    case WeightDtype::kInt4:
      return static_cast<size_t>((k + kInt8Block - 1) / kInt8Block) * kInt4BlockBytes;
    case WeightDtype::kF32:
      break;
  }
  return static_cast<size_t>(k) * kPanel * sizeof(float);
}

PackedWeight PackedWeight::Allocate(WeightDtype dtype, int64_t n, int64_t k) {
  PackedWeight pw;
  pw.dtype_ = dtype;
  pw.n_ = n;
  pw.k_ = k;
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t bytes = (pw.bytes() + 63) / 64 * 64;
  pw.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes)));
  if (pw.data_ == nullptr) throw std::bad_alloc();
  return pw;
}

PackedWeight PackedWeight::PackBf16(const uint16_t* wb, int64_t n, int64_t k, WeightDtype dtype) {
  PackedWeight pw = Allocate(dtype, n, k);
  cpu::PackBf16Bits(wb, n, k, pw.data_.get());
  return pw;
}

PackedWeight PackedWeight::Pack(const float* w, int64_t n, int64_t k, WeightDtype dtype) {
  PackedWeight pw = Allocate(dtype, n, k);
  switch (dtype) {
    case WeightDtype::kBf16:
    case WeightDtype::kBf16Dot:
      cpu::PackBf16(w, n, k, pw.data_.get());
      return pw;
    case WeightDtype::kInt8:
      cpu::PackInt8(w, n, k, pw.data_.get());
      return pw;
    case WeightDtype::kInt4:
      cpu::PackInt4(w, n, k, pw.data_.get());
      return pw;
    case WeightDtype::kF32:
      break;
  }
  for (int64_t p = 0; p < pw.panels(); ++p) {
    const int64_t c0 = p * kPanel, cols = std::min(kPanel, n - c0);
    float* dst = reinterpret_cast<float*>(pw.data_.get() + p * pw.panel_bytes());
    for (int64_t kk = 0; kk < k; ++kk) {
      float* row = dst + kk * kPanel;
      for (int64_t j = 0; j < cols; ++j) row[j] = w[(c0 + j) * k + kk];
      for (int64_t j = cols; j < kPanel; ++j) row[j] = 0.f;
    }
  }
  return pw;
}

const char* WeightDtypeName(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kBf16:
      return "bf16";
    case WeightDtype::kInt8:
      return "int8";
    case WeightDtype::kInt4:
      return "int4";
    case WeightDtype::kBf16Dot:
      return "bf16dot";
    case WeightDtype::kF32:
      break;
  }
  return "f32";
}

absl::StatusOr<WeightDtype> ParseWeightDtype(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (WeightDtype d : {WeightDtype::kF32, WeightDtype::kBf16, WeightDtype::kInt8,
                        WeightDtype::kInt4, WeightDtype::kBf16Dot}) {
    if (lower == WeightDtypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("weight_dtype: unknown type '", name,
                                                 "' (expected f32, bf16, int8, int4 or bf16dot)"));
}

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return "avx512";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kScalar:
      break;
  }
  return "scalar";
}

GemmIsa BestGemmIsa() {
  if (Supports(GemmIsa::kAvx512)) return GemmIsa::kAvx512;
  if (Supports(GemmIsa::kAvx2)) return GemmIsa::kAvx2;
  return GemmIsa::kScalar;
}

GemmIsa ActiveGemmIsa() { return Active().load(std::memory_order_relaxed); }

std::string IsaFromEnvironment() {
  const char* env = std::getenv("FLATSTATE_ISA");
  if (env == nullptr) return "";
  GemmIsa isa;
  if (IsaFromEnv(&isa)) return absl::StrCat(GemmIsaName(isa), " (from FLATSTATE_ISA)");
  return absl::StrCat("FLATSTATE_ISA=", env,
                      " ignored: unknown or unsupported here (avx512, avx2 or scalar)");
}

bool SetGemmIsa(GemmIsa isa) {
  if (!Supports(isa)) return false;
  Active().store(isa, std::memory_order_relaxed);
  return true;
}

const char* GemmBodyName(GemmIsa isa, WeightDtype dtype) {
  if ((dtype == WeightDtype::kInt8 || dtype == WeightDtype::kInt4) && isa == GemmIsa::kAvx512) {
    return cpu::HasInt8Vnni() ? "avx512-vnni" : "avx2";
  }
  if (dtype == WeightDtype::kBf16Dot && isa == GemmIsa::kAvx512) {
    return cpu::HasAvx512Bf16() ? "avx512-bf16" : "avx2";
  }
  return GemmIsaName(isa);
}

void GemmPacked(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                const Parallel& par) {
  const int64_t n = w.n(), k = w.k();
  if (m <= 0 || n <= 0) return;
  const GemmIsa isa = ActiveGemmIsa();
  switch (w.dtype()) {
    case WeightDtype::kBf16:
      return cpu::GemmBf16(x, m, w, y, accumulate, par, isa);
    case WeightDtype::kInt8:
      return cpu::GemmInt8(x, m, w, y, accumulate, par, isa);
    case WeightDtype::kInt4:
      return cpu::GemmInt4(x, m, w, y, accumulate, par, isa);
    case WeightDtype::kBf16Dot:
      return cpu::GemmBf16Dot(x, m, w, y, accumulate, par, isa);
    case WeightDtype::kF32:
      break;
  }
  if (m <= cpu::kStreamMaxRows && isa != GemmIsa::kScalar) {
    return cpu::GemmStreamF32(x, m, w, y, accumulate, par, isa);
  }
  const RowsFn rows = RowsFor(isa);
  cpu::ForTiles(m, w.panels(), static_cast<double>(m) * n * k, par,
                [&](int64_t r0, int64_t r1, int64_t p) {
                  const int64_t c0 = p * kP;
                  rows(x, k, r0, r1, w.panel(p), y + c0, n, std::min(kP, n - c0), accumulate);
                });
}

template <>
absl::StatusOr<GemmWeight<Device::kCpu>> PrepareGemmWeight<Device::kCpu>(
    const float* w, int64_t n, int64_t k, const GemmWeightOptions& options) {
  GemmWeight<Device::kCpu> gw;
  gw.dtype = options.dtype;
  gw.n = n;
  gw.k = k;
  gw.batch_invariant = options.batch_invariant;
  try {
    gw.packed = PackedWeight::Pack(w, n, k, options.dtype);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory packing a ", n, " x ", k,
                                                     " ", WeightDtypeName(options.dtype),
                                                     " weight"));
  }
  return gw;
}

template <>
absl::StatusOr<GemmWeight<Device::kCpu>> PrepareGemmWeightBf16<Device::kCpu>(
    const uint16_t* wb, int64_t n, int64_t k, const GemmWeightOptions& options) {
  try {
    if (options.dtype == WeightDtype::kBf16 || options.dtype == WeightDtype::kBf16Dot) {
      GemmWeight<Device::kCpu> gw;
      gw.dtype = options.dtype;
      gw.n = n;
      gw.k = k;
      gw.batch_invariant = options.batch_invariant;
      gw.packed = PackedWeight::PackBf16(wb, n, k, options.dtype);
      return gw;
    }
    std::vector<float> wide(static_cast<size_t>(n * k));
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = FloatFromBf16(wb[i]);
    return PrepareGemmWeight<Device::kCpu>(wide.data(), n, k, options);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory preparing a ", n, " x ", k,
                                                     " bf16 weight as ",
                                                     WeightDtypeName(options.dtype)));
  }
}

template <>
void Gemm<Device::kCpu>(const float* x, int64_t m, const GemmWeight<Device::kCpu>& w, float* y,
                        bool accumulate, const Parallel& par) {
  GemmPacked(x, m, w.packed, y, accumulate, par);
}

}  // namespace flatstate
