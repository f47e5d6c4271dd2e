// Linear attention: feature maps, the recurrent step (decode) and the chunked-parallel form
// (prefill), over an fp32 state S [F][hd], z [F], M (a scalar) per (sequence, head).
//
// The math is tools/flatstate_ref/model.py's core, term for term. With per-key log-stabilisers
// m_j (zero for every map but FAVOR+) and the running max M_i = max(M_prev, m_..i), key j weighs
// fk_j * exp(m_j - M_i) as seen from row i; S and z are stored relative to M and are rescaled by
// exp(M_old - M_new) when M grows (exp(-inf) = 0 for a fresh FAVOR+ state). Outputs:
//   o_i = (fq_i^T S_i) / (fq_i . z_i + eps)   (no denominator for cosine).
// Recurrent (T == 1) and chunked (T > 1) forms agree up to fp32 rounding. Chunks are aligned to
// absolute positions (multiples of `chunk`), so splitting a prompt at such multiples never changes
// a single float (tests/kernels/linear_attention_test.cc).
//
// The op is LinearAttention<D> over a LinearBatch: every (sequence, head) of one layer of a step.
// kCpu body: one task per (sequence, head) on `par`, each running LinearAttentionCpu with
// per-thread scratch. kCuda body (cuda/linear_attention.cu): a fused decode kernel for the T == 1
// sequences and a features + chunk kernel pair for the others, asynchronous on cuda::Stream().
#ifndef FLATSTATE_KERNELS_LINEAR_ATTENTION_H_
#define FLATSTATE_KERNELS_LINEAR_ATTENTION_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device.h"
#include "kernels/parallel.h"

namespace flatstate {

enum class FeatureMap { kEluPlusOne, kCosformer, kCosine, kFavor };

// The largest head_dim the kernels take: the CPU's FAVOR+ features keep two head_dim-float
// arrays on the stack. CheckLinearAttentionShape enforces it.
inline constexpr int kMaxHeadDim = 1024;

struct LinearHead {
  FeatureMap map = FeatureMap::kEluPlusOne;
  int head_dim = 0;     // q, k, v length
  int feature_dim = 0;  // F: hd, 2*hd (cosformer) or favor_num_features
  float eps = 1e-6f;
  bool use_den = true;                  // false for cosine
  double cosformer_step = 0;            // pi / (2 * horizon)
  double cosine_exponent = 0;           // sigmoid(m_h): values scaled by t^-exponent, t = pos + 1
  const float* feature_proj = nullptr;  // favor: [F, hd]; gated: [F/2, hd]; device memory
  float rfa_scale = 1.f;                // gated: exp(feature_log_scale[h])
  float gate_bias = 0.f;                // gated: gate.bias[h]
};

// The element-wise feature maps, written once for the CPU and CUDA bodies: they fill elements
// i = i0, i0 + step, ... < hd of fq and fk (CPU: i0 = 0, step = 1; CUDA: the thread's index and
// the block size). elu+1: x > 0 ? x + 1 : exp(x). cosFormer: relu(x) * cos and relu(x) * sin of
// the position's angle (c, s), into [0, hd) and [hd, 2 hd); relu(x) is std::max(x, 0).
FS_HOST_DEVICE inline void EluPlusOneFeatures(const float* q, const float* k, int hd, int i0,
                                              int step, float* fq, float* fk) {
  for (int i = i0; i < hd; i += step) {
    fq[i] = q[i] > 0.f ? q[i] + 1.f : expf(q[i]);
    fk[i] = k[i] > 0.f ? k[i] + 1.f : expf(k[i]);
  }
}
FS_HOST_DEVICE inline void CosformerFeatures(const float* q, const float* k, int hd, float c,
                                             float s, int i0, int step, float* fq, float* fk) {
  for (int i = i0; i < hd; i += step) {
    const float rq = q[i] < 0.f ? 0.f : q[i], rk = k[i] < 0.f ? 0.f : k[i];
    fq[i] = rq * c;
    fq[hd + i] = rq * s;
    fk[i] = rk * c;
    fk[hd + i] = rk * s;
  }
}

// OK when D's kernels take this shape: head_dim in [1, kMaxHeadDim] (kCuda also: the shared
// memory the kernels need for head_dim, feature_dim and chunk fits the default 48 KiB).
// InvalidArgument naming the limit otherwise.
template <Device D>
absl::Status CheckLinearAttentionShape(int head_dim, int feature_dim, int chunk);

// Floats of scratch one (sequence, head) needs for T tokens with chunk size `chunk`.
size_t LinearAttentionScratch(const LinearHead& h, int64_t T, int chunk);

// One sequence of a batched call.
struct LinearSeq {
  int64_t row = 0;           // first row in q / k / v / out
  int64_t T = 0;             // tokens this call
  int64_t pos0 = 0;          // absolute position of the first token
  float* state = nullptr;    // the sequence's state; this layer's slice at state + layer_offset
  int64_t scratch = 0;       // offset (floats) of the sequence's scratch in `workspace`
  int64_t head_scratch = 0;  // floats per head: LinearAttentionScratch(head, T, chunk)
  // T > 1 only: run the recurrent form token by token (each token the bits of a one-token decode
  // step) instead of the chunked form: a speculative verification (engine.h). The CPU bodies
  // only (cpu::ForEachSequenceHead); ForwardPass refuses it elsewhere.
  bool stepwise = false;
  // Stepwise only, or null: where the state after each token t < T - 1 goes, at
  // steps + t * steps_stride, laid out as `state` is (the same offsets). Each op writes the parts
  // it advances (cpu::RecordStep), so once every layer ran, record t is the whole state after
  // token t: a speculative step that keeps t + 1 tokens takes it instead of running them again.
  float* steps = nullptr;
  int64_t steps_stride = 0;
};

// The part of a batched call every grouped-head recurrence shares (GatedDeltaBatch,
// GatedLinearBatch): every (sequence, value head) of one layer. Row r, key head j: q at
// q + r*qk_stride + j*key_dim (k likewise); value head h (reading key head h / (value_heads /
// key_heads)): v at v + r*v_stride + h*value_dim, output at out + r*out_stride + h*value_dim.
// Sequences are LinearSeq descriptors: their state's layer slice at state + layer_offset, S of
// head h [key_dim][value_dim] at + s_off + h * key_dim * value_dim. All pointers are in the op's
// device memory.
struct GroupedHeadBatch {
  int key_heads = 0, value_heads = 0;
  int key_dim = 0, value_dim = 0;
  float scale = 1.f;  // q's scale
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t layer_offset = 0;
  int64_t s_off = 0;
  int chunk = 64;
  const LinearSeq* decode = nullptr;  // T == 1
  int num_decode = 0;
  const LinearSeq* prefill = nullptr;  // T > 1
  int num_prefill = 0;
};

// Every (sequence, head) of one layer. All pointers, the descriptor arrays included, are in the
// op's device memory.
struct LinearBatch {
  const LinearHead* heads = nullptr;  // [H]
  int H = 0;
  int head_dim = 0, feature_dim = 0;  // every head's (host copies: launch shapes)
  // Row r, head h: q at q + r*in_stride + h*hd (same for k, v); output at
  // out + r*out_stride + h*hd.
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t in_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t layer_offset = 0;                 // floats from LinearSeq::state to this layer's slice
  int64_t s_off = 0, z_off = 0, m_off = 0;  // S [H][F][hd], z [H][F], M [H] inside the slice
  // GatedAttention only: row r's gate logit of head h (before gate_bias) at gate + r*in_stride
  // + h.
  const float* gate = nullptr;
  int chunk = 64;
  const LinearSeq* decode = nullptr;  // [num_decode] sequences with T == 1
  int num_decode = 0;
  const LinearSeq* prefill = nullptr;  // [num_prefill] sequences with T > 1
  int num_prefill = 0;
  // Prefill row i (of prefill_rows = sum of their T) is token row_t[i] of prefill[row_seq[i]].
  const int32_t* row_seq = nullptr;
  const int64_t* row_t = nullptr;
  int64_t prefill_rows = 0;
  // Each prefill sequence's scratch at LinearSeq::scratch, head h at + h * head_scratch; laid
  // out as LinearAttentionCpu's. Only read where kLinearAttentionWorkspace<D> (else null).
  float* workspace = nullptr;
};

// Whether LinearAttention<D> uses LinearBatch::workspace; the kCpu body keeps per-thread scratch.
template <Device D>
inline constexpr bool kLinearAttentionWorkspace = D != Device::kCpu;

// Updates every sequence's S, z, M and writes its output rows. `par` runs the kCpu tasks (the
// kCuda body ignores it). Sequences must not share state.
template <Device D>
void LinearAttention(const LinearBatch& b, const Parallel& par);

// The CPU body of one (sequence, head): q, k, v row t at q + t * in_stride; positions pos0 ..
// pos0 + T - 1. Updates S, z, *M; writes row t of the output at out + t * out_stride. `scratch`
// holds LinearAttentionScratch(h, T, chunk) floats. Host memory; h.head_dim <= kMaxHeadDim.
// Thread-compatible: different (sequence, head) pairs may run on different threads.
void LinearAttentionCpu(const LinearHead& h, const float* q, const float* k, const float* v,
                        int64_t in_stride, int64_t T, int64_t pos0, int chunk, float* S, float* z,
                        float* M, float* out, int64_t out_stride, float* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_LINEAR_ATTENTION_H_
