// bf16 <-> fp32 conversions (header-only, no state): the one rounding rule of every bf16 in the
// project (GEMM weights, the bf16 K/V cache).
#ifndef FLATSTATE_KERNELS_BF16_H_
#define FLATSTATE_KERNELS_BF16_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace flatstate {

// The nearest-even bf16 of f as its 16 bits (NaN stays a quiet NaN; may round up to Inf).
inline uint16_t Bf16FromFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// Exact: the 16 bits become the float's top half.
inline float FloatFromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_BF16_H_
