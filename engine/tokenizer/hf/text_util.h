// Small UTF-8 and Unicode helpers shared by the Hugging Face tokenizer pieces: decoding one code
// point, the character classes the upstream Rust library tests with `char` methods
// (is_whitespace, is_numeric, is_alphanumeric, punctuation), the GPT-2 byte-to-character table
// used by ByteLevel, and lossy UTF-8 repair. Owns only immutable static tables; every function is
// stateless and thread-safe. Nothing here fails: an ill-formed byte decodes as one U+FFFD.
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_TEXT_UTIL_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_TEXT_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/util/utf8.h"

namespace flatstate::hf {

// One code point's decoding and encoding (engine/util/utf8.h), as the tokenizer pieces call them.
using ::flatstate::AppendUtf8;
using ::flatstate::DecodeUtf8;
// `s` with every ill-formed subsequence replaced by U+FFFD (maximal subparts, as Rust's
// String::from_utf8_lossy); returns true iff it changed anything.
bool MakeValidUtf8(std::string_view s, std::string* out);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool IsWhitespace(char32_t c);
// Rust's char::is_numeric (general categories Nd, Nl, No).
bool IsNumeric(char32_t c);
// Rust's char::is_alphanumeric (approximated as categories L*, Nd, Nl, No, plus Mn/Mc).
bool IsAlphanumeric(char32_t c);
// The upstream `is_punc`: ASCII punctuation or a Unicode P* category.
bool IsPunctuation(char32_t c);

// GPT-2's byte-level alphabet: every byte maps to one printable code point.
const std::string& ByteToChar(uint8_t b);  // UTF-8 of the code point for byte b
// The byte a code point stands for, or -1 when it is not in the alphabet.
int CharToByte(char32_t c);

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_TEXT_UTIL_H_
