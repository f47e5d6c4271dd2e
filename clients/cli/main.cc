// flatstate-cli: command-line client.
//
// Local engine (no server):
//   flatstate-cli generate --local_model models/shakespeare-linear-elu --prompt "ROMEO:"
//       [--max_new_tokens 200] [--temperature 0.8] [--top_k 0] [--top_p 1] [--seed 1]
// Server (gRPC, --server host:port, default localhost:50051):
//   flatstate-cli generate --prompt TEXT [--model NAME] [--session ID] [--max_new_tokens N]
//       [--temperature T --top_k K --top_p P --seed S] [--stop a,b]
//   flatstate-cli session create [--model NAME] [sampling flags]
//   flatstate-cli session info|delete ID
//   flatstate-cli checkpoint SESSION [-o FILE]
//   flatstate-cli restore FILE|CHECKPOINT_ID
//   flatstate-cli models | stats | health
// Tokenizer of a model folder (offline; a server answers POST /tokenize, /detokenize):
//   flatstate-cli tokenize --local_model DIR [TEXT | --prompt TEXT] [--add_special] [--with_pieces]
//   flatstate-cli detokenize --local_model DIR IDS...  (e.g. 72 105 or 72,105)
// generate takes --prompt_tokens 1,2,3 instead of --prompt (local and server).
// Common: --auth_token T, --tls (system roots) or --tls_ca FILE, --timeout SECONDS.
// Exits non-zero with the error (the server's code and message) on failure.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "clients/cli/flags.h"

ABSL_FLAG(std::string, local_model, "",
          "model folder: run the engine in-process instead of calling a server");
ABSL_FLAG(std::string, model, "", "server model name (empty: the server's default)");
ABSL_FLAG(std::string, prompt, "ROMEO:\n", "prompt text (UTF-8)");
ABSL_FLAG(std::vector<std::string>, prompt_tokens, {},
          "prompt as token ids, comma-separated (generate; instead of --prompt: what a model "
          "without a readable tokenizer needs); detokenize's ids when none are given as arguments");
ABSL_FLAG(bool, add_special, false, "tokenize: put the model's BOS id first (when it has one)");
ABSL_FLAG(bool, with_pieces, false, "tokenize: print each id with its piece, one per line");
ABSL_FLAG(std::string, session, "", "session id to continue (generate)");
ABSL_FLAG(uint32_t, max_new_tokens, 200, "tokens to generate");
ABSL_FLAG(float, temperature, 0.8f, "sampling temperature (0 = greedy)");
ABSL_FLAG(uint32_t, top_k, 0, "top-k cut (0 = off)");
ABSL_FLAG(float, top_p, 1.0f, "nucleus mass in (0, 1]");
ABSL_FLAG(uint64_t, seed, 1, "sampling seed");
ABSL_FLAG(std::vector<std::string>, stop, {}, "stop strings, comma-separated (generate)");
ABSL_FLAG(int, threads, 0, "engine threads, local mode (0 = all cores)");
ABSL_FLAG(std::string, device, "cpu", "auto | cpu | cuda (local mode)");
ABSL_FLAG(
    std::string, weight_dtype, "auto",
    "auto | f32 | bf16 | int8 | int4 | bf16dot: the type the layer GEMM weights run as (local "
    "mode; "
    "auto: the model file's own type; docs/model-format.md)");
ABSL_FLAG(
    std::string, head_dtype, "auto",
    "auto | f32 | bf16 | int8 | int4 | bf16dot: the type the output head runs as (local mode; "
    "auto: "
    "f32, or a BF16 file's own head when the layers run narrower; docs/model-format.md)");
ABSL_FLAG(std::string, kv_dtype, "f32", "f32 | bf16: softmax K/V cache element type (local mode)");
ABSL_FLAG(bool, stats, true, "print timing/usage to stderr at the end of generate");
ABSL_FLAG(std::string, server, "localhost:50051", "server address host:port");
ABSL_FLAG(std::string, auth_token, "", "sent as 'authorization: Bearer <token>'");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle: connect with TLS, trusting these roots");
ABSL_FLAG(bool, tls, false, "connect with TLS using the system roots");
ABSL_FLAG(std::string, o, "", "output file (checkpoint)");
ABSL_FLAG(double, timeout, 0, "call deadline in seconds (0: none)");

namespace flatstate::cli {

bool SamplingFlagsSet() {
  for (const char* name : {"temperature", "top_k", "top_p", "seed"}) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f != nullptr && f->CurrentValue() != f->DefaultValue()) return true;
  }
  return false;
}

}  // namespace flatstate::cli

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "flatstate-cli generate|session|checkpoint|restore|models|stats|health|tokenize|detokenize "
      "[args] [flags]\n"
      "  local engine: flatstate-cli generate --local_model DIR --prompt TEXT\n"
      "  tokenizer:    flatstate-cli tokenize|detokenize --local_model DIR TEXT|IDS");
  std::vector<char*> raw = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(raw.begin() + 1, raw.end());
  if (args.empty()) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  if (args[0] == "generate" && !absl::GetFlag(FLAGS_local_model).empty()) {
    return flatstate::cli::LocalGenerate();
  }
  if (args[0] == "tokenize" || args[0] == "detokenize") {
    if (absl::GetFlag(FLAGS_local_model).empty()) {
      std::cerr << "usage: flatstate-cli " << args[0]
                << " --local_model DIR ...: the tokenizer of a model folder (a server answers "
                   "POST /"
                << args[0] << " on its HTTP port)\n";
      return 2;
    }
    return flatstate::cli::LocalTokenize(args);
  }
#ifdef FLATSTATE_CLI_WITH_GRPC
  return flatstate::cli::RunRemote(args);
#else
  std::cerr << "error: this flatstate-cli was built without gRPC; only "
               "`generate --local_model DIR` is available\n";
  return 2;
#endif
}
