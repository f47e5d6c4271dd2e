#include "server/core/loop_types.h"

namespace flatstate::server {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "LENGTH";
    case FinishReason::kStop:
      return "STOP";
    case FinishReason::kEos:
      return "EOS";
    case FinishReason::kCancelled:
      return "CANCELLED";
    case FinishReason::kShutdown:
      return "SHUTDOWN";
    case FinishReason::kKvPoolFull:
      return "KV_POOL_FULL";
    case FinishReason::kEngineError:
      return "ENGINE_ERROR";
    case FinishReason::kRejected:
      return "REJECTED";
  }
  return "?";
}

}  // namespace flatstate::server
