// The recurrent families' ops on a device against their CPU bodies: GatedDeltaRule, GatedLinear
// (the device's forms sum in other orders than the CPU's, so outputs and states agree within fp32
// tolerance, not bit for bit) and the recurrent gates. Instantiated for CUDA only; without a GPU
// every case is skipped with the reason (tests/kernels/device_test_util.h).
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gated_delta.h"
#include "kernels/gated_linear.h"
#include "kernels/parallel.h"
#include "kernels/recurrent_gates.h"
#include "kernels/rwkv7.h"
#include "tests/kernels/device_test_util.h"

namespace flatstate {
namespace {

using testing::DeviceArray;
using testing::ExpectClose;

std::vector<float> Random(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class DeviceRecurrent : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { FS_SKIP_UNLESS_DEVICE(GetParam()); }
};

// Two sequences (a 1-token decode and a `rows`-token prefill starting at absolute position
// `pos0`) over the same rows, 2 key / 4 value heads by default, chunk `chunk`; `run` calls the op
// on device d given (q, k, v, g, beta, kk, a, out, seqs, state).
struct RecurrentCase {
  RecurrentCase() = default;
  RecurrentCase(int hk, int hv, int kd, int vd, int64_t rows = 40, int64_t pos0 = 0, int chunk = 16)
      : kHk(hk), kHv(hv), kKd(kd), kVd(vd), kRows(rows), pos0(pos0), chunk(chunk) {}
  int kHk = 2, kHv = 4, kKd = 16, kVd = 24;
  int64_t kRows = 40, pos0 = 0;
  int chunk = 16;
  std::vector<float> q = Random(kRows * kHk * kKd, 1, -1, 1);
  std::vector<float> k = Random(kRows * kHk * kKd, 2, -1, 1);
  std::vector<float> v = Random(kRows * kHv * kVd, 3, -1, 1);
  std::vector<float> g = Random(kRows * kHv * kKd, 4, -0.7f, -0.01f);
  std::vector<float> beta = Random(kRows * kHv, 5, 0, 1);
  std::vector<float> state = Random(2 * kHv * kKd * kVd, 6, -0.5f, 0.5f);
  // RWKV-7's removal key (unit rows per value head) and in-context learning rate.
  std::vector<float> kk = UnitRows(kRows * kHv, kKd, 7);
  std::vector<float> a = Random(kRows * kHv * kKd, 8, 0, 1);

  static std::vector<float> UnitRows(int64_t rows, int dim, uint32_t seed) {
    std::vector<float> x = Random(rows * dim, seed, -1, 1);
    for (int64_t r = 0; r < rows; ++r) {
      double n = 0;
      for (int i = 0; i < dim; ++i) n += double(x[r * dim + i]) * x[r * dim + i];
      for (int i = 0; i < dim; ++i)
        x[r * dim + i] = static_cast<float>(x[r * dim + i] / std::sqrt(n));
    }
    return x;
  }
};

template <typename Batch, typename Fill, typename Op>
void CompareWithCpu(Device d, const RecurrentCase& c, Fill fill, Op op, const char* what) {
  auto run = [&](Device dev, std::vector<float>* out, std::vector<float>* state) {
    DeviceArray<float> q(dev, c.q), k(dev, c.k), v(dev, c.v), g(dev, c.g), beta(dev, c.beta),
        kk(dev, c.kk), a(dev, c.a);
    DeviceArray<float> st(dev, c.state);
    DeviceArray<float> o(dev, std::vector<float>(2 * c.kRows * c.kHv * c.kVd, 0.f));
    std::vector<LinearSeq> seqs(2);
    seqs[0].row = 0;
    seqs[0].T = 1;
    seqs[0].state = st.get();
    seqs[1].row = 0;
    seqs[1].T = c.kRows;
    seqs[1].pos0 = c.pos0;
    seqs[1].state = st.get() + c.kHv * c.kKd * c.kVd;
    DeviceArray<LinearSeq> sd(dev, seqs);
    Batch b;
    fill(&b, q.get(), k.get(), v.get(), g.get(), beta.get(), kk.get(), a.get());
    b.key_heads = c.kHk;
    b.value_heads = c.kHv;
    b.key_dim = c.kKd;
    b.value_dim = c.kVd;
    b.qk_stride = c.kHk * c.kKd;
    b.v_stride = c.kHv * c.kVd;
    b.out_stride = c.kHv * c.kVd;
    b.chunk = c.chunk;
    // Two calls, each with its own output base: the decode sequence writes row 0 of the first
    // half, the prefill sequence rows 0 .. kRows - 1 of the second.
    b.decode = sd.get();
    b.num_decode = 1;
    b.prefill = sd.get() + 1;
    b.num_prefill = 0;
    b.out = o.get();
    op(dev, b);
    b.num_decode = 0;
    b.num_prefill = 1;
    b.out = o.get() + c.kRows * c.kHv * c.kVd;
    op(dev, b);
    *out = o.ToHost();
    *state = st.ToHost();
  };
  std::vector<float> out_cpu, st_cpu, out_dev, st_dev;
  run(Device::kCpu, &out_cpu, &st_cpu);
  run(d, &out_dev, &st_dev);
  ExpectClose(out_dev, out_cpu, 1e-4, std::string(what) + " outputs");
  ExpectClose(st_dev, st_cpu, 1e-4, std::string(what) + " states");
}

// The CUDA body tiles value columns by 32 (both kernels) and key rows by 32 per warp (the
// recurrent one): the default case (16 x 24: one partial tile), Qwen3.5's heads (128 x 128: 4
// warps, 4 tiles), and 96 x 48 (3 warps, a partial second tile). The prefill runs the chunked
// kernel: chunk 16 over 40 tokens; Qwen3.5's heads at chunk 64 over 200 tokens from position 29
// (a short first chunk, full ones, a short last one); 256 x 64 (fla's gated_deltanet key width,
// the largest tile that fits on sm_90) at chunk 64 over 130 tokens.
TEST_P(DeviceRecurrent, GatedDeltaRuleMatchesCpu) {
  for (const RecurrentCase& c :
       {RecurrentCase(), RecurrentCase(1, 2, 128, 128), RecurrentCase(2, 2, 96, 48),
        RecurrentCase(1, 2, 128, 128, 200, 29, 64), RecurrentCase(2, 4, 256, 64, 130, 0, 64)}) {
    SCOPED_TRACE(::testing::Message() << "key_dim " << c.kKd << " value_dim " << c.kVd << " rows "
                                      << c.kRows << " pos0 " << c.pos0 << " chunk " << c.chunk);
    for (bool decay : {true, false}) {  // no decay: DeltaNet (g null)
      CompareWithCpu<GatedDeltaBatch>(
          GetParam(), c,
          [&](GatedDeltaBatch* b, float* q, float* k, float* v, float* g, float* beta, float*,
              float*) {
            b->scale = 0.25f;
            b->q = q;
            b->k = k;
            b->v = v;
            b->g = decay ? g : nullptr;
            b->beta = beta;
            b->gb_stride = c.kHv;
          },
          []([[maybe_unused]] Device dev, const GatedDeltaBatch& b) {
            SerialParallel serial;
            FS_ON_DEVICE(dev, GatedDeltaRule, b, serial);
          },
          decay ? "gated delta rule" : "delta rule (no decay)");
    }
  }
}

// The prefill runs the chunked kernel (keys in slices of 32, value columns in tiles of 32): the
// default case (chunk 16, one partial slice and tile), Mamba-2 130M's heads (state 128, head_dim
// 64, one key group) at chunk 64 over 200 tokens from position 29, 48 x 40 (a partial second
// slice and tile), fla GLA 1.3B's key width 256 with 80 value columns at chunk 64, and an engine
// chunk of 128 (the kernel halves it to 64; the CPU runs 128).
TEST_P(DeviceRecurrent, GatedLinearMatchesCpu) {
  for (const RecurrentCase& c :
       {RecurrentCase(), RecurrentCase(1, 2, 128, 64, 200, 29, 64), RecurrentCase(2, 4, 48, 40),
        RecurrentCase(2, 2, 256, 80, 130, 0, 64), RecurrentCase(1, 2, 128, 64, 300, 29, 128)}) {
    SCOPED_TRACE(::testing::Message() << "key_dim " << c.kKd << " value_dim " << c.kVd << " rows "
                                      << c.kRows << " pos0 " << c.pos0 << " chunk " << c.chunk);
    for (bool per_key : {true, false}) {
      CompareWithCpu<GatedLinearBatch>(
          GetParam(), c,
          [&](GatedLinearBatch* b, float* q, float* k, float* v, float* g, float*, float*, float*) {
            b->scale = 0.25f;
            b->per_key_decay = per_key;
            b->q = q;
            b->k = k;
            b->v = v;
            b->g = g;
            b->g_stride = per_key ? c.kHv * c.kKd : c.kHv;
          },
          []([[maybe_unused]] Device dev, const GatedLinearBatch& b) {
            SerialParallel serial;
            FS_ON_DEVICE(dev, GatedLinear, b, serial);
          },
          per_key ? "gated linear (per key)" : "gated linear (per head)");
    }
  }
}

// The chunked kernel's grid is absolute: a prefill split at multiples of its chunk computes the
// same floats as the whole run in one call (chunked prefill steps and prefix-cache snapshots
// rely on it). 200 tokens from position 29 at chunk 64: pieces of 35, 64 and 101 tokens.
TEST_P(DeviceRecurrent, GatedLinearChunkGridSplitIsBitExact) {
  const RecurrentCase c(1, 2, 128, 64, 200, 29, 64);
  for (bool per_key : {true, false}) {
    auto run = [&](const std::vector<int64_t>& pieces, std::vector<float>* out,
                   std::vector<float>* state) {
      DeviceArray<float> q(GetParam(), c.q), k(GetParam(), c.k), v(GetParam(), c.v),
          g(GetParam(), c.g);
      DeviceArray<float> st(GetParam(), c.state);
      DeviceArray<float> o(GetParam(), std::vector<float>(c.kRows * c.kHv * c.kVd, 0.f));
      GatedLinearBatch b;
      b.key_heads = c.kHk;
      b.value_heads = c.kHv;
      b.key_dim = c.kKd;
      b.value_dim = c.kVd;
      b.scale = 0.25f;
      b.per_key_decay = per_key;
      b.q = q.get();
      b.k = k.get();
      b.v = v.get();
      b.g = g.get();
      b.g_stride = per_key ? c.kHv * c.kKd : c.kHv;
      b.qk_stride = c.kHk * c.kKd;
      b.v_stride = c.kHv * c.kVd;
      b.out = o.get();
      b.out_stride = c.kHv * c.kVd;
      b.chunk = c.chunk;
      b.num_prefill = 1;
      int64_t row = 0;
      for (int64_t n : pieces) {
        LinearSeq sq;
        sq.row = row;
        sq.T = n;
        sq.pos0 = c.pos0 + row;
        sq.state = st.get();
        DeviceArray<LinearSeq> sd(GetParam(), {sq});
        b.prefill = sd.get();
        SerialParallel serial;
        FS_ON_DEVICE(GetParam(), GatedLinear, b, serial);
        st.ToHost();  // the op is asynchronous: done before sd is freed
        row += n;
      }
      *out = o.ToHost();
      *state = st.ToHost();
    };
    std::vector<float> out_whole, st_whole, out_split, st_split;
    run({200}, &out_whole, &st_whole);
    run({35, 64, 101}, &out_split, &st_split);
    EXPECT_EQ(out_whole, out_split) << "per_key " << per_key;
    EXPECT_EQ(st_whole, st_split) << "per_key " << per_key;
  }
}

// RWKV-7's generalized delta rule: the prefill runs the chunked kernel (cuda/rwkv7_chunk.cu) at
// head_dim 64 (RWKV-7's) over 150 tokens from position 29 and at 48 (a partial column tile)
// over 40 at chunk 16; log decays in RWKV-7's range, then strong ones (pieces cut where a
// channel's decay compounds past e^-48) and extreme ones (pieces of one and two tokens).
TEST_P(DeviceRecurrent, Rwkv7RecurrenceMatchesCpu) {
  for (RecurrentCase c : {RecurrentCase(2, 2, 64, 64, 150, 29, 64), RecurrentCase(2, 2, 48, 48)}) {
    for (auto [lo, hi] :
         {std::pair{-0.6f, -0.01f}, std::pair{-2.5f, -0.5f}, std::pair{-30.f, -20.f}}) {
      SCOPED_TRACE(::testing::Message()
                   << "head_dim " << c.kKd << " log decay in [" << lo << ", " << hi << "]");
      c.g = Random(c.g.size(), 9, lo, hi);
      CompareWithCpu<Rwkv7Batch>(
          GetParam(), c,
          [&](Rwkv7Batch* b, float* q, float* k, float* v, float* g, float*, float* kk, float* a) {
            b->q = q;
            b->k = k;
            b->v = v;
            b->logw = g;
            b->kk = kk;
            b->a = a;
            b->wka_stride = c.kHv * c.kKd;
          },
          []([[maybe_unused]] Device dev, const Rwkv7Batch& b) {
            SerialParallel serial;
            FS_ON_DEVICE(dev, Rwkv7Recurrence, b, serial);
          },
          "rwkv7");
    }
  }
}

// A prefill sequence's outputs and state do not depend on the batch it runs in, bit for bit:
// three sequences alone against the same three among 80 (RWKV-7's head_dim 64, 2 heads, 70
// tokens each from position 29, chunk 64). On CUDA the lone ones run the 16-column tiles and
// the batch the 32-column ones (80 x 2 heads x 2 tiles = 320 blocks, more than any GPU's SMs).
TEST_P(DeviceRecurrent, Rwkv7ChunkedPrefillIsBatchInvariant) {
  const int H = 2, N = 64, kSeqs = 80;
  const int64_t T = 70, rows = kSeqs * T, width = H * N;
  const auto q = Random(rows * width, 21, -1, 1), k = Random(rows * width, 22, -1, 1),
             v = Random(rows * width, 23, -1, 1), logw = Random(rows * width, 24, -0.6f, -0.01f),
             a = Random(rows * width, 25, 0, 1), kk = RecurrentCase::UnitRows(rows * H, N, 26);
  const auto state0 = Random(kSeqs * H * N * N, 27, -0.5f, 0.5f);
  const Device d = GetParam();
  // Runs the sequences `which` in one call; returns their outputs and states, in that order.
  auto run = [&](const std::vector<int>& which) {
    DeviceArray<float> dq(d, q), dk(d, k), dv(d, v), dw(d, logw), da(d, a), dkk(d, kk),
        dst(d, state0), dout(d, std::vector<float>(rows * width, 0.f));
    std::vector<LinearSeq> seqs;
    for (int i : which) {
      LinearSeq sq;
      sq.row = i * T;
      sq.T = T;
      sq.pos0 = 29;
      sq.state = dst.get() + static_cast<int64_t>(i) * H * N * N;
      seqs.push_back(sq);
    }
    DeviceArray<LinearSeq> dseqs(d, seqs);
    Rwkv7Batch b;
    b.key_heads = b.value_heads = H;
    b.key_dim = b.value_dim = N;
    b.q = dq.get();
    b.k = dk.get();
    b.v = dv.get();
    b.logw = dw.get();
    b.kk = dkk.get();
    b.a = da.get();
    b.qk_stride = b.v_stride = b.wka_stride = b.out_stride = width;
    b.out = dout.get();
    b.chunk = 64;
    b.prefill = dseqs.get();
    b.num_prefill = static_cast<int>(which.size());
    SerialParallel serial;
    FS_ON_DEVICE(d, Rwkv7Recurrence, b, serial);
    const std::vector<float> out = dout.ToHost(), st = dst.ToHost();
    std::vector<std::vector<float>> got;
    for (int i : which) {
      got.emplace_back(out.begin() + i * T * width, out.begin() + (i + 1) * T * width);
      got.emplace_back(st.begin() + static_cast<int64_t>(i) * H * N * N,
                       st.begin() + static_cast<int64_t>(i + 1) * H * N * N);
    }
    return got;
  };
  std::vector<int> all(kSeqs);
  for (int i = 0; i < kSeqs; ++i) all[i] = i;
  const auto batch = run(all);
  for (int i : {0, 37, kSeqs - 1}) {
    const auto alone = run({i});
    EXPECT_EQ(alone[0], batch[2 * i]) << "outputs of sequence " << i;
    EXPECT_EQ(alone[1], batch[2 * i + 1]) << "state of sequence " << i;
  }
}

TEST_P(DeviceRecurrent, RecurrentGatesMatchCpu) {
  const Device d = GetParam();
  const int64_t rows = 6;
  const int heads = 3, hd = 20;
  const std::vector<float> a = Random(rows * 8, 7, -30, 30), bb = Random(rows * 8, 8, -8, 8);
  const std::vector<float> A_log = Random(heads, 9, -1, 2), dt = Random(heads, 10, -1, 1);
  const std::vector<float> x0 = Random(rows * heads * hd, 11, -3, 3);
  const std::vector<float> z = Random(rows * heads * hd, 12, -3, 3);
  const std::vector<float> w = Random(hd, 13, 0.5f, 1.5f);
  auto run = [&](Device dev) {
    DeviceArray<float> da(dev, a), db(dev, bb), dA(dev, A_log), ddt(dev, dt), dz(dev, z),
        dw(dev, w), dx(dev, x0), dg(dev, std::vector<float>(rows * heads)),
        dbeta(dev, std::vector<float>(rows * heads)), ds(dev, x0), dk(dev, a);
    FS_ON_DEVICE(dev, DeltaGates, da.get(), db.get(), 8, rows, heads, dA.get(), ddt.get(), dg.get(),
                 dbeta.get(), heads);
    FS_ON_DEVICE(dev, GatedHeadRmsNorm, dx.get(), heads * hd, dz.get(), heads * hd, rows, heads, hd,
                 dw.get(), 0, 1e-6f, GateOrder::kNormThenGate);
    FS_ON_DEVICE(dev, SiluRows, ds.get(), rows, heads * hd, hd);
    FS_ON_DEVICE(dev, GlaGates, dk.get(), rows, 8, 6, db.get(), 16.f, -0.5f);
    DeviceArray<float> dnb(dev, std::vector<float>(rows * heads)),
        dones(dev, std::vector<float>(rows * heads));
    FS_ON_DEVICE(dev, DeltaBeta, db.get(), 8, rows, heads, 2.f, dnb.get(), heads);
    FS_ON_DEVICE(dev, DeltaBeta, nullptr, 0, rows, heads, 1.f, dones.get(), heads);
    return std::vector<std::vector<float>>{dg.ToHost(), dbeta.ToHost(), dx.ToHost(),   ds.ToHost(),
                                           dk.ToHost(), dnb.ToHost(),   dones.ToHost()};
  };
  const auto cpu = run(Device::kCpu), dev = run(d);
  for (size_t i = 0; i < cpu.size(); ++i)
    ExpectClose(dev[i], cpu[i], 1e-5, "gates op " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceRecurrent, ::testing::ValuesIn(testing::ParityDevices()),
                         testing::DeviceParamName);

}  // namespace
}  // namespace flatstate
