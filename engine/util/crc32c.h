// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), software slicing-by-8.
//
// Stateless and thread-safe; cannot fail. Crc32c("123456789") == 0xE3069283.
// `init` is a previous return value, so a message may be checksummed in pieces:
//   Crc32c(ab, na + nb) == Crc32c(b, nb, Crc32c(a, na)).
#ifndef FLATSTATE_ENGINE_UTIL_CRC32C_H_
#define FLATSTATE_ENGINE_UTIL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace flatstate {

uint32_t Crc32c(const void* data, size_t n, uint32_t init = 0);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_UTIL_CRC32C_H_
