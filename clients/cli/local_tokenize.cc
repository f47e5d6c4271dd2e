// `flatstate-cli tokenize|detokenize --local_model DIR`: a model folder's own tokenizer
// (Model::tokenizer()), offline. A running server answers the same through POST /tokenize and
// /detokenize (docs/http-api.md).
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/flags.h"
#include "engine/model/model.h"
#include "engine/tokenizer/byte_tokenizer.h"

namespace flatstate::cli {
namespace {

int Fail(const absl::Status& s) {
  std::cerr << "error: " << s << "\n";
  return 1;
}

// A piece as llama.cpp's /tokenize shows it: the text when valid UTF-8, else its bytes (\xNN).
std::string Printable(const std::string& bytes) {
  if (IsValidUtf8(bytes)) return bytes;
  std::string out;
  for (char c : bytes) {
    absl::StrAppend(&out, "\\x", absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(const std::vector<std::string>& parts,
                                                   const std::string& what) {
  std::vector<int32_t> ids;
  for (const std::string& part : parts) {
    for (absl::string_view s : absl::StrSplit(part, absl::ByAnyChar(", "), absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(s, &id)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": '", s, "' is not a token id (an integer)"));
      }
      ids.push_back(id);
    }
  }
  return ids;
}

int LocalTokenize(const std::vector<std::string>& args) {
  const bool detokenize = args[0] == "detokenize";
  auto model = Model::Load(absl::GetFlag(FLAGS_local_model));
  if (!model.ok()) return Fail(model.status());
  const Tokenizer& tok = (*model)->tokenizer();
  if (detokenize) {
    // Ids from the positional arguments ("1 2 3", "1,2,3"), else --prompt_tokens.
    const std::vector<std::string> parts =
        args.size() > 1 ? std::vector<std::string>(args.begin() + 1, args.end())
                        : absl::GetFlag(FLAGS_prompt_tokens);
    absl::StatusOr<std::vector<int32_t>> ids = ParseTokenIds(parts, "tokens");
    if (!ids.ok()) return Fail(ids.status());
    if (absl::Status s = tok.ValidateIds(*ids, "tokens"); !s.ok()) return Fail(s);
    if (!tok.has_text()) {
      std::cerr << "note: model '" << (*model)->name()
                << "' has no tokenizer.json: its tokens decode to no text\n";
    }
    std::cout << tok.Decode(*ids) << std::endl;
    return 0;
  }
  // Text from the positional arguments (joined by spaces), else --prompt.
  const std::string text = args.size() > 1
                               ? absl::StrJoin(args.begin() + 1, args.end(), " ")
                               : absl::GetFlag(FLAGS_prompt);
  absl::StatusOr<std::vector<int32_t>> ids = tok.Encode(text, absl::GetFlag(FLAGS_add_special));
  if (!ids.ok()) return Fail(ids.status());
  if (absl::GetFlag(FLAGS_with_pieces)) {
    for (int32_t id : *ids) std::cout << id << "\t" << Printable(tok.TokenBytes(id)) << "\n";
  } else {
    std::cout << absl::StrJoin(*ids, " ") << "\n";
  }
  return 0;
}

}  // namespace flatstate::cli
