// Flags shared by the flatstate-cli commands (defined in main.cc).
#ifndef FLATSTATE_CLIENTS_CLI_FLAGS_H_
#define FLATSTATE_CLIENTS_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"

ABSL_DECLARE_FLAG(std::string, local_model);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, prompt);
ABSL_DECLARE_FLAG(std::vector<std::string>, prompt_tokens);
ABSL_DECLARE_FLAG(bool, add_special);
ABSL_DECLARE_FLAG(bool, with_pieces);
ABSL_DECLARE_FLAG(std::string, session);
ABSL_DECLARE_FLAG(uint32_t, max_new_tokens);
ABSL_DECLARE_FLAG(float, temperature);
ABSL_DECLARE_FLAG(uint32_t, top_k);
ABSL_DECLARE_FLAG(float, top_p);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::vector<std::string>, stop);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, weight_dtype);
ABSL_DECLARE_FLAG(std::string, head_dtype);
ABSL_DECLARE_FLAG(std::string, kv_dtype);
ABSL_DECLARE_FLAG(bool, stats);
ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(std::string, auth_token);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(bool, tls);
ABSL_DECLARE_FLAG(std::string, o);
ABSL_DECLARE_FLAG(double, timeout);

namespace flatstate::cli {

// True when the sampling flags were given on the command line (else the server/session decides).
bool SamplingFlagsSet();

// `generate --local_model DIR`: runs the engine in-process. Returns the exit code.
int LocalGenerate();

// `tokenize|detokenize --local_model DIR` (args[0] says which): the folder's tokenizer, offline.
int LocalTokenize(const std::vector<std::string>& args);

// Token ids from "1,2,3" / "1 2 3" pieces; InvalidArgument naming `what` for a non-integer.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(const std::vector<std::string>& parts,
                                                   const std::string& what);

// Server commands; `args` are the positional arguments after the program name. Returns the exit
// code (2: usage error; 1: the server's error, printed to stderr).
int RunRemote(const std::vector<std::string>& args);

}  // namespace flatstate::cli

#endif  // FLATSTATE_CLIENTS_CLI_FLAGS_H_
