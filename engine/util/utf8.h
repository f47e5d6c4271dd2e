// Decoding and encoding one UTF-8 code point: shared by the tokenizers (engine/tokenizer/) and
// the template language's string escapes (engine/template/). Stateless; thread-safe. Nothing here
// fails: an ill-formed byte decodes as one U+FFFD.
#ifndef FLATSTATE_ENGINE_UTIL_UTF8_H_
#define FLATSTATE_ENGINE_UTIL_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace flatstate {

// Decodes the code point starting at s[i] (i < s.size()) into *cp and returns its length in
// bytes; an ill-formed byte (overlong, surrogate, past U+10FFFF, truncated) returns 1 with
// *cp = 0xFFFD.
size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp);
// Appends the UTF-8 encoding of `cp` (<= U+10FFFF) to *out.
void AppendUtf8(char32_t cp, std::string* out);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_UTIL_UTF8_H_
