// One task of the CPU paged attention (kernels/paged_attention.h): a tile of query rows of one
// session at consecutive positions, for a range of heads, against that session's K/V blocks.
// Three bodies, scalar, AVX2 and AVX-512, that give identical bits; no state beyond the caller's
// scratch.
//
// The chain of one (row, head) is fixed by its context length alone. Keys come in absolute groups
// of kKeyTile positions [16g, 16g + 16), ascending; within a group, for the row's keys j < keys:
//   partial[L] = q[L] * k_j[L] (0 for L >= hd), then fma(q[d], k_j[d], partial[L]) for
//                d = L + 16, L + 32, ... < hd (L = 0..15: dimension d goes to lane d mod 16)
//   dot_j      = halving tree: for w = 8, 4, 2, 1: partial[L] += partial[L + w]; dot_j = partial[0]
//   s_j        = dot_j * scale                          (scale = 1 / sqrt(hd), rounded once)
//   m'         = max(m, max_j s_j); c = ExpNonPositive(m - m')          (0 while m = -inf)
//   p_j        = ExpNonPositive(s_j - m'), 0 for the group's lanes past the row's context
//   l          = fma(l, c, halving-tree sum of the 16 p lanes); m = m'
//   acc[d]     = acc[d] * c, then acc[d] = fma(p_j, v_j[d], acc[d]) for each key j < keys in order
// and at the end out[d] = acc[d] * (1 / l) (zeros for an empty context).
#ifndef FLATSTATE_KERNELS_CPU_ATTEND_TILE_H_
#define FLATSTATE_KERNELS_CPU_ATTEND_TILE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/paged_attention.h"

namespace flatstate::cpu {

// exp(x) for x <= 0 (and -inf), the one definition every body computes lane by lane with the same
// IEEE operations (Cephes' expf: x = n ln2 + r, a degree-5 polynomial in r, times 2^n); at most
// 1.002 ulp from exp over [-87, 0] (tests/kernels/cpu/attend_tile_test.cc). 0 below -87 (where
// 2^n would be subnormal); NaN stays NaN.
inline constexpr float kExpMin = -87.f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpMinusLn2Hi = -0.693359375f;  // -ln 2 = kExpMinusLn2Hi + kExpLn2Lo
inline constexpr float kExpLn2Lo = 2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline float ExpNonPositive(float x) {
  if (!(x >= kExpMin)) return x < kExpMin ? 0.f : x;
  const float n = std::nearbyint(x * kExpLog2e);
  float r = std::fma(n, kExpMinusLn2Hi, x);
  r = std::fma(n, kExpLn2Lo, r);
  float y = kExpPoly[0];
  for (int i = 1; i < 6; ++i) y = std::fma(y, r, kExpPoly[i]);
  y = std::fma(y, r * r, r);
  y = y + 1.f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return y * two_n;
}

// What one task attends: rows[0, n) (n <= kQueryTile) of one session whose block table is
// `table`, heads [h0, h1); q at qkv + row * stride + h * hd, output at
// out + row * out_stride + h * hd; head h's K and V are those of K/V head h / group.
struct AttendTask {
  const PagedKv* kv = nullptr;
  const int32_t* table = nullptr;
  const PagedRow* rows = nullptr;
  int n = 0;
  int h0 = 0, h1 = 0;
  const float* qkv = nullptr;
  int64_t stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int layer = 0;
  int hd = 0;
  int group = 1;  // query heads per K/V head (AttentionShape::group)

  // Elements from the first K/V head of the task's heads to the K/V head of head h0 + h, in a
  // pool row.
  int64_t KvOffset(int h) const {
    return static_cast<int64_t>((h0 + h) / group - h0 / group) * hd;
  }
  // Elements of a pool row the task's heads read: their K/V heads' span.
  int KvWidth() const { return ((h1 - 1) / group - h0 / group + 1) * hd; }
};

// Per-thread working memory of a task (reused: grows to the largest task).
struct AttendScratch {
  std::vector<float> kbuf, vbuf;  // scalar body: a key group's rows widened from bf16
  std::vector<float> m, l;        // [row][head]: running max and sum of exponentials
  std::vector<float> acc;         // [row][head][hd]: the running weighted sums of V
};

void AttendTileScalar(const AttendTask& t, AttendScratch* s);
// The vector bodies need hd % 16 == 0 and hd <= kSimdMaxHeadDim (AttendSimdFits), and the CPU
// features they are named for: AVX-512F, or AVX2 + FMA (kernels/cpu/attend_tile_avx2.cc).
// 256: Qwen3.5's and Gemma's attention heads (hd 144..256 take 9..16 vectors a row, one head at a
// time; the first version stopped at 128 and sent hd 256 to the scalar body).
inline constexpr int kSimdMaxHeadDim = 256;
bool AttendSimdFits(int hd);
void AttendTileAvx512(const AttendTask& t, AttendScratch* s);
void AttendTileAvx2(const AttendTask& t, AttendScratch* s);

}  // namespace flatstate::cpu

#endif  // FLATSTATE_KERNELS_CPU_ATTEND_TILE_H_
