// Helpers for the CPU GEMM tests (tests/kernels/gemm*_test.cc): random inputs, the bodies this CPU
// has, the shapes the shipped and benchmark models use, and the reference definition of every
// weight type's chain (kernels/gemm.h), written out plainly from the unpacked weight.
#ifndef FLATSTATE_TESTS_KERNELS_GEMM_TEST_UTIL_H_
#define FLATSTATE_TESTS_KERNELS_GEMM_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/util/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace flatstate::testing {

inline std::vector<float> Random(size_t n, uint32_t seed, float stddev = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct GemmShape {
  int64_t k, n;
};

// Every GEMM shape of the shipped (d = 128) and benchmark (GPT-2-small) models.
inline const std::vector<GemmShape>& ModelShapes() {
  static const std::vector<GemmShape> s = {{128, 384},  {128, 128},  {128, 512}, {512, 128},
                                           {128, 256},  {768, 2304}, {768, 768}, {768, 3072},
                                           {3072, 768}, {768, 256}};
  return s;
}

inline const std::vector<WeightDtype>& AllDtypes() {
  static const std::vector<WeightDtype> d = {WeightDtype::kF32, WeightDtype::kBf16,
                                             WeightDtype::kInt8, WeightDtype::kInt4,
                                             WeightDtype::kBf16Dot};
  return d;
}

// The bodies this CPU can run (selecting each in turn; the caller restores BestGemmIsa()).
inline std::vector<GemmIsa> CpuBodies() {
  std::vector<GemmIsa> bodies = {GemmIsa::kScalar};
  if (SetGemmIsa(GemmIsa::kAvx2)) bodies.push_back(GemmIsa::kAvx2);
  if (SetGemmIsa(GemmIsa::kAvx512)) bodies.push_back(GemmIsa::kAvx512);
  SetGemmIsa(BestGemmIsa());
  return bodies;
}

// y[m, n] by `dtype`'s chain from the fp32 x [m, k] and w [n, k] (kernels/gemm.h), then y0 + y
// when y0 is given.
inline std::vector<float> ReferenceGemm(WeightDtype dtype, const std::vector<float>& x, int64_t m,
                                        const std::vector<float>& w, int64_t n, int64_t k,
                                        const std::vector<float>* y0 = nullptr) {
  std::vector<float> y(m * n);
  constexpr int64_t kB = PackedWeight::kInt8Block;
  const int64_t nb = (k + kB - 1) / kB;
  const bool integer = dtype == WeightDtype::kInt8 || dtype == WeightDtype::kInt4;
  // Quantised rows of a matrix [rows, k]: q [rows, nb * 32], s [rows, nb].
  auto quantize = [&](const std::vector<float>& a, int64_t rows, bool int4, std::vector<int8_t>* q,
                      std::vector<float>* s) {
    q->assign(rows * nb * kB, 0);
    s->assign(rows * nb, 0.f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const float* block = a.data() + r * k + b * kB;
        const int64_t len = std::min(kB, k - b * kB);
        int8_t* qb = q->data() + (r * nb + b) * kB;
        (*s)[r * nb + b] =
            int4 ? QuantizeBlockInt4(block, len, qb) : QuantizeBlockInt8(block, len, qb);
      }
    }
  };
  std::vector<int8_t> qx, qw;
  std::vector<float> sx, sw;
  if (integer) {
    quantize(x, m, /*int4=*/false, &qx, &sx);  // activations are int8 for both types
    quantize(w, n, dtype == WeightDtype::kInt4, &qw, &sw);
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.f;
      if (integer) {
        for (int64_t b = 0; b < nb; ++b) {
          int32_t isum = 0;
          for (int64_t t = 0; t < kB; ++t) {
            isum += int32_t{qx[(i * nb + b) * kB + t]} * int32_t{qw[(j * nb + b) * kB + t]};
          }
          acc = std::fma(static_cast<float>(isum), sx[i * nb + b] * sw[j * nb + b], acc);
        }
      } else if (dtype == WeightDtype::kBf16Dot) {
        // Pairs in order, the odd product first, operands and each fma's result flushed.
        auto flush = [](float v) {
          return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.f, v) : v;
        };
        auto bf = [&](const std::vector<float>& a, int64_t at, int64_t len) {
          return at < len ? flush(FloatFromBf16(Bf16FromFloat(a[at]))) : 0.f;
        };
        for (int64_t kk = 0; kk < k; kk += 2) {
          const float xo = bf(x, i * k + kk + 1, kk + 1 < k ? m * k : 0);
          const float wo = bf(w, j * k + kk + 1, kk + 1 < k ? n * k : 0);
          acc = flush(std::fma(xo, wo, acc));
          acc = flush(std::fma(bf(x, i * k + kk, m * k), bf(w, j * k + kk, n * k), acc));
        }
      } else {
        for (int64_t kk = 0; kk < k; ++kk) {
          float wv = w[j * k + kk];
          if (dtype == WeightDtype::kBf16) wv = FloatFromBf16(Bf16FromFloat(wv));
          acc = std::fma(x[i * k + kk], wv, acc);
        }
      }
      y[i * n + j] = y0 != nullptr ? (*y0)[i * n + j] + acc : acc;
    }
  }
  return y;
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_KERNELS_GEMM_TEST_UTIL_H_
