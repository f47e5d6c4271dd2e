// Little-endian loads and stores of fixed-width integers and f32 on byte buffers, whatever the
// host's byte order: the one place flatstate's binary formats (session checkpoints,
// docs/checkpoint-format.md) spell out their byte order.
//
// Header-only, stateless and thread-safe. Nothing here checks bounds or fails: the caller
// guarantees that `p` has the 4 or 8 bytes (or `n` floats) it reads or writes.
#ifndef FLATSTATE_ENGINE_UTIL_LITTLE_ENDIAN_H_
#define FLATSTATE_ENGINE_UTIL_LITTLE_ENDIAN_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace flatstate {

inline uint32_t LoadLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

inline uint64_t LoadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

inline void StoreLe32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

inline void StoreLe64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

inline void AppendLe32(uint32_t v, std::string* out) {
  char b[4];
  StoreLe32(v, b);
  out->append(b, sizeof(b));
}

inline void AppendLe64(uint64_t v, std::string* out) {
  char b[8];
  StoreLe64(v, b);
  out->append(b, sizeof(b));
}

// `n` f32 bit patterns (NaN payloads and -inf survive), 4 bytes each.
// n == 0 touches nothing (dst or src may be null then: memcpy's are declared non-null).
inline void LoadLeFloats(const char* src, size_t n, float* dst) {
  if (n == 0) return;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(LoadLe32(src + 4 * i));
  }
}

inline void AppendLeFloats(const float* src, size_t n, std::string* out) {
  if (n == 0) return;
  if constexpr (std::endian::native == std::endian::little) {
    out->append(reinterpret_cast<const char*>(src), n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) AppendLe32(std::bit_cast<uint32_t>(src[i]), out);
  }
}

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_UTIL_LITTLE_ENDIAN_H_
