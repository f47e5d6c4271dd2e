// Reads a whole (small) file into memory: config.json, an index, a tokenizer file.
//
// Stateless; thread-safe. Fails with NotFound ("<path>: cannot open: ...") when the file does not
// exist, Internal for any other open or read error; the message starts with the path.
#ifndef FLATSTATE_ENGINE_UTIL_READ_FILE_H_
#define FLATSTATE_ENGINE_UTIL_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace flatstate {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_UTIL_READ_FILE_H_
