// The gated delta rule's CPU body (kernels/gated_delta.h): both forms against a float64
// token-by-token reference written from the definition, the chunk grid, grouped heads, DeltaNet
// (no decay), batch invariance and shape errors.
#include "kernels/gated_delta.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/util/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/parallel.h"

namespace flatstate {
namespace {

struct Inputs {
  int Hk, Hv, Kd, Vd;
  int64_t T;
  std::vector<float> q, k, v, g, beta;  // rows: q/k [T][Hk*Kd], v [T][Hv*Vd], g/beta [T][Hv]
};

Inputs MakeInputs(int Hk, int Hv, int Kd, int Vd, int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Inputs in{Hk, Hv, Kd, Vd, T, {}, {}, {}, {}, {}};
  in.q.resize(T * Hk * Kd);
  in.k.resize(T * Hk * Kd);
  in.v.resize(T * Hv * Vd);
  in.g.resize(T * Hv);
  in.beta.resize(T * Hv);
  for (float& x : in.q) x = n(rng);
  for (float& x : in.k) x = n(rng);
  for (float& x : in.v) x = n(rng);
  // log decays as upstream makes them: -exp(A_log) * softplus(a + dt_bias), here in [-1.5, 0).
  for (float& x : in.g) x = -1.5f * u(rng) - 1e-3f;
  for (float& x : in.beta) x = u(rng);
  return in;
}

// float64, token by token, from the definition; S [Hv][Kd][Vd]; out [T][Hv*Vd].
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
      double nq = 0, nk = 0;
      for (int i = 0; i < in.Kd; ++i) nq += double(qt[i]) * qt[i], nk += double(kt[i]) * kt[i];
      std::vector<double> q(in.Kd), k(in.Kd), u(in.Vd, 0.0);
      for (int i = 0; i < in.Kd; ++i) {
        q[i] = qt[i] / std::sqrt(nq + 1e-6) * scale;
        k[i] = kt[i] / std::sqrt(nk + 1e-6);
      }
      const double e = decay ? std::exp(double(in.g[t * in.Hv + h])) : 1.0;
      const double beta = in.beta[t * in.Hv + h];
      for (int i = 0; i < in.Kd; ++i) {
        for (int j = 0; j < in.Vd; ++j) {
          Sh[i * in.Vd + j] *= e;
          u[j] += k[i] * Sh[i * in.Vd + j];
        }
      }
      for (int j = 0; j < in.Vd; ++j) u[j] = beta * (vt[j] - u[j]);
      double* o = out->data() + (t * in.Hv + h) * in.Vd;
      for (int i = 0; i < in.Kd; ++i) {
        for (int j = 0; j < in.Vd; ++j) {
          Sh[i * in.Vd + j] += k[i] * u[j];
          o[j] += q[i] * Sh[i * in.Vd + j];
        }
      }
    }
  }
}

// Runs sequences (each [rows of `in` from its first row, T]) through GatedDeltaRule<kCpu> in
// one batch, runs of length `run` at a time; states [seq][Hv][Kd][Vd].
struct OpRun {
  std::vector<float> out;
  std::vector<float> state;
};
OpRun RunOp(const Inputs& in, int64_t run, int chunk, bool decay, const Parallel& par,
          int copies = 1) {
  const int64_t state_floats = static_cast<int64_t>(in.Hv) * in.Kd * in.Vd;
  OpRun r;
  r.out.assign(copies * in.T * in.Hv * in.Vd, 0.f);
  r.state.assign(copies * state_floats, 0.f);
  for (int64_t t0 = 0; t0 < in.T; t0 += run) {
    const int64_t T = std::min(run, in.T - t0);
    std::vector<LinearSeq> decode, prefill;
    for (int c = 0; c < copies; ++c) {
      LinearSeq s;
      s.row = t0;  // every copy reads the same rows
      s.T = T;
      s.pos0 = t0;
      s.state = r.state.data() + c * state_floats;
      (T == 1 ? decode : prefill).push_back(s);
    }
    // Each copy writes its own output block: run the copies one batch, outputs offset per copy.
    for (int c = 0; c < copies; ++c) {
      GatedDeltaBatch b;
      b.key_heads = in.Hk;
      b.value_heads = in.Hv;
      b.key_dim = in.Kd;
      b.value_dim = in.Vd;
      b.scale = 1.f / std::sqrt(static_cast<float>(in.Kd));
      b.q = in.q.data();
      b.k = in.k.data();
      b.qk_stride = int64_t{in.Hk} * in.Kd;
      b.v = in.v.data();
      b.v_stride = int64_t{in.Hv} * in.Vd;
      b.g = decay ? in.g.data() : nullptr;
      b.beta = in.beta.data();
      b.gb_stride = in.Hv;
      b.out = r.out.data() + c * in.T * in.Hv * in.Vd;
      b.out_stride = int64_t{in.Hv} * in.Vd;
      b.chunk = chunk;
      std::vector<LinearSeq>& list = T == 1 ? decode : prefill;
      (T == 1 ? b.decode : b.prefill) = list.data() + c;
      (T == 1 ? b.num_decode : b.num_prefill) = 1;
      GatedDeltaRule<Device::kCpu>(b, par);
    }
  }
  return r;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(GatedDelta, BothFormsMatchTheFloat64Definition) {
  SerialParallel serial;
  for (auto [Hk, Hv, Kd, Vd] : {std::tuple{1, 1, 16, 16}, {2, 4, 32, 24}, {1, 3, 8, 40}}) {
    const Inputs in = MakeInputs(Hk, Hv, Kd, Vd, 150, 7 + Kd);
    for (bool decay : {true, false}) {
      std::vector<double> S(static_cast<size_t>(Hv) * Kd * Vd, 0.0), out;
      Reference(in, decay, &S, &out);
      // Token by token (the recurrent form), and whole runs (the chunked form, chunks 16 / 64).
      for (auto [run, chunk] : {std::pair<int64_t, int>{1, 64}, {150, 16}, {150, 64}, {37, 64}}) {
        const OpRun r = RunOp(in, run, chunk, decay, serial);
        // fp32 against float64 over 150 tokens of a contracting recurrence (|beta| <= 1, unit k).
        EXPECT_LT(MaxAbsDiff(r.out, out, out.size()), 2e-4)
            << "Hv " << Hv << " Kd " << Kd << " run " << run << " chunk " << chunk;
        EXPECT_LT(MaxAbsDiff(r.state, S, S.size()), 2e-4)
            << "state: Hv " << Hv << " Kd " << Kd << " run " << run << " chunk " << chunk;
      }
    }
  }
}

TEST(GatedDelta, SplittingAtChunkMultiplesChangesNoBit) {
  SerialParallel serial;
  const Inputs in = MakeInputs(2, 2, 16, 16, 128, 3);
  const OpRun whole = RunOp(in, 128, 32, true, serial);
  for (int64_t run : {32, 64}) {
    const OpRun split = RunOp(in, run, 32, true, serial);
    EXPECT_EQ(0, std::memcmp(whole.out.data(), split.out.data(), sizeof(float) * whole.out.size()))
        << run;
    EXPECT_EQ(
        0, std::memcmp(whole.state.data(), split.state.data(), sizeof(float) * whole.state.size()))
        << run;
  }
}

TEST(GatedDelta, NullDecayIsZeroLogDecay) {
  SerialParallel serial;
  Inputs in = MakeInputs(1, 2, 16, 16, 70, 5);
  const OpRun none = RunOp(in, 70, 64, false, serial);
  std::fill(in.g.begin(), in.g.end(), 0.f);
  const OpRun zero = RunOp(in, 70, 64, true, serial);
  EXPECT_EQ(0, std::memcmp(none.out.data(), zero.out.data(), sizeof(float) * none.out.size()));
  EXPECT_EQ(0,
            std::memcmp(none.state.data(), zero.state.data(), sizeof(float) * none.state.size()));
}

TEST(GatedDelta, ThreadsAndBatchChangeNoBit) {
  SerialParallel serial;
  PoolParallel pool(2);
  const Inputs in = MakeInputs(2, 4, 16, 16, 90, 9);
  for (int64_t run : {1, 90}) {
    const OpRun alone = RunOp(in, run, 64, true, serial);
    const OpRun many = RunOp(in, run, 64, true, pool, 3);
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(0, std::memcmp(alone.out.data(), many.out.data() + c * alone.out.size(),
                               sizeof(float) * alone.out.size()))
          << "copy " << c << " run " << run;
      EXPECT_EQ(0, std::memcmp(alone.state.data(), many.state.data() + c * alone.state.size(),
                               sizeof(float) * alone.state.size()))
          << "copy " << c << " run " << run;
    }
  }
}

TEST(GatedDelta, ShapeErrorsNameTheProblem) {
  EXPECT_EQ(CheckGatedDeltaShape<Device::kCpu>(2, 4, 128, 128, 64).code(), absl::StatusCode::kOk);
  const absl::Status heads = CheckGatedDeltaShape<Device::kCpu>(3, 4, 128, 128, 64);
  EXPECT_EQ(heads.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(heads.message().find("not a multiple of 3 key heads"), std::string::npos);
  const absl::Status dim = CheckGatedDeltaShape<Device::kCpu>(1, 1, 1024, 128, 64);
  EXPECT_NE(dim.message().find("head dimension 1024"), std::string::npos);
}

}  // namespace
}  // namespace flatstate
