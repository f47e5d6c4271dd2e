// CPU body of kernels/window_attention.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/attention_math.h"
#include "kernels/cpu/dot.h"
#include "kernels/window_attention.h"

namespace flatstate {
namespace {

using cpu::Dot;

// One (sequence, head): rotate, attend, write the ring. `c`, `s` hold hd/2 floats, `sc` W.
void WindowHead(const WindowBatch& b, const WindowSeq& sq, int h, float* c, float* s, float* sc) {
  const int hd = b.head_dim, W = b.window;
  const int64_t D = static_cast<int64_t>(b.H) * hd, P = sq.pos0;
  const int64_t head = static_cast<int64_t>(h) * hd;
  float* q0 = b.q + sq.row * b.in_stride + head;
  float* k0 = b.k + sq.row * b.in_stride + head;
  const float* v0 = b.v + sq.row * b.in_stride + head;
  float* ring_k = sq.state + b.ring_k + head;
  float* ring_v = sq.state + b.ring_v + head;
  for (int64_t t = 0; t < sq.T; ++t) {
    cpu::RopeAngles(P + t, hd, b.rope_theta, c, s);
    cpu::RopeRow(q0 + t * b.in_stride, 1, hd, c, s);
    cpu::RopeRow(k0 + t * b.in_stride, 1, hd, c, s);
  }
  // Key / value of position t: the ring's for positions before the call, else the call's rows.
  auto key = [&](int64_t t) -> const float* {
    return t < P ? ring_k + (t % W) * D : k0 + (t - P) * b.in_stride;
  };
  auto value = [&](int64_t t) -> const float* {
    return t < P ? ring_v + (t % W) * D : v0 + (t - P) * b.in_stride;
  };
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (int64_t i = 0; i < sq.T; ++i) {
    const int64_t p = P + i, lo = std::max<int64_t>(0, p - W + 1), n = p - lo + 1;
    const float* qi = q0 + i * b.in_stride;
    for (int64_t t = lo; t <= p; ++t) sc[t - lo] = Dot(qi, key(t), hd) * scale;
    const float inv = cpu::ExpNormaliser(sc, n);
    float* o = b.out + (sq.row + i) * b.out_stride + head;
    std::memset(o, 0, sizeof(float) * hd);
    for (int64_t t = lo; t <= p; ++t) {
      const float w = sc[t - lo] * inv;
      const float* vt = value(t);
      for (int d = 0; d < hd; ++d) o[d] += w * vt[d];
    }
  }
  // The rings after each token t < T - 1, from the old ring and the call's rows, before the old
  // ring is overwritten: slot j holds the latest position <= P + t that is j mod W.
  for (int64_t t = 0; sq.steps != nullptr && t + 1 < sq.T; ++t) {
    float* rec_k = sq.steps + t * sq.steps_stride + b.ring_k + head;
    float* rec_v = sq.steps + t * sq.steps_stride + b.ring_v + head;
    for (int64_t j = 0; j < W; ++j) {
      const int64_t last = P + t - ((P + t - j) % W + W) % W;  // may be < 0: never written
      const float* kj = last >= P ? key(last) : ring_k + j * D;
      const float* vj = last >= P ? value(last) : ring_v + j * D;
      std::memcpy(rec_k + j * D, kj, sizeof(float) * hd);
      std::memcpy(rec_v + j * D, vj, sizeof(float) * hd);
    }
  }
  // Only now (every read of the old ring is done) the call's last min(T, W) positions.
  for (int64_t t = std::max(P, P + sq.T - W); t < P + sq.T; ++t) {
    std::memcpy(ring_k + (t % W) * D, key(t), sizeof(float) * hd);
    std::memcpy(ring_v + (t % W) * D, value(t), sizeof(float) * hd);
  }
}

}  // namespace

template <>
absl::Status CheckWindowAttentionShape<Device::kCpu>(int head_dim, int window) {
  if (head_dim < 2 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", head_dim, " must be even"));
  }
  if (window < 1) {
    return absl::InvalidArgumentError(absl::StrCat("window_size ", window, " must be >= 1"));
  }
  return absl::OkStatus();
}

template <>
void WindowAttention<Device::kCpu>(const WindowBatch& b, const Parallel& par) {
  const int H = b.H;
  par.For(static_cast<int64_t>(b.num) * H, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    const size_t need = static_cast<size_t>(b.head_dim) + static_cast<size_t>(b.window);
    if (scratch.size() < need) scratch.resize(need);
    float* c = scratch.data();
    float* s = c + b.head_dim / 2;
    float* sc = s + b.head_dim / 2;
    for (int64_t task = begin; task < end; ++task) {
      WindowHead(b, b.seqs[task / H], static_cast<int>(task % H), c, s, sc);
    }
  });
}

}  // namespace flatstate
