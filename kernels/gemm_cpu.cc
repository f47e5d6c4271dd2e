#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/gemm.h"

extern "C" void openblas_set_num_threads(int);

namespace flatstate {
namespace {

// OpenBLAS 0.3.21 on AVX-512 machines (SkylakeX/Cooperlake/Zen4 kernels) takes its small-matrix
// sgemm path for our layout (row-major x * w^T, i.e. column-major "TN") only when m*n*k <= 1e6
// AND m*n <= 1200 (sgemm_small_kernel_permit_skylakex.c). Keeping m*n above 1200 is enough and
// costs far less padding than the m*n*k bound: a 1-row decode with n = 384 pads to 4 rows.
constexpr int64_t kSmallMatrixMaxMN = 1200;

// One column slice. sgemm always runs with beta = 0 into a scratch (never accumulating into y):
// with beta = 1 OpenBLAS adds each K-block's partial sum into y separately, which would make the
// rounding depend on whether the call was padded.
void SgemmSlice(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                int64_t ldy, bool accumulate) {
  const int64_t min_rows = kSmallMatrixMaxMN / n + 1;
  const int64_t rows = std::max(m, min_rows);
  thread_local std::vector<float> xp, yp;
  const float* a = x;
  if (rows > m) {
    // Padding rows only need finite values (each output row depends on its own input row only):
    // grow with zeros, then leave whatever earlier calls wrote there.
    if (xp.size() < static_cast<size_t>(rows * k)) xp.resize(static_cast<size_t>(rows * k), 0.f);
    std::memcpy(xp.data(), x, sizeof(float) * m * k);
    a = xp.data();
  }
  if (yp.size() < static_cast<size_t>(rows * n)) yp.resize(static_cast<size_t>(rows * n));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, k, 1.f, a, k, w, k, 0.f,
              yp.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    float* dst = y + i * ldy;
    const float* src = yp.data() + i * n;
    if (accumulate) {
      for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
    } else {
      std::memcpy(dst, src, sizeof(float) * n);
    }
  }
}

}  // namespace

void InitBlasThreads() { openblas_set_num_threads(1); }

template <>
void Gemm<Device::kCpu>(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                        float* y, bool accumulate, const Parallel& par) {
  if (m <= 0 || n <= 0) return;
  // Small problems stay on one thread in one call: the fork/join and the extra padding of
  // narrower slices cost more than they save.
  const int threads = par.num_threads();
  if (threads == 1 || static_cast<double>(m) * n * k < 2e5) {
    SgemmSlice(x, m, k, w, n, y, n, accumulate);
    return;
  }
  // One slice per thread, a multiple of 16 columns. Results do not depend on the slicing:
  // every call takes the regular kernel, whose per-element order ignores the column range
  // (tests/kernels/gemm_test.cc checks 1 and 2 threads bit for bit).
  const int64_t slice = ((n + threads - 1) / threads + 15) / 16 * 16;
  const int64_t slices = (n + slice - 1) / slice;
  par.For(slices, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      const int64_t c0 = s * slice, cn = std::min(slice, n - c0);
      SgemmSlice(x, m, k, w + c0 * k, cn, y + c0, n, accumulate);
    }
  });
}

}  // namespace flatstate
