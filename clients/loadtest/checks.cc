#include "clients/loadtest/checks.h"

#include <cstdio>

namespace flatstate::loadtest {

void CheckList::Add(bool pass, const std::string& name, const std::string& detail) {
  if (progress_ != nullptr) progress_->Clear();
  absl::MutexLock lock(&mu_);
  (pass ? passed_ : failed_)++;
  std::printf("%s %s: %s\n", pass ? "PASS" : "FAIL", name.c_str(), detail.c_str());
  std::fflush(stdout);
}

void CheckList::Info(const std::string& text) {
  if (progress_ != nullptr) progress_->Clear();
  absl::MutexLock lock(&mu_);
  std::printf("INFO %s\n", text.c_str());
  std::fflush(stdout);
}

int CheckList::passed() const {
  absl::MutexLock lock(&mu_);
  return passed_;
}

int CheckList::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

}  // namespace flatstate::loadtest
