#include "server/loop/request_log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flatstate::server {

void LogGenerate(const GenerateSummary& sum, bool throwaway, absl::Duration elapsed,
                 const absl::Status& status) {
  const bool quiet = status.ok() || status.code() == absl::StatusCode::kCancelled;
  const std::string line = absl::StrFormat(
      "[flatstate] Generate session=%s%s model=%s in=%d out=%d context=%d time_ms=%.1f "
      "finish=%s status=%s%s",
      sum.session_id, throwaway ? "(throwaway)" : "", sum.model, sum.prompt_tokens,
      sum.generated_tokens, sum.context_tokens, absl::ToDoubleMilliseconds(elapsed),
      FinishReasonName(sum.reason), absl::StatusCodeToString(status.code()),
      quiet ? "" : absl::StrCat(" error=\"", status.message(), "\""));
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace flatstate::server
