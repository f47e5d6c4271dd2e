#include "engine/cache/prefix_key.h"

#include <algorithm>

#include "engine/util/little_endian.h"
#include "engine/util/sha256.h"

namespace flatstate {

std::vector<PrefixKey> PrefixKeys(std::span<const int32_t> tokens, int64_t grid, int64_t upto) {
  std::vector<PrefixKey> keys;
  if (grid < 1) return keys;
  upto = std::min<int64_t>(upto, static_cast<int64_t>(tokens.size()));
  if (upto < grid) return keys;
  keys.reserve(static_cast<size_t>(upto / grid));
  PrefixKey key{};
  Sha256 h;
  std::vector<char> bytes(static_cast<size_t>(grid) * 4);
  for (int64_t g = grid; g <= upto; g += grid) {
    for (int64_t i = 0; i < grid; ++i) {
      StoreLe32(static_cast<uint32_t>(tokens[g - grid + i]), bytes.data() + 4 * i);
    }
    h.Update(key.data(), key.size());
    h.Update(bytes.data(), bytes.size());
    key = h.Final();
    keys.push_back(key);
  }
  return keys;
}

}  // namespace flatstate
