// The integer GEMMs' activation quantisation (kernels/cpu/quant_rows.cc): every ISA's body gives
// the scalar definition's quants, scales and sums bit for bit, on blocks built to hit its edges
// (ties at .5, values whose quotient rounds past 127, zero blocks, -0, subnormals, Inf and NaN,
// a partial last block), and a row's quantisation does not depend on the other rows or threads.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/gemm.h"
#include "tests/kernels/gemm_test_util.h"

namespace flatstate::testing {
namespace {

// Rows of k values, each 32-block of one kind.
std::vector<float> EdgeRows(int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> kind(0, 8), step(-127, 127);
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b0 = 0; b0 < k; b0 += 32) {
      const int which = kind(rng);
      const float unit = std::ldexp(1.f, static_cast<int>(rng() % 40) - 20);
      for (int64_t t = b0; t < std::min(k, b0 + 32); ++t) {
        float& v = x[static_cast<size_t>(r * k + t)];
        switch (which) {
          case 0:  // a max of 127 units and halves between: x / scale lands on ties
            v = t == b0 ? 127.f * unit : (static_cast<float>(step(rng)) + 0.5f) * unit;
            break;
          case 1:
            v = rng() % 2 == 0 ? 0.f : -0.f;
            break;
          case 2:  // subnormals
            v = std::bit_cast<float>(static_cast<uint32_t>(rng() % 0x7fffff + 1)) *
                (rng() % 2 == 0 ? 1.f : -1.f);
            break;
          case 3:
            v = normal(rng) * 3e38f;  // huge, some Inf
            break;
          case 4:
            v = t == b0 + 7 ? std::numeric_limits<float>::quiet_NaN() : normal(rng);
            break;
          case 5:
            v = t == b0 + 31 ? -std::numeric_limits<float>::infinity() : normal(rng);
            break;
          default:
            v = normal(rng) * unit;
        }
      }
    }
  }
  return x;
}

TEST(QuantRows, EveryBodyGivesTheDefinitionsBits) {
  SerialParallel serial;
  for (int64_t k : {32, 64, 768, 3072, 100, 31}) {
    const int64_t m = 40;
    const std::vector<float> x = EdgeRows(m, k, static_cast<uint32_t>(k));
    cpu::QuantRows want;
    want.Fill(x.data(), m, k, serial, GemmIsa::kScalar);
    // The definition itself, block by block.
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t b = 0; b < want.nb; ++b) {
        int8_t q[32];
        const float s =
            QuantizeBlockInt8(x.data() + r * k + b * 32, std::min<int64_t>(32, k - b * 32), q);
        const int64_t i = r * want.nb + b;
        ASSERT_EQ(std::bit_cast<uint32_t>(s), std::bit_cast<uint32_t>(want.s[i]));
        int32_t sum = 0;
        for (int t = 0; t < 32; ++t) {
          ASSERT_EQ(q[t], want.q[i * 32 + t]);
          sum += q[t];
        }
        ASSERT_EQ(sum, want.sum[i]);
      }
    }
    for (GemmIsa isa : CpuBodies()) {
      for (int threads : {1, 2}) {
        PoolParallel pool(threads);
        cpu::QuantRows got;
        got.Fill(x.data(), m, k, pool, isa);
        const std::string label = std::string(GemmIsaName(isa)) + " k=" + std::to_string(k) +
                                  " threads=" + std::to_string(threads);
        ASSERT_EQ(got.nb, want.nb) << label;
        ASSERT_EQ(got.q, want.q) << label;
        ASSERT_EQ(got.sum, want.sum) << label;
        ASSERT_EQ(got.s.size(), want.s.size()) << label;
        for (size_t i = 0; i < want.s.size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got.s[i]), std::bit_cast<uint32_t>(want.s[i]))
              << label << " block " << i;
        }
      }
    }
  }
}

TEST(QuantRows, ARowDoesNotDependOnTheOthers) {
  const int64_t k = 768;
  const std::vector<float> x = EdgeRows(33, k, 7);
  PoolParallel pool(2);
  for (GemmIsa isa : CpuBodies()) {
    cpu::QuantRows all, one;
    all.Fill(x.data(), 33, k, pool, isa);
    one.Fill(x.data() + 17 * k, 1, k, pool, isa);
    for (int64_t i = 0; i < one.nb * 32; ++i) {
      ASSERT_EQ(one.q[i], all.q[17 * one.nb * 32 + i]) << GemmIsaName(isa);
    }
    for (int64_t b = 0; b < one.nb; ++b) {
      ASSERT_EQ(std::bit_cast<uint32_t>(one.s[b]), std::bit_cast<uint32_t>(all.s[17 * one.nb + b]));
    }
  }
}

}  // namespace
}  // namespace flatstate::testing
