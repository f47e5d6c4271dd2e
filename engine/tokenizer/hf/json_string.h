// Reading one JSON string of a tokenizer.json for json_reader.cc, fast for the hundreds of
// thousands of short vocabulary and merge strings: a string without escapes is returned as a view
// of the text, found eight bytes at a time; one with escapes is decoded into a caller's buffer.
// Strings must be valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), with
// no control characters and paired \\u surrogates.
//
// A JsonStringScanner borrows the text and the buffer; it is used on one thread. Read fails
// returning false, with pos() at the offending byte and error() saying why.
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_JSON_STRING_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_JSON_STRING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flatstate::hf {

class JsonStringScanner {
 public:
  // The string whose opening quote is at text[pos]; *scratch holds an escaped one's bytes.
  JsonStringScanner(std::string_view text, size_t pos, std::string* scratch)
      : s_(text), pos_(pos), scratch_(scratch) {}

  // *out views the string (the text, or *scratch until its next use); pos() is then past the
  // closing quote.
  bool Read(std::string_view* out);
  size_t pos() const { return pos_; }
  const char* error() const { return error_; }

 private:
  bool Fail(const char* why) {
    error_ = why;
    return false;
  }
  bool Hex4(uint32_t* v);
  bool Run();
  static bool IsSpecial(uint8_t c) { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80; }
  static uint64_t Special8(const char* p);
  bool Escaped(std::string* out);

  std::string_view s_;
  size_t pos_;
  std::string* scratch_;
  const char* error_ = "";
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_JSON_STRING_H_
