#include "engine/util/byte_reader.h"

#include <bit>

#include "absl/strings/str_cat.h"
#include "engine/util/little_endian.h"
#include "engine/util/status_macros.h"

namespace flatstate {

absl::Status ByteReader::Need(size_t n, const char* field) const {
  if (n > remaining()) {
    return absl::DataLossError(absl::StrCat("truncated ", noun_, ": field ", field, " at offset ",
                                            pos_, " needs ", n, " bytes, ", remaining(),
                                            " left"));
  }
  return absl::OkStatus();
}

absl::Status ByteReader::U8(const char* field, uint8_t* v) {
  RETURN_IF_ERROR(Need(1, field));
  *v = static_cast<uint8_t>(data_[pos_++]);
  return absl::OkStatus();
}

absl::Status ByteReader::U32(const char* field, uint32_t* v) {
  RETURN_IF_ERROR(Need(4, field));
  *v = LoadLe32(data_.data() + pos_);
  pos_ += 4;
  return absl::OkStatus();
}

absl::Status ByteReader::U64(const char* field, uint64_t* v) {
  RETURN_IF_ERROR(Need(8, field));
  *v = LoadLe64(data_.data() + pos_);
  pos_ += 8;
  return absl::OkStatus();
}

absl::Status ByteReader::I32(const char* field, int32_t* v) {
  uint32_t u = 0;
  RETURN_IF_ERROR(U32(field, &u));
  *v = static_cast<int32_t>(u);
  return absl::OkStatus();
}

absl::Status ByteReader::I64(const char* field, int64_t* v) {
  uint64_t u = 0;
  RETURN_IF_ERROR(U64(field, &u));
  *v = static_cast<int64_t>(u);
  return absl::OkStatus();
}

absl::Status ByteReader::F32(const char* field, float* v) {
  uint32_t u = 0;
  RETURN_IF_ERROR(U32(field, &u));
  *v = std::bit_cast<float>(u);
  return absl::OkStatus();
}

absl::Status ByteReader::Bytes(const char* field, size_t n, std::string_view* v) {
  RETURN_IF_ERROR(Need(n, field));
  *v = data_.substr(pos_, n);
  pos_ += n;
  return absl::OkStatus();
}

}  // namespace flatstate
