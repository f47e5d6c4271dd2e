#include "engine/runtime/forward_cuda.h"

#include "absl/strings/str_cat.h"
#include "kernels/device.h"

#ifdef FLATSTATE_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstring>

#include "engine/session/session_state.h"
#include "engine/util/status_macros.h"
#include "kernels/cuda/batched_ops.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace flatstate {

using cuda::DeviceBuffer;

namespace {

constexpr size_t kSmemLimit = 48 * 1024;  // default dynamic shared memory per block (no opt-in)

struct DeviceLayer {
  const float* attn_norm = nullptr;
  const float* conv = nullptr;
  const float* wqkv = nullptr;
  const float* wo = nullptr;
  const float* mlp_norm = nullptr;
  const float* w1 = nullptr;
  const float* w2 = nullptr;
};

// Grows `buf` to hold `n` elements of T (contents not preserved) and copies `host` into it.
template <typename T>
absl::Status Upload(DeviceBuffer* buf, const std::vector<T>& host) {
  if (host.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(buf->Reserve(sizeof(T) * host.size()));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf->data(), host.data(), sizeof(T) * host.size(),
                                       cudaMemcpyHostToDevice, cuda::Stream()));
  return absl::OkStatus();
}

}  // namespace

struct ForwardCuda::Impl {
  const Model* model = nullptr;
  const ModelConfig* cfg = nullptr;
  KvBlockPool* kv = nullptr;
  int chunk = 64;
  LinearStateLayout layout;
  SerialParallel serial;  // Gemm<kCuda> ignores it

  DeviceBuffer weights;  // every weight tensor, uploaded once
  const float* embed = nullptr;
  const float* norm = nullptr;
  const float* lm_head = nullptr;
  std::vector<DeviceLayer> layers;
  DeviceBuffer heads;  // LinearHead [L * H], favor_proj re-pointed at `weights`
  DeviceBuffer kv_pool;
  cuda::PagedPool pool;

  // Per-step device workspace (grown as needed) and the host arrays staged into it. The host
  // vectors are members so that they outlive the asynchronous copies of a step.
  DeviceBuffer x, h, h2, qkv, att, mlp, last, logits, tokens, out_rows, state, ws;
  DeviceBuffer dec_seqs, pre_seqs, row_seq, row_t, conv_seqs, paged_rows, tables;
  std::vector<int32_t> h_tokens, h_out_rows, h_row_seq, h_tables;
  std::vector<int64_t> h_row_t;
  std::vector<float> h_state;
  std::vector<cuda::LinearSeq> h_dec, h_pre;
  std::vector<cuda::ConvSeq> h_conv;
  std::vector<cuda::PagedRow> h_paged;

  absl::Status UploadWeights(const std::vector<LinearHead>& host_heads);
  absl::Status Run(std::span<const SequenceRun> batch, const std::vector<int64_t>& row_start,
                   std::vector<float>* out);
};

absl::Status ForwardCuda::Impl::UploadWeights(const std::vector<LinearHead>& host_heads) {
  const ModelConfig& c = *cfg;
  const ModelWeights& w = model->weights();
  const int64_t D = c.hidden_size, V = c.vocab_size, FF = c.intermediate_size;
  const int64_t K = c.conv_kernel_size, hd = c.head_dim;
  const int64_t NF = c.attention_kind == AttentionKind::kFavor ? c.favor_num_features : 0;
  // (host pointer, floats) of every tensor, in upload order.
  std::vector<std::pair<const float*, int64_t>> tensors;
  tensors.emplace_back(w.embed, V * D);
  for (const LayerWeights& lw : w.layers) {
    tensors.emplace_back(lw.attn_norm, D);
    tensors.emplace_back(lw.conv, lw.conv != nullptr ? D * K : 0);
    tensors.emplace_back(lw.wqkv, 3 * D * D);
    tensors.emplace_back(lw.wo, D * D);
    tensors.emplace_back(lw.feature_proj, lw.feature_proj != nullptr ? NF * hd : 0);
    tensors.emplace_back(lw.mlp_norm, D);
    tensors.emplace_back(lw.w1, FF * D);
    tensors.emplace_back(lw.w2, D * FF);
  }
  tensors.emplace_back(w.norm, D);
  tensors.emplace_back(w.lm_head, V * D);
  int64_t total = 0;
  for (const auto& t : tensors) total += t.second;
  RETURN_IF_ERROR(weights.Reserve(sizeof(float) * total));
  std::vector<const float*> dev(tensors.size(), nullptr);
  float* p = weights.as<float>();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].first == nullptr || tensors[i].second == 0) continue;
    CUDA_RETURN_IF_ERROR(cudaMemcpy(p, tensors[i].first, sizeof(float) * tensors[i].second,
                                    cudaMemcpyHostToDevice));
    dev[i] = p;
    p += tensors[i].second;
  }
  size_t i = 0;
  embed = dev[i++];
  std::vector<const float*> proj;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    DeviceLayer dl;
    dl.attn_norm = dev[i++];
    dl.conv = dev[i++];
    dl.wqkv = dev[i++];
    dl.wo = dev[i++];
    proj.push_back(dev[i++]);
    dl.mlp_norm = dev[i++];
    dl.w1 = dev[i++];
    dl.w2 = dev[i++];
    layers.push_back(dl);
  }
  norm = dev[i++];
  lm_head = dev[i++];
  if (!host_heads.empty()) {
    std::vector<LinearHead> hh = host_heads;
    const int H = c.num_attention_heads;
    for (size_t j = 0; j < hh.size(); ++j) hh[j].favor_proj = proj[j / H];
    RETURN_IF_ERROR(heads.Reserve(sizeof(LinearHead) * hh.size()));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(heads.data(), hh.data(), sizeof(LinearHead) * hh.size(),
                                    cudaMemcpyHostToDevice));
  }
  return absl::OkStatus();
}

absl::Status ForwardCuda::Impl::Run(std::span<const SequenceRun> batch,
                                    const std::vector<int64_t>& row_start,
                                    std::vector<float>* out) {
  const ModelConfig& c = *cfg;
  const int64_t D = c.hidden_size, FF = c.intermediate_size, V = c.vocab_size;
  const int H = c.num_attention_heads, hd = c.head_dim, K = c.conv_kernel_size;
  const int F = c.is_linear() ? c.feature_dim() : 0;
  const int B = static_cast<int>(batch.size());
  const int64_t N = row_start.back();
  RETURN_IF_ERROR(cuda::TakeError());  // a stale error must not be blamed on this step
  cudaStream_t stream = cuda::Stream();
  RETURN_IF_ERROR(x.Reserve(sizeof(float) * N * D));
  RETURN_IF_ERROR(h.Reserve(sizeof(float) * N * D));
  RETURN_IF_ERROR(h2.Reserve(sizeof(float) * N * D));
  RETURN_IF_ERROR(att.Reserve(sizeof(float) * N * D));
  RETURN_IF_ERROR(qkv.Reserve(sizeof(float) * N * 3 * D));
  RETURN_IF_ERROR(mlp.Reserve(sizeof(float) * N * FF));

  h_tokens.clear();
  h_out_rows.clear();
  for (int s = 0; s < B; ++s) {
    h_tokens.insert(h_tokens.end(), batch[s].tokens.begin(), batch[s].tokens.end());
    if (batch[s].all_logits) {
      for (int64_t r = row_start[s]; r < row_start[s + 1]; ++r) {
        h_out_rows.push_back(static_cast<int32_t>(r));
      }
    } else {
      h_out_rows.push_back(static_cast<int32_t>(row_start[s + 1] - 1));
    }
  }
  RETURN_IF_ERROR(Upload(&tokens, h_tokens));
  RETURN_IF_ERROR(Upload(&out_rows, h_out_rows));

  const int64_t per_session = static_cast<int64_t>(layout.per_layer) * c.num_hidden_layers;
  int64_t pre_rows = 0;
  if (c.is_linear()) {
    h_state.resize(static_cast<size_t>(B * per_session));
    for (int s = 0; s < B; ++s) {
      std::memcpy(h_state.data() + s * per_session, batch[s].state->linear.data(),
                  sizeof(float) * per_session);
    }
    RETURN_IF_ERROR(Upload(&state, h_state));
    float* st = state.as<float>();
    h_dec.clear();
    h_pre.clear();
    h_conv.clear();
    h_row_seq.clear();
    h_row_t.clear();
    int64_t ws_floats = 0;
    for (int s = 0; s < B; ++s) {
      const int64_t T = row_start[s + 1] - row_start[s];
      cuda::LinearSeq q;
      q.row = row_start[s];
      q.T = T;
      q.pos0 = batch[s].state->position;
      q.state = st + s * per_session;
      if (K > 0) h_conv.push_back(cuda::ConvSeq{q.row, T, q.state + layout.conv});
      if (T == 1) {
        h_dec.push_back(q);
        continue;
      }
      LinearHead shape;  // the scratch size depends on head_dim and feature_dim only
      shape.head_dim = hd;
      shape.feature_dim = F;
      q.head_scratch = static_cast<int64_t>(LinearAttentionScratch(shape, T, chunk));
      q.scratch = ws_floats;
      ws_floats += q.head_scratch * H;
      for (int64_t t = 0; t < T; ++t) {
        h_row_seq.push_back(static_cast<int32_t>(h_pre.size()));
        h_row_t.push_back(t);
      }
      h_pre.push_back(q);
    }
    pre_rows = static_cast<int64_t>(h_row_t.size());
    RETURN_IF_ERROR(ws.Reserve(sizeof(float) * ws_floats));
    RETURN_IF_ERROR(Upload(&dec_seqs, h_dec));
    RETURN_IF_ERROR(Upload(&pre_seqs, h_pre));
    RETURN_IF_ERROR(Upload(&conv_seqs, h_conv));
    RETURN_IF_ERROR(Upload(&row_seq, h_row_seq));
    RETURN_IF_ERROR(Upload(&row_t, h_row_t));
  } else {
    h_tables.clear();
    h_paged.clear();
    for (int s = 0; s < B; ++s) {
      const SessionState* st = batch[s].state;
      const int64_t table = static_cast<int64_t>(h_tables.size());
      h_tables.insert(h_tables.end(), st->kv_blocks.begin(), st->kv_blocks.end());
      for (int64_t r = row_start[s]; r < row_start[s + 1]; ++r) {
        h_paged.push_back(cuda::PagedRow{r, st->position + (r - row_start[s]) + 1, table});
      }
    }
    RETURN_IF_ERROR(Upload(&tables, h_tables));
    RETURN_IF_ERROR(Upload(&paged_rows, h_paged));
  }

  float* xd = x.as<float>();
  float* hdv = h.as<float>();
  float* h2d = h2.as<float>();
  float* qkvd = qkv.as<float>();
  float* attd = att.as<float>();
  float* mlpd = mlp.as<float>();
  cuda::GatherRows(embed, tokens.as<int32_t>(), N, D, xd);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& lw = layers[l];
    RmsNorm<Device::kCuda>(xd, lw.attn_norm, N, D, c.rms_norm_eps, hdv);
    const float* attn_in = hdv;
    if (lw.conv != nullptr && !h_conv.empty()) {
      cuda::CausalConvBatch(hdv, D, K, lw.conv, conv_seqs.as<cuda::ConvSeq>(),
                            static_cast<int>(h_conv.size()),
                            static_cast<int64_t>(layout.per_layer) * l, h2d);
      attn_in = h2d;
    }
    Gemm<Device::kCuda>(attn_in, N, D, lw.wqkv, 3 * D, qkvd, false, serial);
    if (c.is_linear()) {
      cuda::LinearBatch b;
      b.heads = heads.as<LinearHead>() + static_cast<int64_t>(l) * H;
      b.H = H;
      b.q = qkvd;
      b.k = qkvd + D;
      b.v = qkvd + 2 * D;
      b.in_stride = 3 * D;
      b.out = attd;
      b.out_stride = D;
      b.layer_offset = static_cast<int64_t>(layout.per_layer) * l;
      b.s_off = static_cast<int64_t>(layout.s);
      b.z_off = static_cast<int64_t>(layout.z);
      b.m_off = static_cast<int64_t>(layout.m);
      b.chunk = chunk;
      if (!h_dec.empty()) {
        b.seqs = dec_seqs.as<cuda::LinearSeq>();
        b.B = static_cast<int>(h_dec.size());
        cuda::LinearDecode(b, hd, F);
      }
      if (!h_pre.empty()) {
        b.seqs = pre_seqs.as<cuda::LinearSeq>();
        b.B = static_cast<int>(h_pre.size());
        cuda::LinearPrefill(b, hd, F, row_seq.as<int32_t>(), row_t.as<int64_t>(), pre_rows,
                            ws.as<float>());
      }
    } else {
      cuda::RopeAndWriteKv(pool, tables.as<int32_t>(), paged_rows.as<cuda::PagedRow>(), N, qkvd,
                           3 * D, l, H, hd, c.rope_theta);
      cuda::PagedAttentionRows(pool, tables.as<int32_t>(), paged_rows.as<cuda::PagedRow>(), N,
                               qkvd, 3 * D, attd, D, l, H, hd);
    }
    Gemm<Device::kCuda>(attd, N, D, lw.wo, D, xd, /*accumulate=*/true, serial);
    RmsNorm<Device::kCuda>(xd, lw.mlp_norm, N, D, c.rms_norm_eps, hdv);
    Gemm<Device::kCuda>(hdv, N, D, lw.w1, FF, mlpd, false, serial);
    Gelu<Device::kCuda>(mlpd, N * FF);
    Gemm<Device::kCuda>(mlpd, N, FF, lw.w2, D, xd, /*accumulate=*/true, serial);
  }
  const int64_t R = static_cast<int64_t>(h_out_rows.size());
  RETURN_IF_ERROR(last.Reserve(sizeof(float) * R * D));
  RETURN_IF_ERROR(logits.Reserve(sizeof(float) * R * V));
  cuda::GatherRows(xd, out_rows.as<int32_t>(), R, D, last.as<float>());
  RmsNorm<Device::kCuda>(last.as<float>(), norm, R, D, c.rms_norm_eps, last.as<float>());
  Gemm<Device::kCuda>(last.as<float>(), R, D, lm_head, V, logits.as<float>(), false, serial);

  std::vector<float> host_logits(static_cast<size_t>(R * V));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_logits.data(), logits.data(),
                                       sizeof(float) * R * V, cudaMemcpyDeviceToHost, stream));
  if (c.is_linear()) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_state.data(), state.data(),
                                         sizeof(float) * h_state.size(), cudaMemcpyDeviceToHost,
                                         stream));
  }
  RETURN_IF_ERROR(cuda::Synchronize());
  // Success: only now do sessions change.
  if (c.is_linear()) {
    for (int s = 0; s < B; ++s) {
      std::memcpy(batch[s].state->linear.data(), h_state.data() + s * per_session,
                  sizeof(float) * per_session);
    }
  }
  *out = std::move(host_logits);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ForwardCuda>> ForwardCuda::Create(
    const Model* model, KvBlockPool* kv, int chunk_size, const std::vector<LinearHead>& heads) {
  RETURN_IF_ERROR(CheckDevice(Device::kCuda));
  RETURN_IF_ERROR(cuda::Init());
  const ModelConfig& c = model->config();
  if (c.is_linear()) {
    if (cuda::LinearDecodeSmemBytes(c.head_dim, c.feature_dim()) > kSmemLimit ||
        cuda::LinearPrefillSmemBytes(c.head_dim, chunk_size) > kSmemLimit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device cuda: head_dim ", c.head_dim, " / feature_dim ", c.feature_dim(),
          " / chunk_size ", chunk_size, " exceed the linear-attention kernels' shared memory"));
    }
  } else if (cuda::PagedAttentionSmemBytes(c.head_dim) > kSmemLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("device cuda: head_dim ", c.head_dim, " exceeds the paged-attention kernel"));
  }
  auto fc = std::unique_ptr<ForwardCuda>(new ForwardCuda());
  fc->impl_ = std::make_unique<Impl>();
  Impl& im = *fc->impl_;
  im.model = model;
  im.cfg = &model->config();
  im.kv = kv;
  im.chunk = chunk_size;
  im.layout = LinearLayout(c);
  RETURN_IF_ERROR(im.UploadWeights(heads));
  if (!c.is_linear()) {
    // Same geometry and block ids as the host pool, which keeps the accounting.
    RETURN_IF_ERROR(im.kv_pool.Reserve(kv->bytes_total()));
    im.pool = cuda::PagedPool{im.kv_pool.as<float>(), kv->block_size(), kv->num_layers(),
                              kv->hidden()};
  }
  return fc;
}

ForwardCuda::~ForwardCuda() = default;

absl::Status ForwardCuda::Run(std::span<const SequenceRun> batch,
                              const std::vector<int64_t>& row_start, std::vector<float>* logits) {
  absl::Status st = impl_->Run(batch, row_start, logits);
  if (!st.ok()) cuda::Synchronize().IgnoreError();  // drain the stream; keep the first error
  return st;
}

absl::Status ForwardCuda::SyncKvToHost(std::span<const int32_t> blocks) {
  Impl& im = *impl_;
  if (im.kv == nullptr) return absl::OkStatus();
  const size_t bpb = im.kv->bytes_per_block();
  for (int32_t b : blocks) {
    if (b < 0 || b >= im.kv->blocks_total()) continue;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(im.kv->K(b, 0, 0), im.kv_pool.as<char>() + b * bpb,
                                         bpb, cudaMemcpyDeviceToHost, cuda::Stream()));
  }
  return cuda::Synchronize();
}

absl::Status ForwardCuda::SyncKvToDevice(std::span<const int32_t> blocks) {
  Impl& im = *impl_;
  if (im.kv == nullptr) return absl::OkStatus();
  const size_t bpb = im.kv->bytes_per_block();
  for (int32_t b : blocks) {
    if (b < 0 || b >= im.kv->blocks_total()) continue;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(im.kv_pool.as<char>() + b * bpb, im.kv->K(b, 0, 0),
                                         bpb, cudaMemcpyHostToDevice, cuda::Stream()));
  }
  return cuda::Synchronize();
}

}  // namespace flatstate

#else  // !FLATSTATE_HAVE_CUDA

namespace flatstate {

struct ForwardCuda::Impl {};

absl::StatusOr<std::unique_ptr<ForwardCuda>> ForwardCuda::Create(
    const Model* /*model*/, KvBlockPool* /*kv*/, int /*chunk_size*/,
    const std::vector<LinearHead>& /*heads*/) {
  return CheckDevice(Device::kCuda);  // FailedPrecondition: no CUDA backend in this build
}

ForwardCuda::~ForwardCuda() = default;

absl::Status ForwardCuda::Run(std::span<const SequenceRun>, const std::vector<int64_t>&,
                              std::vector<float>*) {
  return absl::FailedPreconditionError("device cuda: this build has no CUDA backend");
}
absl::Status ForwardCuda::SyncKvToHost(std::span<const int32_t>) {
  return absl::FailedPreconditionError("device cuda: this build has no CUDA backend");
}
absl::Status ForwardCuda::SyncKvToDevice(std::span<const int32_t>) {
  return absl::FailedPreconditionError("device cuda: this build has no CUDA backend");
}

}  // namespace flatstate

#endif  // FLATSTATE_HAVE_CUDA
