// SHA-256 (FIPS 180-4), self-contained.
//
// Sha256 is a value type that owns its 64-byte block buffer and running state; it is
// thread-compatible (one instance per thread, or external locking). It cannot fail.
// Usage: Sha256 h; h.Update(p, n); ...; std::array<uint8_t, 32> d = h.Final();
// After Final() the object is reset and may be reused for a new message.
#ifndef FLATSTATE_ENGINE_UTIL_SHA256_H_
#define FLATSTATE_ENGINE_UTIL_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flatstate {

class Sha256 {
 public:
  Sha256() { Reset(); }

  // Appends `n` bytes at `data` to the message (data may be null when n == 0).
  void Update(const void* data, size_t n);
  // Pads, returns the 32-byte digest, and resets the object.
  std::array<uint8_t, 32> Final();
  void Reset();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_;
  size_t buf_len_ = 0;
  uint64_t total_len_ = 0;  // bytes
};

// Lowercase hex of `bytes` (2 chars per byte).
std::string HexLower(const uint8_t* bytes, size_t n);
// Lowercase hex SHA-256 (64 chars) of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_UTIL_SHA256_H_
