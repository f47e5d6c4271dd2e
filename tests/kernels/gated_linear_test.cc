// The gated linear recurrence's CPU body (kernels/gated_linear.h): both forms against a float64
// token-by-token definition (per-key and per-head decay, grouped heads, no decay), the chunk
// grid, thread and batch invariance, shape errors.
#include "kernels/gated_linear.h"

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "engine/util/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/parallel.h"

namespace flatstate {
namespace {

struct Inputs {
  int Hk, Hv, Kd, Vd;
  int64_t T;
  bool per_key;
  std::vector<float> q, k, v, g;  // q/k [T][Hk*Kd], v [T][Hv*Vd], g [T][Hv*Kd] or [T][Hv]
  int64_t g_stride() const { return per_key ? int64_t{Hv} * Kd : Hv; }
};

Inputs MakeInputs(int Hk, int Hv, int Kd, int Vd, int64_t T, bool per_key, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Inputs in{Hk, Hv, Kd, Vd, T, per_key, {}, {}, {}, {}};
  in.q.resize(T * Hk * Kd);
  in.k.resize(T * Hk * Kd);
  in.v.resize(T * Hv * Vd);
  in.g.resize(T * in.g_stride());
  for (float& x : in.q) x = n(rng);
  for (float& x : in.k) x = n(rng) * 0.3f;
  for (float& x : in.v) x = n(rng);
  for (float& x : in.g) x = std::log(0.5f + 0.5f * u(rng));  // GLA-like decays in [0.5, 1)
  return in;
}

double Decay(const Inputs& in, int64_t t, int h, int i) {
  return in.per_key ? in.g[t * in.g_stride() + h * in.Kd + i] : in.g[t * in.g_stride() + h];
}

// float64, token by token; S [Hv][Kd][Vd]; out [T][Hv*Vd].
void Reference(const Inputs& in, bool decay, std::vector<double>* S, std::vector<double>* out) {
  const int group = in.Hv / in.Hk;
  const double scale = 1.0 / std::sqrt(static_cast<double>(in.Kd));
  out->assign(in.T * in.Hv * in.Vd, 0.0);
  for (int h = 0; h < in.Hv; ++h) {
    double* Sh = S->data() + static_cast<size_t>(h) * in.Kd * in.Vd;
    for (int64_t t = 0; t < in.T; ++t) {
      const float* qt = in.q.data() + (t * in.Hk + h / group) * in.Kd;
      const float* kt = in.k.data() + (t * in.Hk + h / group) * in.Kd;
      const float* vt = in.v.data() + (t * in.Hv + h) * in.Vd;
      double* o = out->data() + (t * in.Hv + h) * in.Vd;
      for (int i = 0; i < in.Kd; ++i) {
        const double e = decay ? std::exp(Decay(in, t, h, i)) : 1.0;
        for (int j = 0; j < in.Vd; ++j) {
          Sh[i * in.Vd + j] = e * Sh[i * in.Vd + j] + double(kt[i]) * vt[j];
          o[j] += qt[i] * scale * Sh[i * in.Vd + j];
        }
      }
    }
  }
}

struct OpRun {
  std::vector<float> out, state;
};

// Runs `copies` sequences over the same rows in one batch per run of `run` tokens.
OpRun RunOp(const Inputs& in, int64_t run, int chunk, bool decay, const Parallel& par,
            int copies = 1) {
  const int64_t state_floats = static_cast<int64_t>(in.Hv) * in.Kd * in.Vd;
  const int64_t out_floats = in.T * in.Hv * in.Vd;
  OpRun r;
  r.out.assign(copies * out_floats, 0.f);
  r.state.assign(copies * state_floats, 0.f);
  for (int64_t t0 = 0; t0 < in.T; t0 += run) {
    const int64_t T = std::min(run, in.T - t0);
    for (int c = 0; c < copies; ++c) {
      LinearSeq s;
      s.row = t0;
      s.T = T;
      s.pos0 = t0;
      s.state = r.state.data() + c * state_floats;
      GatedLinearBatch b;
      b.key_heads = in.Hk;
      b.value_heads = in.Hv;
      b.key_dim = in.Kd;
      b.value_dim = in.Vd;
      b.scale = 1.f / std::sqrt(static_cast<float>(in.Kd));
      b.per_key_decay = in.per_key;
      b.q = in.q.data();
      b.k = in.k.data();
      b.qk_stride = int64_t{in.Hk} * in.Kd;
      b.v = in.v.data();
      b.v_stride = int64_t{in.Hv} * in.Vd;
      b.g = decay ? in.g.data() : nullptr;
      b.g_stride = in.g_stride();
      b.out = r.out.data() + c * out_floats;
      b.out_stride = int64_t{in.Hv} * in.Vd;
      b.chunk = chunk;
      (T == 1 ? b.decode : b.prefill) = &s;
      (T == 1 ? b.num_decode : b.num_prefill) = 1;
      GatedLinear<Device::kCpu>(b, par);
    }
  }
  return r;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(GatedLinear, BothFormsMatchTheFloat64Definition) {
  SerialParallel serial;
  for (bool per_key : {true, false}) {
    for (auto [Hk, Hv, Kd, Vd] : {std::tuple{1, 1, 16, 16}, {2, 4, 32, 24}, {1, 3, 8, 40}}) {
      const Inputs in = MakeInputs(Hk, Hv, Kd, Vd, 150, per_key, 11 + Kd);
      for (bool decay : {true, false}) {
        std::vector<double> S(static_cast<size_t>(Hv) * Kd * Vd, 0.0), out;
        Reference(in, decay, &S, &out);
        double range = 0;
        for (double x : out) range = std::max(range, std::abs(x));
        for (auto [run, chunk] : {std::pair<int64_t, int>{1, 64}, {150, 16}, {150, 64}, {37, 64}}) {
          const OpRun r = RunOp(in, run, chunk, decay, serial);
          // Without decay the state grows with t: compare relative to the outputs' range.
          EXPECT_LT(MaxAbsDiff(r.out, out) / range, 2e-5)
              << "per_key " << per_key << " decay " << decay << " Hv " << Hv << " run " << run
              << " chunk " << chunk;
          EXPECT_LT(MaxAbsDiff(r.state, S) / range, 2e-5) << "state";
        }
      }
    }
  }
}

TEST(GatedLinear, SplittingAtChunkMultiplesChangesNoBit) {
  SerialParallel serial;
  for (bool per_key : {true, false}) {
    const Inputs in = MakeInputs(2, 2, 16, 16, 128, per_key, 3);
    const OpRun whole = RunOp(in, 128, 32, true, serial);
    for (int64_t run : {32, 64}) {
      const OpRun split = RunOp(in, run, 32, true, serial);
      EXPECT_EQ(0,
                std::memcmp(whole.out.data(), split.out.data(), sizeof(float) * whole.out.size()));
      EXPECT_EQ(0, std::memcmp(whole.state.data(), split.state.data(),
                               sizeof(float) * whole.state.size()));
    }
  }
}

TEST(GatedLinear, ThreadsAndBatchChangeNoBit) {
  SerialParallel serial;
  PoolParallel pool(2);
  const Inputs in = MakeInputs(2, 4, 16, 16, 90, true, 9);
  for (int64_t run : {1, 90}) {
    const OpRun alone = RunOp(in, run, 64, true, serial);
    const OpRun many = RunOp(in, run, 64, true, pool, 3);
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(0, std::memcmp(alone.out.data(), many.out.data() + c * alone.out.size(),
                               sizeof(float) * alone.out.size()));
      EXPECT_EQ(0, std::memcmp(alone.state.data(), many.state.data() + c * alone.state.size(),
                               sizeof(float) * alone.state.size()));
    }
  }
}

TEST(GatedLinear, ShapeErrorsNameTheProblem) {
  EXPECT_TRUE(CheckGatedLinearShape<Device::kCpu>(1, 8, 128, 64, 64).ok());
  const absl::Status heads = CheckGatedLinearShape<Device::kCpu>(3, 4, 64, 64, 64);
  EXPECT_NE(heads.message().find("not a multiple of 3 key heads"), std::string::npos);
  const absl::Status dim = CheckGatedLinearShape<Device::kCpu>(1, 1, 64, 0, 64);
  EXPECT_NE(dim.message().find("head dimension 0"), std::string::npos);
}

}  // namespace
}  // namespace flatstate
