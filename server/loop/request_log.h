// One stderr line per finished Generate stream (--log_requests), e.g.
//   [flatstate] Generate session=ab12..(throwaway) model=m in=5 out=12 context=17
//   time_ms=40.1 finish=KV_POOL_FULL status=RESOURCE_EXHAUSTED error="..."
// (one line). Thread-safe (one fprintf); never fails.
#ifndef FLATSTATE_SERVER_LOOP_REQUEST_LOG_H_
#define FLATSTATE_SERVER_LOOP_REQUEST_LOG_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/core/loop_types.h"

namespace flatstate::server {

void LogGenerate(const GenerateSummary& summary, bool throwaway, absl::Duration elapsed,
                 const absl::Status& status);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_LOOP_REQUEST_LOG_H_
