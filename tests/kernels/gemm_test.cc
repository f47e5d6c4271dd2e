// Gemm is row-invariant: a row's result is bit-identical whatever the number of rows in the call,
// wherever the row sits, and however many threads run it. Checked for every shape the shipped
// (d=128) and benchmark (GPT-2-small) models use.
#include "kernels/gemm.h"

#include <cmath>
#include <cstring>
#include <tuple>
#include <random>
#include <vector>

#include "engine/util/thread_pool.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

class PoolParallel final : public Parallel {
 public:
  explicit PoolParallel(int n) : pool_(n) {}
  int num_threads() const override { return pool_.num_threads(); }
  void For(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    const_cast<ThreadPool&>(pool_).ParallelFor(n, fn);
  }

 private:
  ThreadPool pool_;
};

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct Shape {
  int64_t k, n;
};

class GemmInvariance : public ::testing::TestWithParam<Shape> {};

TEST_P(GemmInvariance, RowsDoNotDependOnBatch) {
  const auto [k, n] = GetParam();
  const int64_t max_m = 100;
  const auto w = Random(n * k, 1), x = Random(max_m * k, 2);
  SerialParallel serial;
  PoolParallel pool(2);
  const auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), n, k);
  ASSERT_TRUE(gw.ok()) << gw.status();
  std::vector<float> alone(max_m * n);
  for (int64_t r = 0; r < max_m; ++r) {
    Gemm<Device::kCpu>(x.data() + r * k, 1, *gw, alone.data() + r * n, false, serial);
  }
  for (int64_t m : {2, 3, 7, 16, 17, 33, 40, 99}) {
    for (const Parallel* par : {static_cast<const Parallel*>(&serial),
                                static_cast<const Parallel*>(&pool)}) {
      // Rows 0..m-1 in one call, and the same rows shifted by one position.
      std::vector<float> y(m * n), y2((m + 1) * n);
      Gemm<Device::kCpu>(x.data(), m, *gw, y.data(), false, *par);
      std::vector<float> shifted((m + 1) * k, 0.5f);
      std::memcpy(shifted.data() + k, x.data(), sizeof(float) * m * k);
      Gemm<Device::kCpu>(shifted.data(), m + 1, *gw, y2.data(), false, *par);
      for (int64_t r = 0; r < m; ++r) {
        ASSERT_EQ(0, std::memcmp(y.data() + r * n, alone.data() + r * n, sizeof(float) * n))
            << "k=" << k << " n=" << n << " m=" << m << " row " << r;
        ASSERT_EQ(0, std::memcmp(y2.data() + (r + 1) * n, alone.data() + r * n,
                                 sizeof(float) * n))
            << "shifted: k=" << k << " n=" << n << " m=" << m << " row " << r;
      }
    }
  }
}

TEST_P(GemmInvariance, AccumulateAddsToOutput) {
  const auto [k, n] = GetParam();
  const auto w = Random(n * k, 3), x = Random(3 * k, 4);
  SerialParallel serial;
  const auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), n, k);
  ASSERT_TRUE(gw.ok()) << gw.status();
  std::vector<float> y(3 * n), base = Random(3 * n, 5), acc = base;
  Gemm<Device::kCpu>(x.data(), 3, *gw, y.data(), false, serial);
  Gemm<Device::kCpu>(x.data(), 3, *gw, acc.data(), true, serial);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(acc[i], base[i] + y[i]);
  // And the values are a real product: compare one element to a double dot product.
  double ref = 0;
  for (int64_t i = 0; i < k; ++i) ref += double(x[k + i]) * w[(n - 1) * k + i];
  EXPECT_NEAR(y[n + n - 1], ref, 1e-3 * (1 + std::abs(ref)));
}

// Every output element is the in-order fma chain of kernels/gemm.h, bit for bit, on every body
// this CPU has; ragged shapes cover partial panels and row blocks, m up to 200 crosses the
// 96-row tiles, and two threads split the tiles.
TEST(GemmBodies, EveryBodyComputesTheInOrderFmaChain) {
  const GemmIsa best = BestGemmIsa();
  std::vector<GemmIsa> bodies = {GemmIsa::kScalar};
  if (SetGemmIsa(GemmIsa::kAvx2)) bodies.push_back(GemmIsa::kAvx2);
  if (SetGemmIsa(GemmIsa::kAvx512)) bodies.push_back(GemmIsa::kAvx512);
  SerialParallel serial;
  PoolParallel pool(2);
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 384}, {5, 37, 100},
                         {13, 64, 64}, {200, 129, 130}, {7, 1, 65}, {97, 300, 20}}) {
    const auto x = Random(m * k, 11), w = Random(n * k, 12), y0 = Random(m * n, 13);
    std::vector<float> want(m * n), want_acc(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.f;
        for (int64_t kk = 0; kk < k; ++kk) acc = std::fma(x[i * k + kk], w[j * k + kk], acc);
        want[i * n + j] = acc;
        want_acc[i * n + j] = y0[i * n + j] + acc;
      }
    }
    const PackedWeight packed = PackedWeight::Pack(w.data(), n, k);
    for (GemmIsa isa : bodies) {
      ASSERT_TRUE(SetGemmIsa(isa));
      for (const Parallel* par : {static_cast<const Parallel*>(&serial),
                                  static_cast<const Parallel*>(&pool)}) {
        std::vector<float> y(m * n, -1.f), acc = y0;
        GemmPacked(x.data(), m, packed, y.data(), false, *par);
        GemmPacked(x.data(), m, packed, acc.data(), true, *par);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * m * n))
            << GemmIsaName(isa) << " m=" << m << " k=" << k << " n=" << n;
        EXPECT_EQ(0, std::memcmp(acc.data(), want_acc.data(), sizeof(float) * m * n))
            << GemmIsaName(isa) << " accumulate m=" << m << " k=" << k << " n=" << n;
      }
    }
  }
  ASSERT_TRUE(SetGemmIsa(best));
}

TEST(GemmBodies, BestBodyIsSelectedByDefault) {
  EXPECT_EQ(ActiveGemmIsa(), BestGemmIsa()) << GemmIsaName(ActiveGemmIsa());
  RecordProperty("gemm_isa", GemmIsaName(BestGemmIsa()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmInvariance,
                         ::testing::Values(Shape{128, 384}, Shape{128, 128}, Shape{128, 512},
                                           Shape{512, 128}, Shape{128, 256}, Shape{768, 2304},
                                           Shape{768, 768}, Shape{768, 3072}, Shape{3072, 768},
                                           Shape{768, 256}));

}  // namespace
}  // namespace flatstate
