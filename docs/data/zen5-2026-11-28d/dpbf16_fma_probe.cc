// Which fp32 chain does vdpbf16ps compute? One lane, random operands; counts the cases where each
// candidate definition gives the instruction's bits. Two sets: operands spread over the whole
// bf16 range (products mostly normal) and operands around 2^-60 with accumulators around
// 2^-120 (products and sums near 2^-126, where flushing shows).
//   g++ -O1 -mfma -std=c++20 -o /tmp/dpbf16_fma_probe dpbf16_fma_probe.cc && /tmp/dpbf16_fma_probe
// Result on the 2-vCPU Zen 5 EPYC (family 26), 2026-11-28: dpbf16_fma_probe.txt.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

static float F32(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
static uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
static float Bf(uint16_t h) { return F32(uint32_t(h) << 16); }
static float Daz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }

__attribute__((target("avx512f,avx512bf16,avx512vl"))) float Hw(float acc, uint32_t a, uint32_t b) {
  __m128 r =
      _mm_dpbf16_ps(_mm_set1_ps(acc), (__m128bh)_mm_set1_epi32(a), (__m128bh)_mm_set1_epi32(b));
  return _mm_cvtss_f32(r);
}

int main() {
  std::mt19937 g(1);
  for (int set = 0; set < 2; ++set) {
    long n = 0, fma_flush = 0, mul_add_flush_all = 0, even_first = 0;
    for (int it = 0; it < 2000000; ++it) {
      uint32_t a, b;
      float acc;
      if (set == 0) {
        a = g(), b = g();
        acc = std::ldexp(float(int(g() % 2000000) - 1000000), int(g() % 20) - 30);
      } else {
        auto rnd = [&](int lo, int span) {
          float v = std::ldexp(1.f + (g() % 128) / 128.f, -(lo + int(g() % span)));
          return (g() & 1) ? -v : v;
        };
        a = (Bits(rnd(55, 14)) >> 16) | (Bits(rnd(55, 14)) & 0xFFFF0000u);
        b = (Bits(rnd(55, 14)) >> 16) | (Bits(rnd(55, 14)) & 0xFFFF0000u);
        acc = (it % 3 == 0) ? 0.f : rnd(118, 16);
      }
      const float x0 = Daz(Bf(a & 0xFFFF)), x1 = Daz(Bf(a >> 16));
      const float y0 = Daz(Bf(b & 0xFFFF)), y1 = Daz(Bf(b >> 16));
      if (!std::isfinite(x0 * y0) || !std::isfinite(x1 * y1)) continue;
      acc = Daz(acc);
      const float h = Hw(acc, a, b);
      ++n;
      // The definition kernels/cpu/gemm_bf16_dot.cc uses: exact product, one rounding, flush.
      const float d = Daz(std::fma(x0, y0, Daz(std::fma(x1, y1, acc))));
      // Products flushed on their own too (the 2026-11-28c probe's form).
      const float m = Daz(Daz(acc + Daz(x1 * y1)) + Daz(x0 * y0));
      const float e = Daz(std::fma(x1, y1, Daz(std::fma(x0, y0, acc))));
      fma_flush += Bits(d) == Bits(h);
      mul_add_flush_all += Bits(m) == Bits(h);
      even_first += Bits(e) == Bits(h);
    }
    std::printf(
        "%s: n=%ld  fma-then-flush (odd first) %ld  mul,add each flushed %ld  "
        "fma-then-flush (even first) %ld\n",
        set == 0 ? "whole range" : "near 2^-126", n, fma_flush, mul_add_flush_all, even_first);
  }
}
