#include "server/api/auth.h"

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

absl::Status AuthenticateBearer(std::optional<absl::string_view> authorization,
                                const std::string& token, absl::string_view where) {
  if (token.empty()) return absl::OkStatus();
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat("missing 'authorization: Bearer <token>' ", where));
  }
  const std::string expected = absl::StrCat("Bearer ", token);
  if (!ConstantTimeEquals(*authorization, expected)) {
    return absl::UnauthenticatedError(
        absl::StrCat("invalid bearer token in 'authorization' ", where));
  }
  return absl::OkStatus();
}

}  // namespace flatstate::server
