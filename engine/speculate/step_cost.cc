#include "engine/speculate/step_cost.h"

#include <algorithm>
#include <cstddef>

namespace flatstate {

double StepCostModel::Median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

void StepCostModel::Push(std::vector<double>* ring, int* next, double v) {
  if (ring->size() < static_cast<size_t>(kWindow)) {
    ring->push_back(v);
    return;
  }
  (*ring)[static_cast<size_t>(*next)] = v;
  *next = (*next + 1) % kWindow;
}

void StepCostModel::ObserveStep(int rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0)) return;
  if (recent_.empty()) {
    recent_.resize(kMaxRows + 1);
    next_.assign(kMaxRows + 1, 0);
    median_.assign(kMaxRows + 1, 0.0);
  }
  const auto r = static_cast<size_t>(rows);
  if (recent_[r].empty())
    observed_.insert(std::lower_bound(observed_.begin(), observed_.end(), rows), rows);
  Push(&recent_[r], &next_[r], seconds);
  median_[r] = Median(recent_[r]);
}

void StepCostModel::ObserveDraft(int tokens, double seconds) {
  if (tokens < 1 || !(seconds >= 0)) return;
  Push(&draft_recent_, &draft_next_, seconds / tokens);
  draft_median_ = Median(draft_recent_);
}

double StepCostModel::StepSeconds(int rows) const {
  if (observed_.empty() || rows < 1) return 0;
  auto T = [&](int n) { return median_[static_cast<size_t>(n)]; };
  const bool one = observed_[0] == 1;  // a plain batch-1 step has been seen
  if (rows == 1 && one) return T(1);
  // Steps of several rows: the least-squares line through the medians of the counts >= 2 seen
  // (slope >= 0), so each count's few, noisy samples inform every length; through the settled
  // ones only where there are any, so that a count seen once or twice (the first step of a new
  // shape, which pays one-time costs) decides nothing until it has been tried again.
  auto settled = [&](int n) {
    return n > 1 && recent_[static_cast<size_t>(n)].size() >= static_cast<size_t>(kSettled);
  };
  const bool any_settled = std::any_of(observed_.begin(), observed_.end(), settled);
  auto fitted = [&](int n) { return n > 1 && (!any_settled || settled(n)); };
  double multi = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  int first = 0;  // the smallest count fitted
  for (const int n : observed_) {
    if (!fitted(n)) continue;
    if (multi++ == 0) first = n;
    const double x = n, y = T(n);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  if (multi == 0) return one ? T(1) : 0;  // only plain steps seen: a draft looks free until run
  const double var = sxx - sx * sx / multi;
  const double slope = var > 0 ? std::max(0.0, (sxy - sx * sy / multi) / var) : 0.0;
  const double mean_x = sx / multi, mean_y = sy / multi;
  double t = mean_y + slope * (rows - mean_x);
  if (multi == 1 && rows < first) {  // below the one count fitted: from T(1), or its share
    const int c = first;
    t = one ? T(1) + (T(c) - T(1)) * (rows - 1) / (c - 1) : T(c) * rows / c;
  }
  // Below the smallest count seen, never less than in proportion to its rows (fewer rows do not
  // cost less than their share); with a plain step seen, never less than it.
  if (const int a = observed_[0]; rows < a) t = std::max(t, T(a) * rows / a);
  return one ? std::max(t, T(1)) : t;
}

std::vector<double> StepCostModel::Costs(int base_rows, int streams, int max_extra) const {
  const double t0 = StepSeconds(base_rows);
  if (!(t0 > 0) || max_extra < 0) return {};
  std::vector<double> cost(static_cast<size_t>(max_extra) + 1, 1.0);
  for (int k = 1; k <= max_extra; ++k) {
    const double extra = StepSeconds(base_rows + k) - t0 + k * draft_median_;
    cost[static_cast<size_t>(k)] = 1 + std::max(0.0, std::max(streams, 1) * extra / t0);
  }
  return cost;
}

}  // namespace flatstate
