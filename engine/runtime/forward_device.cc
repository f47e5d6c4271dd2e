#include "engine/runtime/forward_device.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<DeviceForward<D>>> DeviceForward<D>::Create(
    const Model* model, KvBlockPool* kv, const Parallel* par, int chunk_size,
    std::span<const LinearHead> heads, const GemmWeightOptions& gemm) {
  const ModelConfig& c = model->config();
  const StateLayout layout = MakeStateLayout(c);
  for (const LayerStateLayout& l : layout.layers) {
    if (l.attention.linear && c.attention_kind == AttentionKind::kGated) {
      RETURN_IF_ERROR(CheckGatedAttentionShape<D>(c.head_dim, c.feature_dim()));
    } else if (l.attention.linear) {
      RETURN_IF_ERROR(CheckLinearAttentionShape<D>(c.head_dim, c.feature_dim(), chunk_size));
    }
    if (l.attention.window)
      RETURN_IF_ERROR(CheckWindowAttentionShape<D>(c.head_dim, c.window_size));
  }
  if (c.has_kv()) RETURN_IF_ERROR(CheckPagedAttentionShape<D>(c.head_dim, kv->dtype()));
  auto f = std::unique_ptr<DeviceForward>(new DeviceForward());
  f->model_ = model;
  f->cfg_ = &c;
  f->kv_ = kv;
  f->par_ = par;
  f->chunk_ = chunk_size;
  f->gemm_ = gemm;
  f->layout_ = layout;
  f->state_floats_ = layout.floats;
  f->qkv_width_ = int64_t{c.q_dim()} + 2 * int64_t{c.kv_dim()} +
                  (c.attention_kind == AttentionKind::kGated ? c.num_attention_heads : 0);
  f->mlp_width_ = int64_t{c.intermediate_size} * (c.mlp_kind == MlpKind::kSwiGlu ? 2 : 1);
  f->shape_ = {c.num_attention_heads, c.kv_heads(), c.head_dim};
  if (f->state_floats_ > 0) {
    // Pages of about 64 MiB (1 to 256 slots): few allocations, little memory held unused.
    const size_t per_page = (size_t{64} << 20) / (sizeof(float) * f->state_floats_);
    f->slots_per_page_ = static_cast<int32_t>(std::clamp<size_t>(per_page, 1, 256));
    f->page_bytes_ = sizeof(float) * f->state_floats_ * f->slots_per_page_;
  }
  RETURN_IF_ERROR(f->BindWeights(heads));
  if (c.has_kv()) {
    void* base = kv->data();
    if constexpr (!kHostMemory<D>) {
      // Same geometry and block ids as the host pool, which keeps the accounting.
      RETURN_IF_ERROR(f->kv_mirror_.Reserve(kv->bytes_total()));
      base = f->kv_mirror_.template as<float>();
    }
    f->pool_ = kv->view();
    f->pool_.base = base;
  }
  RETURN_IF_ERROR(Synchronize<D>());  // the weight copies are complete
  return f;
}

template <Device D>
template <typename T>
absl::StatusOr<const T*> DeviceForward<D>::Place(const T* host, int64_t count) {
  if constexpr (kHostMemory<D>) {
    return host;
  } else {
    if (host == nullptr || count <= 0) return static_cast<const T*>(nullptr);
    const size_t bytes = sizeof(T) * static_cast<size_t>(count);
    Buffer<D> b;
    RETURN_IF_ERROR(b.Reserve(bytes));
    RETURN_IF_ERROR(CopyToDevice<D>(b.data(), host, bytes));
    const T* p = b.template as<T>();
    placed_.push_back(std::move(b));
    return p;
  }
}

template <Device D>
absl::Status DeviceForward<D>::BindWeights(std::span<const LinearHead> heads) {
  const ModelConfig& c = *cfg_;
  const ModelWeights& w = model_->weights();
  const int64_t hidden = c.hidden_size, V = c.vocab_size;
  const int64_t conv = static_cast<int64_t>(c.conv_kernel_size) * hidden;
  const int64_t proj =
      c.attention_kind == AttentionKind::kFavor   ? int64_t{c.favor_num_features} * c.head_dim
      : c.attention_kind == AttentionKind::kGated ? int64_t{c.rfa_num_features} * c.head_dim
                                                  : 0;
  const int H = c.num_attention_heads;
  // A layer GEMM weight as the file stores it (F32 or BF16: PrepareGemmWeightBf16 gives the weight
  // PrepareGemmWeight would from the widened values, and a bf16 engine uses the bits as stored;
  // int8 / int4: PrepareGemmWeightQuantized places the stored quants and scales as they are).
  const WeightDtype stored =
      c.torch_dtype == TorchDtype::kInt4 ? WeightDtype::kInt4 : WeightDtype::kInt8;
  auto quants = [stored](const GemmTensor& t) {
    return QuantizedWeightView{stored, t.q, t.scale, t.n, t.k};
  };
  if (c.torch_dtype == TorchDtype::kInt8 || c.torch_dtype == TorchDtype::kInt4) {
    RETURN_IF_ERROR(CheckQuantizedTarget({stored}, gemm_.dtype));
  }
  auto prepare = [&](const GemmTensor& t) -> absl::StatusOr<GemmWeight<D>> {
    if (t.q != nullptr) return PrepareGemmWeightQuantized<D>(quants(t), gemm_);
    return t.bf16 != nullptr ? PrepareGemmWeightBf16<D>(t.bf16, t.n, t.k, gemm_)
                             : PrepareGemmWeight<D>(t.f32, t.n, t.k, gemm_);
  };
  ASSIGN_OR_RETURN(embed_, Place(w.embed, V * hidden));
  ASSIGN_OR_RETURN(norm_, Place(w.norm, hidden));
  // The output head stays f32 whatever the layers' type (see forward_device.h).
  ASSIGN_OR_RETURN(lm_head_, PrepareGemmWeight<D>(w.lm_head, V, hidden,
                                                  {WeightDtype::kF32, gemm_.batch_invariant}));
  heads_host_.assign(heads.begin(), heads.end());
  if (c.has_kv()) {
    rope_inv_host_ = c.RopeInvFreq();
    ASSIGN_OR_RETURN(rope_.inv_freq,
                     Place(rope_inv_host_.data(), static_cast<int64_t>(rope_inv_host_.size())));
    rope_.rotary_dim = c.rotary();
  }
  layers_.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    Layer& out = layers_[l];
    ASSIGN_OR_RETURN(out.attn_norm, Place(lw.attn_norm, hidden));
    ASSIGN_OR_RETURN(out.conv, Place(lw.conv, conv));
    ASSIGN_OR_RETURN(out.mlp_norm, Place(lw.mlp_norm, hidden));
    ASSIGN_OR_RETURN(out.bqkv, Place(lw.bqkv, qkv_width_));
    ASSIGN_OR_RETURN(out.bo, Place(lw.bo, hidden));
    ASSIGN_OR_RETURN(out.b1, Place(lw.b1, mlp_width_));
    ASSIGN_OR_RETURN(out.b2, Place(lw.b2, hidden));
    ASSIGN_OR_RETURN(out.q_norm, Place(lw.q_norm, c.head_dim));
    ASSIGN_OR_RETURN(out.k_norm, Place(lw.k_norm, c.head_dim));
    if (lw.gate_weight != nullptr) {
      // gated: one GEMM for q|k|v and the H gate logits (an output element's chain does not
      // depend on the other rows, so q, k, v are the bits of the plain wqkv GEMM).
      // A BF16 file's wqkv is widened (exact), so the fused weight is the one an F32 file
      // holding those values gives, and rounds back to the same bits for a bf16 engine.
      // An int8 / int4 file run as its own type: the F32 gate rows are quantised as the load
      // quantises them and appended to the stored quants (each column is quantised alone, so
      // this is the quantisation of the fused fp32 weight); run as f32 / bf16: the dequantised
      // wqkv values.
      if (lw.wqkv.q != nullptr && gemm_.dtype == stored) {
        const QuantizedWeight gate = QuantizeWeight(lw.gate_weight, H, hidden, stored);
        const QuantizedWeight fused = ConcatRows(quants(lw.wqkv), gate.view());
        ASSIGN_OR_RETURN(out.wqkv, PrepareGemmWeightQuantized<D>(fused.view(), gemm_));
      } else {
        std::vector<float> fused(3 * hidden * hidden + H * hidden);
        if (lw.wqkv.q != nullptr) {
          DequantizeWeight(quants(lw.wqkv), fused.data());
        } else {
          for (int64_t i = 0; i < 3 * hidden * hidden; ++i) {
            fused[i] = lw.wqkv.bf16 != nullptr ? FloatFromBf16(lw.wqkv.bf16[i]) : lw.wqkv.f32[i];
          }
        }
        std::copy(lw.gate_weight, lw.gate_weight + H * hidden, fused.begin() + 3 * hidden * hidden);
        ASSIGN_OR_RETURN(out.wqkv, PrepareGemmWeight<D>(fused.data(), qkv_width_, hidden, gemm_));
        RETURN_IF_ERROR(Synchronize<D>());  // `fused` dies here; the copy must be complete
      }
    } else {
      ASSIGN_OR_RETURN(out.wqkv, prepare(lw.wqkv));
    }
    ASSIGN_OR_RETURN(out.wo, prepare(lw.wo));
    ASSIGN_OR_RETURN(out.w1, prepare(lw.w1));
    ASSIGN_OR_RETURN(out.w2, prepare(lw.w2));
    ASSIGN_OR_RETURN(const float* feature_proj, Place(lw.feature_proj, proj));
    for (size_t i = l * H; i < heads_host_.size() && i < (l + 1) * H; ++i) {
      heads_host_[i].feature_proj = feature_proj;
    }
  }
  ASSIGN_OR_RETURN(heads_, OnDevice<D>(&heads_buf_, heads_host_));
  return absl::OkStatus();
}

template <Device D>
absl::Status DeviceForward<D>::Stage(std::span<const SequenceRun> batch,
                                     const std::vector<int64_t>& row_start) {
  const ModelConfig& c = *cfg_;
  const int B = static_cast<int>(batch.size());
  tokens_.host.clear();
  out_rows_.host.clear();
  for (int s = 0; s < B; ++s) {
    tokens_.host.insert(tokens_.host.end(), batch[s].tokens.begin(), batch[s].tokens.end());
    const int64_t first = batch[s].all_logits ? row_start[s] : row_start[s + 1] - 1;
    for (int64_t r = first; r < row_start[s + 1]; ++r) {
      out_rows_.host.push_back(static_cast<int32_t>(r));
    }
  }
  RETURN_IF_ERROR(tokens_.Stage());
  RETURN_IF_ERROR(out_rows_.Stage());
  if (c.has_kv()) {
    tables_.host.clear();
    paged_.host.clear();
    for (int s = 0; s < B; ++s) {
      const SessionState* st = batch[s].state;
      const int64_t table = static_cast<int64_t>(tables_.host.size());
      tables_.host.insert(tables_.host.end(), st->kv_blocks.begin(), st->kv_blocks.end());
      for (int64_t r = row_start[s]; r < row_start[s + 1]; ++r) {
        paged_.host.push_back(PagedRow{r, st->position + (r - row_start[s]) + 1, table});
      }
    }
    RETURN_IF_ERROR(tables_.Stage());
    RETURN_IF_ERROR(paged_.Stage());
  }
  if (!c.has_state()) return absl::OkStatus();
  for (int s = 0; s < B; ++s) RETURN_IF_ERROR(AcquireState(batch[s].state));
  decode_.host.clear();
  prefill_.host.clear();
  conv_.host.clear();
  window_.host.clear();
  row_seq_.host.clear();
  row_t_.host.clear();
  int64_t workspace = 0;
  for (int s = 0; s < B; ++s) {
    LinearSeq q;
    q.row = row_start[s];
    q.T = row_start[s + 1] - row_start[s];
    q.pos0 = batch[s].state->position;
    if constexpr (kHostMemory<D>) {
      q.state = batch[s].state->linear.data();
    } else {
      q.state = SlotPtr(batch[s].state->device.id);
    }
    conv_.host.push_back(ConvSeq{q.row, q.T, q.state});
    window_.host.push_back(WindowSeq{q.row, q.T, q.pos0, q.state});
    if (q.T == 1) {
      decode_.host.push_back(q);
      continue;
    }
    if (c.feature_dim() > 0) {
      LinearHead shape;  // the scratch size depends on head_dim and feature_dim only
      shape.head_dim = c.head_dim;
      shape.feature_dim = c.feature_dim();
      q.head_scratch = static_cast<int64_t>(LinearAttentionScratch(shape, q.T, chunk_));
    }
    q.scratch = workspace;
    workspace += q.head_scratch * c.num_attention_heads;
    for (int64_t t = 0; t < q.T; ++t) {
      row_seq_.host.push_back(static_cast<int32_t>(prefill_.host.size()));
      row_t_.host.push_back(t);
    }
    prefill_.host.push_back(q);
  }
  if constexpr (kLinearAttentionWorkspace<D>) {
    RETURN_IF_ERROR(workspace_.Reserve(sizeof(float) * workspace));
  }
  RETURN_IF_ERROR(decode_.Stage());
  RETURN_IF_ERROR(prefill_.Stage());
  RETURN_IF_ERROR(conv_.Stage());
  RETURN_IF_ERROR(window_.Stage());
  RETURN_IF_ERROR(row_seq_.Stage());
  return row_t_.Stage();
}

template <Device D>
void DeviceForward<D>::Attention(int layer, int64_t rows) {
  const ModelConfig& c = *cfg_;
  const int H = c.num_attention_heads, hd = c.head_dim, hidden = c.hidden_size;
  float* qkv = qkv_.template as<float>();
  float* att = att_.template as<float>();
  if (c.layer_attention(layer).softmax) {
    int64_t attended = 0;  // (query row, key row) pairs
    for (const PagedRow& r : paged_.host) attended += r.ctx;
    const Parallel& par = PoolFor(attended * c.q_dim());
    const int kv_layer = c.kv_layer_index(layer);  // the pool holds the softmax layers only
    RopeAndWriteKv<D>(pool_, tables_.on, paged_.on, rows, qkv, qkv_width_, kv_layer, shape_, rope_,
                      par);
    PagedAttention<D>(pool_, tables_.on, paged_.on, rows, qkv, qkv_width_, att, c.q_dim(),
                      kv_layer, shape_, par);
    return;
  }
  const LayerStateLayout& lay = layout_.layers[layer];
  if (lay.attention.linear) {
    LinearBatch b;
    b.heads = heads_ + static_cast<int64_t>(layer) * H;
    b.H = H;
    b.head_dim = hd;
    b.feature_dim = c.feature_dim();
    b.q = qkv;
    b.k = qkv + hidden;
    b.v = qkv + 2 * hidden;
    b.gate = qkv + 3 * hidden;  // read by GatedAttention only
    b.in_stride = qkv_width_;
    b.out = att;
    b.out_stride = hidden;
    b.layer_offset = static_cast<int64_t>(lay.begin);
    b.s_off = static_cast<int64_t>(lay.s);
    b.z_off = static_cast<int64_t>(lay.z);
    b.m_off = static_cast<int64_t>(lay.m);
    b.chunk = chunk_;
    b.decode = decode_.on;
    b.num_decode = static_cast<int>(decode_.host.size());
    b.prefill = prefill_.on;
    b.num_prefill = static_cast<int>(prefill_.host.size());
    b.row_seq = row_seq_.on;
    b.row_t = row_t_.on;
    b.prefill_rows = static_cast<int64_t>(row_t_.host.size());
    b.workspace = workspace_.template as<float>();
    const Parallel& par = PoolFor(rows * H * c.feature_dim() * hd);
    if (c.attention_kind == AttentionKind::kGated) {
      GatedAttention<D>(b, par);
    } else {
      LinearAttention<D>(b, par);
    }
  }
  if (lay.attention.window) {
    // After the linear branch: this rotates q and k in place.
    float* out = lay.attention.linear ? att2_.template as<float>() : att;
    WindowBatch w;
    w.seqs = window_.on;
    w.num = static_cast<int>(window_.host.size());
    w.H = H;
    w.head_dim = hd;
    w.window = c.window_size;
    w.rope_theta = c.rope_theta;
    w.q = qkv;
    w.k = qkv + hidden;
    w.v = qkv + 2 * hidden;
    w.in_stride = qkv_width_;
    w.out = out;
    w.out_stride = hidden;
    w.ring_k = static_cast<int64_t>(lay.begin + lay.ring_k);
    w.ring_v = static_cast<int64_t>(lay.begin + lay.ring_v);
    WindowAttention<D>(w, PoolFor(rows * std::min<int64_t>(rows, c.window_size) * hidden));
    if (lay.attention.linear) AddInPlace<D>(att, out, rows * hidden);
  }
}

template <Device D>
absl::Status DeviceForward<D>::RunLayers(std::span<const SequenceRun> batch,
                                         const std::vector<int64_t>& row_start,
                                         std::vector<float>* logits) {
  const ModelConfig& c = *cfg_;
  const int64_t hidden = c.hidden_size, FF = c.intermediate_size, V = c.vocab_size;
  const int64_t N = row_start.back();
  RETURN_IF_ERROR(TakeError<D>());  // a stale error must not be blamed on this step
  RETURN_IF_ERROR(x_.Reserve(sizeof(float) * N * hidden));
  RETURN_IF_ERROR(h_.Reserve(sizeof(float) * N * hidden));
  RETURN_IF_ERROR(h2_.Reserve(sizeof(float) * N * hidden));
  RETURN_IF_ERROR(qkv_.Reserve(sizeof(float) * N * qkv_width_));
  RETURN_IF_ERROR(att_.Reserve(sizeof(float) * N * c.q_dim()));
  if (c.attention_kind == AttentionKind::kHybrid && c.hybrid_layout == HybridLayout::kSum) {
    RETURN_IF_ERROR(att2_.Reserve(sizeof(float) * N * hidden));
  }
  RETURN_IF_ERROR(mlp_.Reserve(sizeof(float) * N * mlp_width_));
  const bool swiglu = c.mlp_kind == MlpKind::kSwiGlu;
  if (swiglu) RETURN_IF_ERROR(mlp2_.Reserve(sizeof(float) * N * FF));
  RETURN_IF_ERROR(Stage(batch, row_start));
  const int64_t R = static_cast<int64_t>(out_rows_.host.size());
  RETURN_IF_ERROR(last_.Reserve(sizeof(float) * R * hidden));
  float* out = nullptr;
  if constexpr (kHostMemory<D>) {
    logits->resize(static_cast<size_t>(R * V));
    out = logits->data();
  } else {
    RETURN_IF_ERROR(logits_.Reserve(sizeof(float) * R * V));
    out = logits_.template as<float>();
  }

  if constexpr (!kHostMemory<D>) {
    // From the first kernel on, the slots are newer than the sessions' host copies.
    if (c.has_state()) {
      for (const SequenceRun& r : batch) r.state->device.host_stale = true;
    }
  }
  float* x = x_.template as<float>();
  float* h = h_.template as<float>();
  float* h2 = h2_.template as<float>();
  float* mlp = mlp_.template as<float>();
  const float eps = c.rms_norm_eps;
  GatherRows<D>(embed_, tokens_.on, N, hidden, x);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& lw = layers_[l];
    RmsNorm<D>(x, lw.attn_norm, N, hidden, eps, h);
    const float* attn_in = h;
    if (lw.conv != nullptr) {
      const LayerStateLayout& lay = layout_.layers[l];
      CausalConv<D>(h, hidden, c.conv_kernel_size, lw.conv, conv_.on,
                    static_cast<int>(conv_.host.size()), static_cast<int64_t>(lay.begin + lay.conv),
                    h2);
      attn_in = h2;
    }
    Gemm<D>(attn_in, N, lw.wqkv, qkv_.template as<float>(), false, *par_);
    if (lw.bqkv != nullptr) AddBias<D>(qkv_.template as<float>(), lw.bqkv, N, qkv_width_);
    if (lw.q_norm != nullptr) {  // Qwen3: each q and k head normalised before RoPE
      float* qkv = qkv_.template as<float>();
      HeadRmsNorm<D>(qkv, N, qkv_width_, c.num_attention_heads, c.head_dim, lw.q_norm, eps);
      HeadRmsNorm<D>(qkv + c.q_dim(), N, qkv_width_, c.kv_heads(), c.head_dim, lw.k_norm, eps);
    }
    Attention(l, N);
    Gemm<D>(att_.template as<float>(), N, lw.wo, x, /*accumulate=*/true, *par_);
    if (lw.bo != nullptr) AddBias<D>(x, lw.bo, N, hidden);
    RmsNorm<D>(x, lw.mlp_norm, N, hidden, eps, h);
    Gemm<D>(h, N, lw.w1, mlp, false, *par_);
    if (lw.b1 != nullptr) AddBias<D>(mlp, lw.b1, N, mlp_width_);
    const float* down_in = mlp;
    if (swiglu) {
      SwiGlu<D>(mlp, N, FF, mlp2_.template as<float>());
      down_in = mlp2_.template as<float>();
    } else {
      Gelu<D>(mlp, N * FF);
    }
    Gemm<D>(down_in, N, lw.w2, x, /*accumulate=*/true, *par_);
    if (lw.b2 != nullptr) AddBias<D>(x, lw.b2, N, hidden);
  }
  // Final norm + head over the rows that are returned.
  float* last = last_.template as<float>();
  GatherRows<D>(x, out_rows_.on, R, hidden, last);
  RmsNorm<D>(last, norm_, R, hidden, eps, last);
  Gemm<D>(last, R, lm_head_, out, false, *par_);
  if constexpr (!kHostMemory<D>) {
    host_logits_.resize(static_cast<size_t>(R * V));
    RETURN_IF_ERROR(CopyToHost<D>(host_logits_.data(), out, sizeof(float) * R * V));
    RETURN_IF_ERROR(Synchronize<D>());
    logits->assign(host_logits_.begin(), host_logits_.end());
  }
  return absl::OkStatus();
}

template <Device D>
absl::Status DeviceForward<D>::Run(std::span<const SequenceRun> batch,
                                   const std::vector<int64_t>& row_start,
                                   std::vector<float>* logits) {
  absl::Status st = RunLayers(batch, row_start, logits);
  if (!st.ok()) Synchronize<D>().IgnoreError();  // drain the queue; keep the first error
  return st;
}

template class DeviceForward<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class DeviceForward<Device::kCuda>;
#endif

absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(Device d, const Model* model,
                                                             KvBlockPool* kv, const Parallel* par,
                                                             int chunk_size,
                                                             std::span<const LinearHead> heads,
                                                             const GemmWeightOptions& gemm) {
  RETURN_IF_ERROR(CheckDevice(d));
  if (d == Device::kCpu) {
    return DeviceForward<Device::kCpu>::Create(model, kv, par, chunk_size, heads, gemm);
  }
#ifdef FLATSTATE_HAVE_CUDA
  return DeviceForward<Device::kCuda>::Create(model, kv, par, chunk_size, heads, gemm);
#else
  return absl::FailedPreconditionError("device cuda: this build has no CUDA backend");
#endif
}

}  // namespace flatstate
