#include <immintrin.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <random>
#include <cmath>
static float f(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }
static uint32_t u(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static float bf(uint16_t h) { return f(uint32_t(h) << 16); }
static float daz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }
__attribute__((target("avx512f,avx512bf16,avx512vl"))) float hw(float acc, uint32_t a, uint32_t b) {
  __m128 r = _mm_dpbf16_ps(_mm_set1_ps(acc), (__m128bh)_mm_set1_epi32(a), (__m128bh)_mm_set1_epi32(b));
  return _mm_cvtss_f32(r);
}
int main() {
  std::mt19937 g(1);
  long n = 0, seqA = 0, seqB = 0, fused = 0, seqAdaz = 0;
  for (int it = 0; it < 2000000; ++it) {
    uint32_t a = g(), b = g();
    // keep exponents moderate mostly
    if (it % 2) { a = (a & 0x807f807f) | 0x3f003f00 ^ ((g() & 0x0f000f00)); b = (b & 0x807f807f) | 0x3f003f00 ^ ((g() & 0x0f000f00)); }
    float acc = std::ldexp(float(int(g() % 2000000) - 1000000), int(g() % 20) - 30);
    float a0 = bf(a & 0xffff), a1 = bf(a >> 16), b0 = bf(b & 0xffff), b1 = bf(b >> 16);
    if (!std::isfinite(a0*b0) || !std::isfinite(a1*b1)) continue;
    float h = hw(acc, a, b);
    ++n;
    float p0 = a0 * b0, p1 = a1 * b1;  // exact
    float A = (acc + p1) + p0;           // odd first
    float B = (acc + p0) + p1;           // even first
    double F = double(acc) + double(p0) + double(p1); float Ff = float(F);
    float Ad = daz(daz(daz(acc) + daz(daz(a1)*daz(b1))) + daz(daz(a0)*daz(b0)));
    seqA += u(A) == u(h); seqB += u(B) == u(h); fused += u(Ff) == u(h); seqAdaz += u(Ad) == u(h);
  }
  printf("n=%ld odd-first %ld even-first %ld single-rounding %ld odd-first-daz %ld\n", n, seqA, seqB, fused, seqAdaz);
}
