#include "clients/loadtest/progress.h"

#include <algorithm>
#include <cstdio>

namespace flatstate::loadtest {

void Progress::Update(const std::string& label, double done, double total) {
  if (!enabled_) return;
  absl::MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_draw_ < std::chrono::milliseconds(100) && done < total) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  char bar[kWidth + 16] = "";
  if (total > 0) {
    const double f = std::clamp(done / total, 0.0, 1.0);
    const int filled = static_cast<int>(f * kWidth);
    char cells[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) cells[i] = i < filled ? '#' : '.';
    cells[kWidth] = '\0';
    std::snprintf(bar, sizeof(bar), "[%s] %3d%%", cells, static_cast<int>(f * 100));
  }
  std::fprintf(stderr, "\r\033[K%s %s", label.c_str(), bar);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::Clear() {
  if (!enabled_) return;
  absl::MutexLock lock(&mu_);
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace flatstate::loadtest
