// The chunked recurrences' small matrix product (kernels/cpu/small_matmul.h) against a float64
// definition: every part (full, lower inner, lower columns), accumulating or not, a transposed
// view, sizes with row and column tails; and a row's bits do not depend on how many rows are
// computed with it.
#include "kernels/cpu/small_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate::cpu {
namespace {

TEST(SmallMatMul, MatchesTheDefinitionInEveryPart) {
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.f, 1.f);
  for (auto [M, Nc, P] : {std::tuple{64, 64, 64}, {13, 37, 9}, {1, 16, 5}, {7, 3, 70}}) {
    std::vector<float> A(M * P), B(P * Nc), C0(M * Nc);
    for (float& x : A) x = n(rng);
    for (float& x : B) x = n(rng);
    for (float& x : C0) x = n(rng);
    for (bool acc : {false, true}) {
      for (MatMulPart part : {MatMulPart::kFull, MatMulPart::kInner, MatMulPart::kCols}) {
        // A's transposed view for kFull: A^T stored [P][M].
        std::vector<float> At(P * M);
        for (int i = 0; i < M; ++i) {
          for (int p = 0; p < P; ++p) At[p * M + i] = A[i * P + p];
        }
        const MatView view =
            part == MatMulPart::kFull ? MatView{At.data(), 1, M} : MatView{A.data(), P, 1};
        std::vector<float> C = C0;
        SmallMatMul(M, Nc, P, view, B.data(), Nc, C.data(), Nc, acc, part);
        for (int i = 0; i < M; ++i) {
          const int i1 = std::min(M, (i / kMatMulRows + 1) * kMatMulRows);
          for (int j = 0; j < Nc; ++j) {
            double want = acc ? C0[i * Nc + j] : 0.0;
            const int inner = part == MatMulPart::kInner ? std::min(P, i1) : P;
            for (int p = 0; p < inner; ++p) want += double(A[i * P + p]) * B[p * Nc + j];
            const int cols = (i1 + kMatMulCols - 1) / kMatMulCols * kMatMulCols;
            if (part == MatMulPart::kCols && j >= cols) want = C0[i * Nc + j];
            EXPECT_NEAR(C[i * Nc + j], want, 1e-4 * (1 + std::abs(want)))
                << M << "x" << Nc << "x" << P << " (" << i << ", " << j << ") part "
                << static_cast<int>(part) << " acc " << acc;
          }
        }
      }
    }
  }
}

TEST(SmallMatMul, ARowsBitsDoNotDependOnTheOtherRows) {
  std::mt19937 rng(2);
  std::normal_distribution<float> n(0.f, 1.f);
  const int M = 20, Nc = 40, P = 33;
  std::vector<float> A(M * P), B(P * Nc);
  for (float& x : A) x = n(rng);
  for (float& x : B) x = n(rng);
  std::vector<float> all(M * Nc);
  SmallMatMul(M, Nc, P, MatView{A.data(), P, 1}, B.data(), Nc, all.data(), Nc, false,
              MatMulPart::kFull);
  for (int i = 0; i < M; ++i) {
    std::vector<float> one(Nc);
    SmallMatMul(1, Nc, P, MatView{A.data() + i * P, P, 1}, B.data(), Nc, one.data(), Nc, false,
                MatMulPart::kFull);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + i * Nc, sizeof(float) * Nc)) << i;
  }
}

}  // namespace
}  // namespace flatstate::cpu
