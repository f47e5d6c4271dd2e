// Session and checkpoint ids: 128 random bits as 32 lower-case hex characters.
//
// Thread-safe (the random source is guarded internally). NewId never fails: it reads
// /dev/urandom and falls back to std::random_device if that cannot be opened.
#ifndef FLATSTATE_SERVER_STORE_IDS_H_
#define FLATSTATE_SERVER_STORE_IDS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace flatstate::server {

inline constexpr size_t kIdHexChars = 32;

std::string NewId();
// True iff `id` is exactly kIdHexChars lower-case hex characters (so it is safe in a file name).
bool IsValidId(absl::string_view id);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STORE_IDS_H_
