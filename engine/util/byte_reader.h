// ByteReader: bounds-checked little-endian reads from a range of a byte buffer, for parsing
// untrusted binary blobs (session checkpoints). Each read names its field, so a failure says
// which field of the blob is cut off.
//
// Views its buffer (owns nothing; the buffer must outlive it). Thread-compatible. A read that
// would pass the end of the range fails with DataLoss
//   "truncated <noun>: field <field> at offset <pos> needs <n> bytes, <left> left"
// and leaves the position and the output unchanged. Never crashes on any input.
#ifndef FLATSTATE_ENGINE_UTIL_BYTE_READER_H_
#define FLATSTATE_ENGINE_UTIL_BYTE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace flatstate {

class ByteReader {
 public:
  // Reads bytes [begin, end) of `data`; requires begin <= end <= data.size(). `noun` names the
  // blob in messages ("checkpoint") and must outlive the reader (a string literal).
  ByteReader(const char* noun, std::string_view data, size_t begin, size_t end)
      : noun_(noun), data_(data), pos_(begin), end_(end) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return end_ - pos_; }

  // OK iff `n` more bytes can be read.
  absl::Status Need(size_t n, const char* field) const;

  absl::Status U8(const char* field, uint8_t* v);
  absl::Status U32(const char* field, uint32_t* v);
  absl::Status U64(const char* field, uint64_t* v);
  absl::Status I32(const char* field, int32_t* v);  // two's complement
  absl::Status I64(const char* field, int64_t* v);
  absl::Status F32(const char* field, float* v);    // by bit pattern
  // `n` bytes as a view into the buffer.
  absl::Status Bytes(const char* field, size_t n, std::string_view* v);

 private:
  const char* noun_;
  std::string_view data_;
  size_t pos_;
  size_t end_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_UTIL_BYTE_READER_H_
