// Weights that arrive already quantised (kernels/gemm.h, QuantizedWeightView: a model file's
// stored int8 / int4 layout): the stored layout's helpers, the CPU packing from quants and
// scales, and PrepareGemmWeightQuantized<kCpu>.
//
// PackedWeight::PackQuantized places each quant and scale where PackInt8 / PackInt4
// (cpu/gemm_int8.cc, cpu/gemm_int4.cc) place the ones they compute, padding (columns past n, k
// past the end) included, so a weight quantised by QuantizeWeight and packed here is the
// PackedWeight::Pack of its fp32 values byte for byte (tests/kernels/gemm_stored_test.cc).
#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/gemm.h"

namespace flatstate {
namespace {

constexpr int64_t kB = PackedWeight::kInt8Block;
constexpr int64_t kP = PackedWeight::kPanel;
constexpr int64_t kGroupBytes = kP * 4;  // the packed blocks' 4 bytes x 64 columns groups

// Quant kk of row j (kk < k).
int QuantAt(const QuantizedWeightView& w, int64_t j, int64_t kk) {
  if (w.dtype == WeightDtype::kInt4) {
    const uint8_t byte = w.q[j * ((w.k + 1) / 2) + kk / 2];
    return ((kk % 2 == 0) ? (byte & 15) : (byte >> 4)) - 8;
  }
  return static_cast<int8_t>(w.q[j * w.k + kk]);
}

// Block b of column c as 32 quants (zero past k and for c >= n) and its scale (0 for c >= n).
float BlockQuants(const QuantizedWeightView& w, int64_t c, int64_t b, int8_t* q) {
  std::memset(q, 0, kB);
  if (c >= w.n) return 0.f;
  const int64_t len = std::min(kB, w.k - b * kB);
  for (int64_t t = 0; t < len; ++t) q[t] = static_cast<int8_t>(QuantAt(w, c, b * kB + t));
  return w.scales[c * QuantizedBlocks(w.k) + b];
}

// The kInt8 / kInt4 panels of kernels/gemm.h from stored quants, into `out`.
void PackFromQuants(const QuantizedWeightView& w, uint8_t* out) {
  const bool int4 = w.dtype == WeightDtype::kInt4;
  const size_t block_bytes = int4 ? PackedWeight::kInt4BlockBytes : PackedWeight::kInt8BlockBytes;
  const size_t scales_at = int4 ? 4 * kGroupBytes : 8 * kGroupBytes;
  const int64_t panels = (w.n + kP - 1) / kP, nb = QuantizedBlocks(w.k);
  int8_t q[kB];
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = out + (p * nb + b) * block_bytes;
      float* scales = reinterpret_cast<float*>(blk + scales_at);
      for (int64_t j = 0; j < kP; ++j) {
        scales[j] = BlockQuants(w, p * kP + j, b, q);
        if (!int4) {
          for (int64_t t = 0; t < kB; ++t) {
            blk[(t / 4) * kGroupBytes + j * 4 + t % 4] = static_cast<uint8_t>(q[t] + 128);
          }
          continue;
        }
        for (int64_t g = 0; g < 4; ++g) {
          for (int64_t t = 0; t < 4; ++t) {
            blk[g * kGroupBytes + j * 4 + t] =
                static_cast<uint8_t>((q[8 * g + t] + 8) | ((q[8 * g + 4 + t] + 8) << 4));
          }
        }
      }
    }
  }
}

}  // namespace

int64_t QuantizedRowBytes(WeightDtype dtype, int64_t k) {
  return dtype == WeightDtype::kInt4 ? (k + 1) / 2 : k;
}

int64_t QuantizedBlocks(int64_t k) { return (k + kB - 1) / kB; }

QuantizedWeight QuantizeWeight(const float* w, int64_t n, int64_t k, WeightDtype dtype) {
  QuantizedWeight out;
  out.dtype = dtype;
  out.n = n;
  out.k = k;
  const int64_t row_bytes = QuantizedRowBytes(dtype, k), nb = QuantizedBlocks(k);
  out.q.assign(static_cast<size_t>(n * row_bytes), 0);
  out.scales.assign(static_cast<size_t>(n * nb), 0.f);
  int8_t q[kB];
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* row = out.q.data() + j * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t len = std::min(kB, k - b * kB);
      const float* block = w + j * k + b * kB;
      out.scales[j * nb + b] = dtype == WeightDtype::kInt4 ? QuantizeBlockInt4(block, len, q)
                                                           : QuantizeBlockInt8(block, len, q);
      for (int64_t t = 0; t < len; ++t) {
        const int64_t kk = b * kB + t;
        if (dtype != WeightDtype::kInt4) {
          row[kk] = static_cast<uint8_t>(q[t]);
        } else if (kk % 2 == 0) {
          row[kk / 2] = static_cast<uint8_t>((q[t] + 8) | (row[kk / 2] & 0xF0));
        } else {
          row[kk / 2] = static_cast<uint8_t>((row[kk / 2] & 0x0F) | ((q[t] + 8) << 4));
        }
      }
    }
    if (dtype == WeightDtype::kInt4 && k % 2 == 1)
      row[k / 2] |= uint8_t{8 << 4};  // zero pad nibble
  }
  return out;
}

QuantizedWeight ConcatRows(const QuantizedWeightView& a, const QuantizedWeightView& b) {
  QuantizedWeight out;
  out.dtype = a.dtype;
  out.n = a.n + b.n;
  out.k = a.k;
  const int64_t row_bytes = QuantizedRowBytes(a.dtype, a.k), nb = QuantizedBlocks(a.k);
  out.q.assign(a.q, a.q + a.n * row_bytes);
  out.q.insert(out.q.end(), b.q, b.q + b.n * row_bytes);
  out.scales.assign(a.scales, a.scales + a.n * nb);
  out.scales.insert(out.scales.end(), b.scales, b.scales + b.n * nb);
  return out;
}

void DequantizeWeight(const QuantizedWeightView& w, float* out) {
  const int64_t nb = QuantizedBlocks(w.k);
  for (int64_t j = 0; j < w.n; ++j) {
    for (int64_t kk = 0; kk < w.k; ++kk) {
      out[j * w.k + kk] = static_cast<float>(QuantAt(w, j, kk)) * w.scales[j * nb + kk / kB];
    }
  }
}

void UnpackQuants(const QuantizedWeightView& w, int8_t* out) {
  const int64_t nb = QuantizedBlocks(w.k);
  std::memset(out, 0, static_cast<size_t>(w.n * nb * kB));
  for (int64_t j = 0; j < w.n; ++j) {
    for (int64_t kk = 0; kk < w.k; ++kk)
      out[j * nb * kB + kk] = static_cast<int8_t>(QuantAt(w, j, kk));
  }
}

PackedWeight PackedWeight::PackQuantized(const QuantizedWeightView& w) {
  PackedWeight pw = Allocate(w.dtype, w.n, w.k);
  PackFromQuants(w, pw.data_.get());
  return pw;
}

absl::Status CheckQuantizedTarget(const QuantizedWeightView& w, WeightDtype target) {
  if (w.dtype != WeightDtype::kInt8 && w.dtype != WeightDtype::kInt4) {
    return absl::InvalidArgumentError(
        absl::StrCat("a quantised weight must be int8 or int4, not ", WeightDtypeName(w.dtype)));
  }
  if (target == w.dtype || target == WeightDtype::kF32 || target == WeightDtype::kBf16 ||
      target == WeightDtype::kBf16Dot) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "a weight stored as ", WeightDtypeName(w.dtype), " cannot be prepared as ",
      WeightDtypeName(target), " (quantised weights are not quantised again; f32, bf16 or ",
      WeightDtypeName(w.dtype), " can run it)"));
}

template <>
absl::StatusOr<GemmWeight<Device::kCpu>> PrepareGemmWeightQuantized<Device::kCpu>(
    const QuantizedWeightView& w, const GemmWeightOptions& options) {
  if (absl::Status st = CheckQuantizedTarget(w, options.dtype); !st.ok()) return st;
  try {
    if (options.dtype != w.dtype) {
      std::vector<float> wide(static_cast<size_t>(w.n * w.k));
      DequantizeWeight(w, wide.data());
      return PrepareGemmWeight<Device::kCpu>(wide.data(), w.n, w.k, options);
    }
    GemmWeight<Device::kCpu> gw;
    gw.dtype = options.dtype;
    gw.n = w.n;
    gw.k = w.k;
    gw.batch_invariant = options.batch_invariant;
    gw.packed = PackedWeight::PackQuantized(w);
    return gw;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory preparing a ", w.n, " x ", w.k, " ",
                     WeightDtypeName(w.dtype), " weight as ", WeightDtypeName(options.dtype)));
  }
}

}  // namespace flatstate
