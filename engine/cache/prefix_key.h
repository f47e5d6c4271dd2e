// PrefixKey: the name of a token prefix in the prefix cache (prefix_cache.h), and the hash chain
// that computes it. Pure functions; thread-safe; never fail.
//
// key(0) is 32 zero bytes; key(g) = SHA-256(key(g - grid) || tokens[g - grid, g) as 4-byte
// little-endian integers) for g = grid, 2 grid, ... (vLLM's block-hash chain, with SHA-256 so
// that two different prefixes never share a key in practice and no token comparison is needed).
#ifndef FLATSTATE_ENGINE_CACHE_PREFIX_KEY_H_
#define FLATSTATE_ENGINE_CACHE_PREFIX_KEY_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace flatstate {

using PrefixKey = std::array<uint8_t, 32>;

// key(g) for g = grid, 2 grid, ..., up to `upto` (clamped to tokens.size()): element i is the key
// of tokens[0, (i + 1) * grid). Empty when grid < 1 or upto < grid.
std::vector<PrefixKey> PrefixKeys(std::span<const int32_t> tokens, int64_t grid, int64_t upto);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_CACHE_PREFIX_KEY_H_
