#include "server/auth.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace flatstate::server {
namespace {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status Authenticate(const grpc::ServerContextBase& ctx, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  const std::string expected = absl::StrCat("Bearer ", token);
  if (!ConstantTimeEquals(value, expected)) {
    return absl::UnauthenticatedError("invalid bearer token in 'authorization' metadata");
  }
  return absl::OkStatus();
}

}  // namespace flatstate::server
