// RedisAddress: where a redis:// session store lives (--session_store redis://HOST:PORT/DB). A
// plain value in flatstate_store, not in store/redis, so that the store factory parses and
// names a redis:// spec in every build, also one without Redis (-DFLATSTATE_WITH_REDIS=OFF).
//
// Value type; thread-compatible; never fails.
#ifndef FLATSTATE_SERVER_STORE_REDIS_ADDRESS_H_
#define FLATSTATE_SERVER_STORE_REDIS_ADDRESS_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace flatstate::server {

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  // "redis://HOST:PORT/DB".
  std::string ToString() const { return absl::StrCat("redis://", host, ":", port, "/", db); }
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STORE_REDIS_ADDRESS_H_
