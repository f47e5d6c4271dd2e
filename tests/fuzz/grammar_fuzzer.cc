// Fuzzes the constrained-decoding engine's parsers of untrusted bytes (engine/grammar/): GBNF text
// (a request's `grammar`), JSON Schema text (response_format json_schema) and a GrammarState blob
// (what a session checkpoint will carry). The first byte picks the parser. Nothing may crash or
// hang; a schema the converter accepts must compile; a state that deserialises must serialise back
// to the same bytes; an Advance that Accepts said yes to must succeed.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_state.h"
#include "engine/grammar/json_schema.h"

namespace {

namespace fg = flatstate::grammar;

// Feeds `input` to a fresh state of `g` in pieces; checks Accepts against Advance.
void Drive(const std::shared_ptr<const fg::CompiledGrammar>& g, FuzzedDataProvider* in) {
  absl::StatusOr<fg::GrammarState> s = fg::GrammarState::Start(g);
  if (!s.ok()) return;
  for (int i = 0; i < 64 && in->remaining_bytes() > 0; ++i) {
    const std::string piece = in->ConsumeRandomLengthString(8);
    const bool accepts = s->Accepts(piece);
    const absl::Status st = s->Advance(piece);
    if (accepts != st.ok()) __builtin_trap();
  }
  const std::string blob = s->Serialize();
  absl::StatusOr<fg::GrammarState> back = fg::GrammarState::Deserialize(g, blob);
  if (!back.ok() || back->Serialize() != blob) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16 * 1024) return 0;
  FuzzedDataProvider in(data, size);
  const int mode = in.ConsumeIntegralInRange<int>(0, 2);
  if (mode == 0) {  // GBNF text, then input for it
    const std::string text = in.ConsumeRandomLengthString(4096);
    absl::StatusOr<std::shared_ptr<const fg::CompiledGrammar>> g =
        fg::CompiledGrammar::FromGbnf(text);
    if (g.ok()) Drive(*g, &in);
  } else if (mode == 1) {  // JSON Schema text
    const std::string schema = in.ConsumeRandomLengthString(4096);
    absl::StatusOr<std::string> gbnf = fg::JsonSchemaTextToGbnf(schema);
    if (!gbnf.ok()) return 0;
    absl::StatusOr<std::shared_ptr<const fg::CompiledGrammar>> g =
        fg::CompiledGrammar::FromGbnf(*gbnf);
    if (!g.ok()) __builtin_trap();  // the converter wrote a grammar that does not compile
    Drive(*g, &in);
  } else {  // a state blob for the JSON-object grammar
    static const auto* json = new std::shared_ptr<const fg::CompiledGrammar>(
        *fg::CompiledGrammar::FromGbnf(fg::JsonObjectGbnf()));
    const std::string blob = in.ConsumeRemainingBytesAsString();
    absl::StatusOr<fg::GrammarState> s = fg::GrammarState::Deserialize(*json, blob);
    if (s.ok() && s->Serialize() != blob) __builtin_trap();
  }
  return 0;
}
