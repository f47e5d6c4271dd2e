#include "clients/common/session_metadata.h"

#include <string>

namespace flatstate::clients {

namespace {
// Far above any session id the server issues; keeps a hostile id from bloating every request.
constexpr size_t kMaxSessionIdBytes = 512;
}  // namespace

bool IsSendableSessionId(std::string_view session_id) {
  if (session_id.empty() || session_id.size() > kMaxSessionIdBytes) return false;
  for (const char c : session_id) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

void AddSessionMetadata(std::string_view session_id, grpc::ClientContext* ctx) {
  if (IsSendableSessionId(session_id)) {
    ctx->AddMetadata(kSessionMetadataKey, std::string(session_id));
  }
}

}  // namespace flatstate::clients
