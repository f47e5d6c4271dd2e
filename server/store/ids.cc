#include "server/store/ids.h"

#include <cstdint>
#include <cstdio>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace flatstate::server {

std::string NewId() {
  static absl::Mutex mu;
  static std::random_device* fallback ABSL_GUARDED_BY(mu) = nullptr;
  uint8_t bytes[kIdHexChars / 2];
  bool ok = false;
  if (FILE* f = std::fopen("/dev/urandom", "rb"); f != nullptr) {
    ok = std::fread(bytes, 1, sizeof(bytes), f) == sizeof(bytes);
    std::fclose(f);
  }
  if (!ok) {
    absl::MutexLock lock(&mu);
    if (fallback == nullptr) fallback = new std::random_device();
    for (auto& b : bytes) b = static_cast<uint8_t>((*fallback)());
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out(kIdHexChars, '0');
  for (size_t i = 0; i < sizeof(bytes); ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

bool IsValidId(absl::string_view id) {
  if (id.size() != kIdHexChars) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace flatstate::server
