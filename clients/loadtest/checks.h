// CheckList: the load tester's verdicts. Each Add prints one "PASS <name>: <detail>" or
// "FAIL <name>: <detail>" line on stdout at once (clearing the progress bar first) and is kept
// for the summary. Thread-safe (one mutex); never fails. `progress` may be null and must outlive
// the list.
#ifndef FLATSTATE_CLIENTS_LOADTEST_CHECKS_H_
#define FLATSTATE_CLIENTS_LOADTEST_CHECKS_H_

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "clients/loadtest/progress.h"

namespace flatstate::loadtest {

class CheckList {
 public:
  explicit CheckList(Progress* progress) : progress_(progress) {}

  void Add(bool pass, const std::string& name, const std::string& detail);
  // An informational line ("INFO ..."), not a verdict.
  void Info(const std::string& text);

  int passed() const;
  int failed() const;

 private:
  Progress* const progress_;
  mutable absl::Mutex mu_;
  int passed_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_CHECKS_H_
