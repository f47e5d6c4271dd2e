// RWKV-7's generalized delta rule on the CPU (kernels/rwkv7.h): the op (the recurrent form) and
// the chunked form (Rwkv7ChunkCpu, the CUDA prefill's math) against a float64 token-by-token
// reference written from the definition, and against each other, across chunk boundaries and
// lengths off the grid, with RWKV-7's decays and with extreme ones (near 0 and near 1, and single
// tokens that cut a chunk); the op's runs split anywhere and the chunk grid; batch and thread
// invariance.
#include "kernels/rwkv7.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/util/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/parallel.h"

namespace flatstate {
namespace {

enum class Decays { kRwkv7, kExtreme };

// Rows [T][H*N] of r, k, v, logw, kk, a as the mixer makes them (kk unit per head, a in (0, 1)).
struct Inputs {
  int H, N;
  int64_t T;
  std::vector<float> r, k, v, lw, kk, a;
};

Inputs MakeInputs(int H, int N, int64_t T, Decays decays, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Inputs in{H, N, T, {}, {}, {}, {}, {}, {}};
  const size_t size = static_cast<size_t>(T) * H * N;
  for (auto* x : {&in.r, &in.k, &in.v, &in.lw, &in.kk, &in.a}) x->resize(size);
  for (size_t i = 0; i < size; ++i) {
    in.r[i] = n(rng);
    in.k[i] = n(rng);
    in.v[i] = n(rng);
    in.kk[i] = n(rng);
    in.a[i] = u(rng);
    // RWKV-7: logw = -e^{-1/2} sigmoid(x), in (-0.607, 0).
    in.lw[i] = -0.6065306597f * u(rng);
  }
  if (decays == Decays::kExtreme) {
    // Per channel: decays near 1 (log w ~ -1e-6), near 0 (log w in [-12, -8]) and RWKV-7's; and
    // every 23rd token one channel with log w = -60 (alone past the chunk's bound: a cut).
    for (int64_t t = 0; t < T; ++t) {
      for (int c = 0; c < H * N; ++c) {
        float& x = in.lw[t * H * N + c];
        if (c % 3 == 0) x = -1e-6f * u(rng);
        if (c % 3 == 1) x = -8.f - 4.f * u(rng);
      }
      if (t % 23 == 5) in.lw[t * H * N + (t % (H * N))] = -60.f;
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      float* kk = in.kk.data() + (t * H + h) * N;
      double n2 = 0;
      for (int i = 0; i < N; ++i) n2 += double(kk[i]) * kk[i];
      for (int i = 0; i < N; ++i) kk[i] = static_cast<float>(kk[i] / std::sqrt(n2));
    }
  }
  return in;
}

// float64, token by token, from the definition; S [H][N][N] from zero; out [T][H*N].
void Reference(const Inputs& in, std::vector<double>* S, std::vector<double>* out) {
  const int N = in.N, D = in.H * in.N;
  S->assign(static_cast<size_t>(in.H) * N * N, 0.0);
  out->assign(in.T * D, 0.0);
  std::vector<double> u(N);
  for (int h = 0; h < in.H; ++h) {
    double* Sh = S->data() + static_cast<size_t>(h) * N * N;
    for (int64_t t = 0; t < in.T; ++t) {
      const size_t off = t * D + h * N;
      std::fill(u.begin(), u.end(), 0.0);
      for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) u[j] += double(in.kk[off + i]) * Sh[i * N + j];
      }
      for (int i = 0; i < N; ++i) {
        const double w = std::exp(double(in.lw[off + i]));
        const double ka = double(in.kk[off + i]) * in.a[off + i];
        for (int j = 0; j < N; ++j) {
          double& s = Sh[i * N + j];
          s = w * s - ka * u[j] + double(in.k[off + i]) * in.v[off + j];
          (*out)[off + j] += double(in.r[off + i]) * s;
        }
      }
    }
  }
}

struct OpRun {
  std::vector<float> out, state;
};

// Rwkv7Recurrence<kCpu> over the tokens in runs of `run` (1: decode, token by token), `copies`
// sequences reading the same rows in one batch, each with its own state and output block.
OpRun RunOp(const Inputs& in, int64_t run, int chunk, const Parallel& par, int copies = 1) {
  const int64_t D = int64_t{in.H} * in.N, state = D * in.N;
  OpRun r;
  r.out.assign(copies * in.T * D, 0.f);
  r.state.assign(copies * state, 0.f);
  for (int64_t t0 = 0; t0 < in.T; t0 += run) {
    const int64_t T = std::min(run, in.T - t0);
    std::vector<LinearSeq> seqs(copies);
    for (int c = 0; c < copies; ++c) {
      seqs[c].row = t0;
      seqs[c].T = T;
      seqs[c].pos0 = t0;
      seqs[c].state = r.state.data() + c * state;
    }
    for (int c = 0; c < copies; ++c) {
      Rwkv7Batch b;
      b.key_heads = b.value_heads = in.H;
      b.key_dim = b.value_dim = in.N;
      b.q = in.r.data();
      b.k = in.k.data();
      b.qk_stride = D;
      b.v = in.v.data();
      b.v_stride = D;
      b.logw = in.lw.data();
      b.kk = in.kk.data();
      b.a = in.a.data();
      b.wka_stride = D;
      b.out = r.out.data() + c * in.T * D;
      b.out_stride = D;
      b.chunk = chunk;
      (T == 1 ? b.decode : b.prefill) = seqs.data() + c;
      (T == 1 ? b.num_decode : b.num_prefill) = 1;
      Rwkv7Recurrence<Device::kCpu>(b, par);
    }
  }
  return r;
}

// Rwkv7ChunkCpu (the chunked form; the op runs the recurrent one) over each head, the tokens in
// runs of `run` on the grid of `chunk`.
OpRun RunChunked(const Inputs& in, int64_t run, int chunk) {
  const int64_t D = int64_t{in.H} * in.N;
  OpRun r;
  r.out.assign(in.T * D, 0.f);
  r.state.assign(D * in.N, 0.f);
  std::vector<float> scratch(Rwkv7Scratch(in.N, std::min(run, in.T), chunk));
  for (int h = 0; h < in.H; ++h) {
    for (int64_t t0 = 0; t0 < in.T; t0 += run) {
      const int64_t T = std::min(run, in.T - t0), off = t0 * D + int64_t{h} * in.N;
      const Rwkv7HeadRows x{in.r.data() + off,
                            in.k.data() + off,
                            in.v.data() + off,
                            in.lw.data() + off,
                            in.kk.data() + off,
                            in.a.data() + off,
                            r.out.data() + off,
                            D,
                            D,
                            D,
                            D};
      Rwkv7ChunkCpu(in.N, x, T, t0, chunk, r.state.data() + int64_t{h} * in.N * in.N,
                    scratch.data());
    }
  }
  return r;
}

// max |a - b| / max(1, max |b|); infinity when a holds a NaN or an infinity.
template <typename T>
double RelErr(const std::vector<float>& a, const std::vector<T>& b) {
  double m = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return m / scale;
}

bool SameBits(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, sizeof(float) * a.size()) == 0;
}

TEST(Rwkv7, BothFormsMatchTheFloat64Definition) {
  SerialParallel serial;
  for (Decays decays : {Decays::kRwkv7, Decays::kExtreme}) {
    for (auto [H, N, T] : {std::tuple{3, 64, int64_t{200}}, {2, 32, 130}, {1, 24, 65}}) {
      const Inputs in = MakeInputs(H, N, T, decays, 11 + N);
      std::vector<double> S, out;
      Reference(in, &S, &out);
      const std::string what = std::string(decays == Decays::kRwkv7 ? "rwkv7" : "extreme") +
                               " decays, N " + std::to_string(N) + " T " + std::to_string(T);
      const OpRun steps = RunOp(in, 1, 64, serial);
      // fp32 against float64 over up to 200 tokens of a contracting recurrence.
      EXPECT_LT(RelErr(steps.out, out), 1e-5) << "recurrent, " << what;
      EXPECT_LT(RelErr(steps.state, S), 1e-5) << "recurrent state, " << what;
      // The op (the recurrent form) over whole runs: the same bits as token by token.
      const OpRun whole = RunOp(in, T, 64, serial);
      EXPECT_TRUE(SameBits(whole.out, steps.out.data())) << what;
      EXPECT_TRUE(SameBits(whole.state, steps.state.data())) << what;
      // The chunked form: whole runs (chunks 16 / 64 / 256) and runs off the grid (37: 37 tokens
      // then 27 + 10 ...).
      for (auto [run, chunk] : {std::pair<int64_t, int>{T, 64}, {T, 16}, {T, 256}, {37, 64}}) {
        const OpRun r = RunChunked(in, run, chunk);
        EXPECT_LT(RelErr(r.out, out), 1e-5) << "chunked " << run << "/" << chunk << ", " << what;
        EXPECT_LT(RelErr(r.state, S), 1e-5)
            << "chunked state " << run << "/" << chunk << ", " << what;
        EXPECT_LT(RelErr(r.out, steps.out), 1e-5)
            << "forms " << run << "/" << chunk << ", " << what;
      }
    }
  }
}

TEST(Rwkv7, StrongDecaysOnEveryChannelCutChunksAndStayExact) {
  // log w = -2 on every channel: 64 tokens compound to e^-128, past the chunked form's bound
  // (e^-48), so each chunk runs as pieces of 24; and log w = -100: pieces of one token.
  SerialParallel serial;
  for (float lw : {-2.f, -100.f}) {
    Inputs in = MakeInputs(2, 32, 100, Decays::kRwkv7, 5);
    std::fill(in.lw.begin(), in.lw.end(), lw);
    std::vector<double> S, out;
    Reference(in, &S, &out);
    for (const OpRun& r : {RunChunked(in, 100, 64), RunOp(in, 100, 64, serial)}) {
      EXPECT_LT(RelErr(r.out, out), 1e-5) << lw;
      EXPECT_LT(RelErr(r.state, S), 1e-5) << lw;
      for (float x : r.out) ASSERT_TRUE(std::isfinite(x)) << lw;
    }
  }
}

TEST(Rwkv7, SplittingAtChunkMultiplesChangesNoBit) {
  for (Decays decays : {Decays::kRwkv7, Decays::kExtreme}) {
    const Inputs in = MakeInputs(2, 32, 128, decays, 3);
    const OpRun whole = RunChunked(in, 128, 32);
    for (int64_t run : {32, 64}) {
      const OpRun split = RunChunked(in, run, 32);
      EXPECT_TRUE(SameBits(whole.out, split.out.data())) << run;
      EXPECT_TRUE(SameBits(whole.state, split.state.data())) << run;
    }
  }
}

// The op runs the recurrent form: a run split anywhere (head_dim 48: 16-float columns, and 40:
// two of them and 8 columns one at a time) gives the run's floats.
TEST(Rwkv7, TheOpSplitAnywhereChangesNoBit) {
  SerialParallel serial;
  for (int N : {48, 40}) {
    const Inputs in = MakeInputs(2, N, 100, Decays::kRwkv7, 4);
    const OpRun whole = RunOp(in, 100, 64, serial);
    for (int64_t run : {1, 7, 37}) {
      const OpRun split = RunOp(in, run, 64, serial);
      EXPECT_TRUE(SameBits(whole.out, split.out.data())) << N << " " << run;
      EXPECT_TRUE(SameBits(whole.state, split.state.data())) << N << " " << run;
    }
  }
}

TEST(Rwkv7, ThreadsAndBatchChangeNoBit) {
  SerialParallel serial;
  PoolParallel pool(2);
  const Inputs in = MakeInputs(4, 64, 90, Decays::kRwkv7, 9);
  for (int64_t run : {1, 90, 40}) {
    const OpRun alone = RunOp(in, run, 64, serial);
    const OpRun many = RunOp(in, run, 64, pool, 3);
    for (int c = 0; c < 3; ++c) {
      EXPECT_TRUE(SameBits(alone.out, many.out.data() + c * alone.out.size()))
          << "copy " << c << " run " << run;
      EXPECT_TRUE(SameBits(alone.state, many.state.data() + c * alone.state.size()))
          << "copy " << c << " run " << run;
    }
  }
}

TEST(Rwkv7, ShapeErrorsNameTheProblem) {
  EXPECT_TRUE(CheckRwkv7Shape<Device::kCpu>(12, 64).ok());
  const absl::Status bad = CheckRwkv7Shape<Device::kCpu>(12, 2048);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("12 heads of 2048"), std::string::npos);
}

}  // namespace
}  // namespace flatstate
