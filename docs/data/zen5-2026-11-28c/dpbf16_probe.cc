#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cstring>
// MR rows x 64 cols, k steps: fp32 FMA with bf16 widen (current) vs vdpbf16ps (pairs).
template <int MR>
__attribute__((target("avx512f,avx512bf16,avx512bw"),noinline)) void Dp(const uint32_t* xp, const uint16_t* p, int64_t k, float* y) {
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i) for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; kk += 2) {
    const __m512i* wk = reinterpret_cast<const __m512i*>(p + kk * 64);
    __m512bh w[4];
    for (int v = 0; v < 4; ++v) w[v] = (__m512bh)_mm512_loadu_si512(wk + v);
    for (int i = 0; i < MR; ++i) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(xp[i * (k / 2) + kk / 2]);
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], xb, w[v]);
    }
  }
  for (int i = 0; i < MR; ++i) for (int v = 0; v < 4; ++v) _mm512_storeu_ps(y + i * 64 + 16 * v, acc[i][v]);
}
template <int MR>
__attribute__((target("avx512f"),noinline)) void Fma(const float* x, const uint16_t* p, int64_t k, float* y) {
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i) for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(0xFFFF0000u);
  for (int64_t kk = 0; kk < k; kk += 2) {
    const __m512i* wk = reinterpret_cast<const __m512i*>(p + kk * 64);
    __m512 w[4];
    for (int v = 0; v < 4; ++v) w[v] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(wk + v), 16));
    for (int i = 0; i < MR; ++i) { const __m512 xb = _mm512_set1_ps(x[i * k + kk]); for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(xb, w[v], acc[i][v]); }
    for (int v = 0; v < 4; ++v) w[v] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(wk + v), high));
    for (int i = 0; i < MR; ++i) { const __m512 xb = _mm512_set1_ps(x[i * k + kk + 1]); for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(xb, w[v], acc[i][v]); }
  }
  for (int i = 0; i < MR; ++i) for (int v = 0; v < 4; ++v) _mm512_storeu_ps(y + i * 64 + 16 * v, acc[i][v]);
}
int main() {
  const int64_t k = 768; const int MR = 6;
  std::vector<uint16_t> p(k * 64, 0x3f80); std::vector<float> x(MR * k, 1.f); std::vector<uint32_t> xp(MR * k / 2, 0x3f803f80); std::vector<float> y(MR * 64);
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 200000; ++it) Fma<MR>(x.data(), p.data(), k, y.data());
    auto t1 = std::chrono::steady_clock::now();
    for (int it = 0; it < 200000; ++it) Dp<MR>(xp.data(), p.data(), k, y.data());
    auto t2 = std::chrono::steady_clock::now();
    double flops = 2.0 * MR * 64 * k * 200000;
    printf("fma %.1f GFLOP/s  dpbf16 %.1f GFLOP/s\n", flops / std::chrono::duration<double>(t1 - t0).count() / 1e9, flops / std::chrono::duration<double>(t2 - t1).count() / 1e9);
  }
}
