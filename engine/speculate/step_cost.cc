#include "engine/speculate/step_cost.h"

#include <algorithm>

#include "engine/speculate/draft_pacer.h"

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
  const auto it = std::lower_bound(observed_.begin(), observed_.end(), rows);
  if (it != observed_.end() && *it == rows) return T(rows);
  if (observed_.size() == 1) {
    const int m = observed_[0];
    const double prior = DraftPacer::kPriorRowCost;
    return T(m) * (1 + prior * (rows - 1)) / (1 + prior * (m - 1));
  }
  if (it != observed_.begin() && it != observed_.end()) {  // between two observed counts
    const int a = *(it - 1), b = *it;
    return T(a) + (T(b) - T(a)) * (rows - a) / (b - a);
  }
  // Beyond the observed range: the line through the two nearest, rising; never below
  // proportional to the rows (fewer rows do not cost less than their share), nor above it (more
  // rows do not cost more than their share).
  const bool below = it == observed_.begin();
  const int a = below ? observed_[0] : observed_[observed_.size() - 2];
  const int b = below ? observed_[1] : observed_.back();
  const double slope = std::max(0.0, (T(b) - T(a)) / (b - a));
  if (below) return std::max(T(a) - slope * (a - rows), T(a) * rows / a);
  return std::min(T(b) + slope * (rows - b), T(b) * rows / b);
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
