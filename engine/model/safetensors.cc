#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/util/little_endian.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace flatstate {
namespace {

using json = nlohmann::json;

struct DtypeInfo {
  const char* name;
  size_t size;
};

// Every dtype of the safetensors format.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

absl::Status OsError(const std::string& path, const char* what, int err) {
  std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// A JSON value that is a non-negative integer fitting in int64.
bool AsNonNegative(const json& v, int64_t* out) {
  if (!v.is_number_unsigned()) return false;  // negative integers are number_integer
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = static_cast<int64_t>(u);
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t SafetensorsDtypeSize(std::string_view dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (dtype == d.name) return d.size;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(path, "cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return OsError(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(
        path, ": file is ", size, " bytes, shorter than the 8-byte header length (truncated)"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return OsError(path, "cannot mmap", map_err);

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->data_ = static_cast<const uint8_t*>(map);
  file->size_ = size;
  absl::Status s;
  try {
    s = file->Parse();
  } catch (const std::exception& e) {  // defensive: nlohmann must not escape this module
    s = absl::InvalidArgumentError(absl::StrCat(path, ": malformed header: ", e.what()));
  }
  if (!s.ok()) return s;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status SafetensorsFile::Parse() {
  const uint64_t header_len = LoadLe64(reinterpret_cast<const char*>(data_));
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": oversized header: header length ", header_len,
                     " exceeds the limit of ", kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_len > size_ - 8) {
    return absl::DataLossError(absl::StrCat(path_, ": header length ", header_len,
                                            " is larger than the file (", size_,
                                            " bytes); file truncated?"));
  }
  data_offset_ = 8 + header_len;
  const size_t data_size = size_ - data_offset_;
  const char* text = reinterpret_cast<const char*>(data_ + 8);
  const json header = json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header is not valid JSON"));
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header is not a JSON object"));
  }

  struct Range {
    int64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": __metadata__ must be an object of strings"));
      }
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path_, ": __metadata__ key '", k, "' must be a string"));
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat(path_, ": tensor '", name, "': ");
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(where, why));
    };
    if (!entry.is_object()) return bad("entry must be a JSON object");
    TensorView t;
    t.name = name;

    auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) return bad("missing or non-string 'dtype'");
    t.dtype = dt->get<std::string>();
    const size_t elem = SafetensorsDtypeSize(t.dtype);
    if (elem == 0) return bad(absl::StrCat("unknown dtype '", t.dtype, "'"));

    auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) return bad("missing or non-array 'shape'");
    int64_t count = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      int64_t v = 0;
      if (!AsNonNegative(d, &v)) return bad("'shape' must hold non-negative integers");
      t.shape.push_back(v);
      overflow |= __builtin_mul_overflow(count, v, &count);
    }

    auto off = entry.find("data_offsets");
    int64_t begin = 0, end = 0;
    if (off == entry.end() || !off->is_array() || off->size() != 2 ||
        !AsNonNegative((*off)[0], &begin) || !AsNonNegative((*off)[1], &end)) {
      return bad("'data_offsets' must be [begin, end] with non-negative integers");
    }
    const std::string offsets = absl::StrCat("data_offsets [", begin, ", ", end, "]");
    if (end < begin) return bad(absl::StrCat(offsets, ": end < begin"));
    if (static_cast<uint64_t>(end) > data_size) {
      return absl::DataLossError(absl::StrCat(where, offsets, " out of range (data section is ",
                                              data_size, " bytes)"));
    }
    int64_t want = 0;
    if (overflow || __builtin_mul_overflow(count, static_cast<int64_t>(elem), &want) ||
        want != end - begin) {
      return bad(absl::StrCat(offsets, " hold ", end - begin, " bytes but ", t.dtype, " ",
                              ShapeString(t.shape), " needs ",
                              overflow ? std::string("more than 2^63")
                                       : absl::StrCat(count * static_cast<int64_t>(elem)),
                              " bytes"));
    }
    t.data = data_ + data_offset_ + begin;
    t.size_bytes = static_cast<size_t>(end - begin);
    if (reinterpret_cast<uintptr_t>(t.data) % elem != 0) {
      return bad(absl::StrCat("misaligned: data starts at file offset ", data_offset_ + begin,
                              ", not a multiple of the ", t.dtype, " element size ", elem));
    }
    ranges.push_back({begin, end, tensors_.size()});
    tensors_.push_back(std::move(t));
  }

  // Overlaps: sort by begin; an empty tensor occupies no bytes and overlaps nothing.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Range* prev = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (prev != nullptr && r.begin < prev->end) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": tensor '", tensors_[r.index].name, "': data_offsets [", r.begin, ", ", r.end,
          "] overlaps tensor '", tensors_[prev->index].name, "' [", prev->begin, ", ", prev->end,
          "]"));
    }
    if (prev == nullptr || r.end > prev->end) prev = &r;
  }

  // Reorder tensors_ by data position and build the name index.
  std::vector<TensorView> ordered;
  ordered.reserve(tensors_.size());
  for (const Range& r : ranges) ordered.push_back(std::move(tensors_[r.index]));
  tensors_ = std::move(ordered);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  return absl::OkStatus();
}

}  // namespace flatstate
