#include "engine/arch/hf_tensors.h"

#include <cmath>
#include <cstring>
#include <set>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/bf16.h"

namespace flatstate {
namespace {

// IEEE half -> float, exact (subnormals, infinities and NaN included).
float FloatFromF16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    mag = man == 0 ? INFINITY : NAN;
  } else {
    mag = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &mag, sizeof(bits));
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// Elements [first, first + n) of `t` as floats (exact for BF16 and F16).
void WidenRows(const TensorView& t, int64_t first, int64_t n, float* out) {
  if (t.dtype == "F32") {
    std::memcpy(out, t.f32() + first, sizeof(float) * n);
  } else if (t.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) out[i] = FloatFromBf16(t.bf16()[first + i]);
  } else {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(t.data) + first;
    for (int64_t i = 0; i < n; ++i) out[i] = FloatFromF16(h[i]);
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::Status BindHfTensors(const std::vector<HfTensor>& table,
                           const std::vector<std::string>& ignored_suffixes,
                           absl::string_view family, const WeightFiles& files, ModelConfig* config,
                           TensorStore* store, const std::vector<std::string>& ignored_prefixes) {
  // Pass 1: presence, dtype and shape of every source; whether every GEMM source is BF16.
  std::set<std::string_view> named;
  bool all_gemm_bf16 = true;
  for (const HfTensor& e : table) {
    for (size_t i = 0; i < e.names.size(); ++i) {
      named.insert(e.names[i]);
      const WeightFiles::Found f = files.Find(e.names[i]);
      if (f.tensor == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(files.description(), ": tensor '", e.names[i], "' is missing (", family,
                         " with this config.json needs it, shape ", ShapeString(e.shapes[i]), ")"));
      }
      const TensorView& t = *f.tensor;
      const std::string where = absl::StrCat(*f.path, ": tensor '", t.name, "'");
      if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16") {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": unsupported dtype '", t.dtype, "' (expected F32, BF16 or F16)"));
      }
      if (t.shape != e.shapes[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": expected shape ", ShapeString(e.shapes[i]), ", got ", ShapeString(t.shape)));
      }
      if (e.kind == HfTensor::Kind::kGemm && t.dtype != "BF16") all_gemm_bf16 = false;
      if (i < e.rows.size()) {
        for (const auto& [first, count] : e.rows[i]) {
          if (first < 0 || count < 0 || first + count > t.shape[0]) {
            return absl::InvalidArgumentError(absl::StrCat(where, ": rows [", first, ", ",
                                                           first + count, ") outside its ",
                                                           t.shape[0], " rows"));
          }
        }
      }
    }
  }
  for (const WeightFiles::Found& f : files.All()) {
    const std::string& name = f.tensor->name;
    if (named.count(name) != 0) continue;
    bool ignored = false;
    for (const std::string& s : ignored_suffixes) ignored = ignored || absl::EndsWith(name, s);
    for (const std::string& s : ignored_prefixes) ignored = ignored || absl::StartsWith(name, s);
    if (ignored) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        *f.path, ": unexpected tensor '", name, "' (not part of ", family, " with this config.json",
        name == "lm_head.weight" && config->tie_word_embeddings
            ? ": tie_word_embeddings is true, so the output head is the embedding matrix"
            : "",
        ")"));
  }
  config->torch_dtype = all_gemm_bf16 ? TorchDtype::kBfloat16 : TorchDtype::kFloat32;

  // Pass 2: bind, converting and fusing where needed. A piece is rows [first, first + count)
  // of one source; a source without a row selection is one piece of all its rows.
  struct Piece {
    const TensorView* t;
    int64_t first, count;
  };
  // Elements per row (the product of every dimension after the first).
  auto row_elems = [](const TensorView* t) {
    return t->shape.empty() || t->shape[0] == 0 ? int64_t{1} : t->num_elements() / t->shape[0];
  };
  for (const HfTensor& e : table) {
    std::vector<Piece> pieces;
    int64_t rows = 0, cols = 1;
    bool whole = true;  // every piece is a whole source
    for (size_t i = 0; i < e.names.size(); ++i) {
      const TensorView* t = files.Find(e.names[i]).tensor;
      cols = row_elems(t);
      if (i < e.rows.size() && !e.rows[i].empty()) {
        whole = false;
        for (const auto& [first, count] : e.rows[i]) pieces.push_back({t, first, count});
      } else {
        pieces.push_back({t, 0, t->shape[0]});
      }
    }
    for (const Piece& p : pieces) rows += p.count;
    const int64_t total = rows * cols;
    const bool single = pieces.size() == 1 && whole;
    if (e.kind == HfTensor::Kind::kGemm) {
      e.gemm->n = rows;
      e.gemm->k = cols;
      if (all_gemm_bf16) {
        if (single) {
          e.gemm->bf16 = pieces[0].t->bf16();
          continue;
        }
        uint16_t* out = store->NewBf16(total);
        e.gemm->bf16 = out;
        for (const Piece& p : pieces) {
          std::memcpy(out, p.t->bf16() + p.first * cols, sizeof(uint16_t) * p.count * cols);
          out += p.count * cols;
        }
        continue;
      }
      if (single && pieces[0].t->dtype == "F32") {
        e.gemm->f32 = pieces[0].t->f32();
        continue;
      }
      float* out = store->NewF32(total);
      e.gemm->f32 = out;
      for (const Piece& p : pieces) {
        WidenRows(*p.t, p.first * cols, p.count * cols, out);
        out += p.count * cols;
      }
      continue;
    }
    const bool offset = e.kind == HfTensor::Kind::kNorm && config->norm_unit_offset;
    float* copy = nullptr;  // the converted / fused / offset copy, when one is made
    if (single && pieces[0].t->dtype == "F32" && !offset) {
      *e.f32 = pieces[0].t->f32();
    } else {
      copy = store->NewF32(total);
      *e.f32 = copy;
      float* out = copy;
      for (const Piece& p : pieces) {
        WidenRows(*p.t, p.first * cols, p.count * cols, out);
        out += p.count * cols;
      }
    }
    if (e.kind != HfTensor::Kind::kNorm) continue;
    for (int64_t i = 0; i < total; ++i) {
      if (!std::isfinite((*e.f32)[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat(*files.Find(e.names[0]).path, ": tensor '", e.names[0], "': element ", i,
                         " is ", (*e.f32)[i], " (a norm weight must be finite)"));
      }
      if (offset) copy[i] += 1.f;  // offset implies a copy
    }
  }
  return absl::OkStatus();
}

}  // namespace flatstate
