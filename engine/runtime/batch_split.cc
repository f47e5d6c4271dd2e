#include "engine/runtime/batch_split.h"

#include <algorithm>

namespace flatstate {

std::vector<size_t> SplitSequences(const std::vector<int64_t>& row_start, int threads) {
  if (threads < 2 || row_start.size() < 2) return {};
  const size_t seqs = row_start.size() - 1;
  const int64_t rows = row_start.back();
  if (rows < kMinSplitRowsPerThread * threads || seqs < static_cast<size_t>(threads)) return {};
  std::vector<size_t> cuts{0};
  for (int g = 1; g < threads; ++g) {
    // The sequence boundary nearest to the g-th even share's end, after the previous cut.
    const int64_t target = rows * g / threads;
    auto it = std::lower_bound(row_start.begin() + static_cast<int64_t>(cuts.back()) + 1,
                               row_start.end(), target);
    size_t at = static_cast<size_t>(it - row_start.begin());
    if (at > cuts.back() + 1 && target - row_start[at - 1] < row_start[at] - target) --at;
    if (at >= seqs) return {};
    cuts.push_back(at);
  }
  cuts.push_back(seqs);
  const int64_t most = (rows + threads - 1) / threads * 5 / 4;
  for (size_t g = 0; g + 1 < cuts.size(); ++g) {
    const int64_t share = row_start[cuts[g + 1]] - row_start[cuts[g]];
    if (share > most) return {};
  }
  return cuts;
}

}  // namespace flatstate
