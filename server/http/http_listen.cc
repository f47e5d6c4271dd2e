#include "server/http/http_listen.h"

#include <httplib.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flatstate::server {

absl::StatusOr<int> ListenInBackground(httplib::Server* http, const std::string& host, int port,
                                       absl::string_view flag, std::thread* thread) {
  int bound = 0;
  if (port == 0) {
    bound = std::max(http->bind_to_any_port(host.c_str()), 0);
  } else {
    bound = http->bind_to_port(host.c_str(), port) ? port : 0;
  }
  if (bound == 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ", host, ":", port));
  }
  *thread = std::thread([http] { http->listen_after_bind(); });
  return bound;
}

}  // namespace flatstate::server
