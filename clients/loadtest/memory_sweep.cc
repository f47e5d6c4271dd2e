#include "clients/loadtest/memory_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/loadtest/growth.h"
#include "clients/loadtest/stats.h"

namespace flatstate::loadtest {

namespace pb = flatstate::v1;

namespace {

constexpr int64_t kBlockTokens = 16;  // server KV block size (engine/kv/kv_block_pool.h)

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

std::string MiB(double bytes) { return absl::StrFormat("%.2f MiB", bytes / (1 << 20)); }

std::string Describe(const grpc::Status& s) {
  return absl::StrCat(CodeName(s.error_code()), ": ", s.error_message());
}

class ModelSweep {
 public:
  ModelSweep(const Client& client, const MemoryOptions& o, const pb::ListModelsResponse& models,
             const pb::ModelInfo& info, Progress* progress, CheckList* checks)
      : client_(client), o_(o), models_(models), info_(info), progress_(progress), checks_(checks) {
    result_.model = info.name();
    result_.kind = info.attention_kind();
  }

  MemoryModelResult Run() {
    Sweep();
    if (linear()) {
      CheckLinear();
    } else {
      CheckSoftmax();
    }
    if (on_device_) CheckDeviceMemory();
    Cleanup();
    return std::move(result_);
  }

 private:
  // No layer keeps K/V (the linear kinds, the recurrent families): the whole session is fixed.
  // Softmax models and hybrids with softmax layers grow by kv_bytes_per_token.
  bool linear() const { return info_.kv_bytes_per_token() == 0; }
  uint64_t block_bytes() const { return info_.kv_bytes_per_token() * kBlockTokens; }
  std::string name() const { return info_.name(); }

  void Fail(const std::string& what, const grpc::Status& s) {
    result_.error = absl::StrCat(what, ": ", Describe(s));
    checks_->Add(false, absl::StrCat(name(), " sweep"), result_.error);
  }

  // Grows session i to `target` tokens of context. Returns the first failed Generate's status.
  grpc::Status Grow(size_t i, int64_t target, int64_t* prefilled, double* seconds) {
    return GrowSession(client_, sessions_[i], static_cast<int64_t>(info_.vocab_size()), target,
                       o_.chunk_tokens, absl::StrFormat("memory %s session %d", name(), i),
                       progress_, &ctx_[i], prefilled, seconds);
  }

  void Exhausted(const grpc::Status& s, size_t i) {
    result_.exhausted = true;
    // The failed Generate may have prefilled part of its chunk before the pool ran dry.
    pb::Session session;
    if (client_.GetSession(sessions_[i], &session).ok()) {
      ctx_[i] = std::max(ctx_[i], static_cast<int64_t>(session.context_tokens()));
    }
    result_.exhausted_at_tokens = ctx_[i];
    pb::ServerStats stats;
    const std::string blocks =
        client_.GetStats(&stats).ok()
            ? absl::StrFormat("; server kv_blocks_used %d of %d", stats.kv_blocks_used(),
                              stats.kv_blocks_total())
            : "";
    checks_->Info(absl::StrFormat("%s: RESOURCE_EXHAUSTED at session context %d tokens (%s)%s",
                                  name(), ctx_[i], s.error_message(), blocks));
  }

  // Handles a failed growth/decode. Returns false when the sweep must stop.
  bool HandleError(const grpc::Status& s, size_t i, const std::string& what) {
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && !linear()) {
      Exhausted(s, i);
    } else {
      Fail(what, s);
    }
    return false;
  }

  void Sweep() {
    pb::ServerStats stats;
    if (grpc::Status s = client_.GetStats(&stats); !s.ok()) return Fail("GetStats", s);
    baseline_blocks_ = stats.kv_blocks_used();
    for (int i = 0; i < std::max(1, o_.sessions); ++i) {
      pb::Session session;
      if (grpc::Status s = client_.CreateSession(name(), &session); !s.ok()) {
        return Fail("CreateSession", s);
      }
      sessions_.push_back(session.session_id());
      ctx_.push_back(0);
    }
    for (int64_t target : o_.contexts) {
      int64_t prefilled = 0;
      double seconds = 0;
      for (size_t i = 0; i < sessions_.size(); ++i) {
        if (grpc::Status s = Grow(i, target, &prefilled, &seconds); !s.ok()) {
          HandleError(s, i, absl::StrCat("growing to ", target, " tokens"));
          return;
        }
      }
      MemoryPoint p;
      p.prefill_tokens_per_s = seconds > 0 ? prefilled / seconds : 0;
      if (!Measure(&p)) return;
      result_.points.push_back(p);
    }
    if (!linear() && o_.exhaust) GrowUntilExhausted();
  }

  // Decodes o_.decode_tokens on session 0, then records state and server stats.
  bool Measure(MemoryPoint* p) {
    p->model = name();
    p->kind = info_.attention_kind();
    p->context_tokens = ctx_[0];
    p->sessions = static_cast<int>(sessions_.size());
    pb::GenerateRequest req;
    req.set_session_id(sessions_[0]);
    req.set_max_new_tokens(o_.decode_tokens);
    GenerateResult r = client_.Generate(req);
    if (!r.ok()) return HandleError(r.status, 0, absl::StrCat("decoding at ", ctx_[0]));
    if (r.usage.context_tokens() > 0) ctx_[0] = static_cast<int64_t>(r.usage.context_tokens());
    p->decode_tokens_per_s = r.DecodeTokensPerSecond();
    p->ttft_ms = r.ttft_s * 1e3;
    p->itl_p50_ms = Percentile(r.itl_s, 50) * 1e3;
    p->itl_p99_ms = Percentile(r.itl_s, 99) * 1e3;
    int64_t lo_blocks = 0, hi_blocks = 0;
    for (size_t i = 0; i < sessions_.size(); ++i) {
      pb::Session s;
      if (grpc::Status st = client_.GetSession(sessions_[i], &s); !st.ok()) {
        Fail("GetSession", st);
        return false;
      }
      if (i == 0) p->state_bytes = s.state_bytes();
      p->state_bytes_total += s.state_bytes();
      // After a Generate the last sampled token is pending (not yet in the KV cache).
      lo_blocks += CeilDiv(ctx_[i] - 1, kBlockTokens);
      hi_blocks += CeilDiv(ctx_[i], kBlockTokens);
    }
    if (linear()) {
      pb::Checkpoint ck;
      if (grpc::Status st = client_.CheckpointSession(sessions_[0], &ck); !st.ok()) {
        Fail("CheckpointSession", st);
        return false;
      }
      p->checkpoint_bytes = ck.data().size();
    }
    lo_blocks_.push_back(lo_blocks);
    hi_blocks_.push_back(hi_blocks);
    pb::ServerStats stats;
    if (grpc::Status st = client_.GetStats(&stats); !st.ok()) {
      Fail("GetStats", st);
      return false;
    }
    p->kv_blocks_used = stats.kv_blocks_used();
    p->kv_bytes = (stats.kv_blocks_used() - std::min(baseline_blocks_, stats.kv_blocks_used())) *
                  block_bytes();
    p->expected_kv_bytes = linear() ? 0 : static_cast<uint64_t>(hi_blocks) * block_bytes();
    p->rss_bytes = stats.rss_bytes();
    p->device_memory_bytes = stats.device_memory_used_bytes();
    p->device_state_bytes = stats.device_state_bytes();
    on_device_ = stats.device_memory_total_bytes() > 0;
    total_tokens_.push_back(0);
    for (int64_t c : ctx_) total_tokens_.back() += static_cast<double>(c);
    return true;
  }

  void GrowUntilExhausted() {
    const int64_t capacity = static_cast<int64_t>(info_.kv_blocks_total()) * kBlockTokens;
    const int64_t target = std::max(capacity, ctx_[0]) + 2 * o_.chunk_tokens + kBlockTokens;
    int64_t prefilled = 0;
    double seconds = 0;
    grpc::Status s = Grow(0, target, &prefilled, &seconds);
    if (!s.ok()) {
      HandleError(s, 0, "growing until the KV pool is exhausted");
      return;
    }
    checks_->Add(false, absl::StrCat(name(), " KV pool exhausted"),
                 absl::StrFormat("grew to %d tokens (pool of %d blocks = %d tokens) without "
                                 "RESOURCE_EXHAUSTED",
                                 ctx_[0], info_.kv_blocks_total(), capacity));
  }

  void CheckLinear() {
    const auto& pts = result_.points;
    if (pts.empty()) return;
    const uint64_t expect = info_.state_bytes_per_session();
    bool constant = true;
    for (const MemoryPoint& p : pts) {
      constant = constant && p.state_bytes == expect &&
                 p.state_bytes_total == expect * static_cast<uint64_t>(p.sessions);
    }
    checks_->Add(constant, absl::StrCat(name(), " state_bytes constant"),
                 absl::StrFormat("%d B per session at %d points from %d to %d tokens "
                                 "(ListModels says %d B)",
                                 pts.back().state_bytes, pts.size(), pts.front().context_tokens,
                                 pts.back().context_tokens, expect));
    // The header's variable fields (pending token ids, the detokenizer's partial character:
    // docs/checkpoint-format.md) may differ by a few bytes between points; the state does not.
    constexpr uint64_t kHeaderSlack = 16;
    bool same_checkpoint = pts.front().checkpoint_bytes > 0;
    for (const MemoryPoint& p : pts) {
      const uint64_t a = p.checkpoint_bytes, b = pts.front().checkpoint_bytes;
      same_checkpoint = same_checkpoint && (a > b ? a - b : b - a) <= kHeaderSlack;
    }
    checks_->Add(same_checkpoint, absl::StrCat(name(), " checkpoint size constant"),
                 absl::StrFormat("%d B at %d tokens, %d B at %d tokens (allowed %d B apart: "
                                 "the header's pending ids and partial character)",
                                 pts.front().checkpoint_bytes, pts.front().context_tokens,
                                 pts.back().checkpoint_bytes, pts.back().context_tokens,
                                 kHeaderSlack));
    bool no_kv = true;
    for (const MemoryPoint& p : pts) no_kv = no_kv && p.kv_bytes == 0;
    checks_->Add(no_kv, absl::StrCat(name(), " uses no KV blocks"),
                 absl::StrFormat("server KV bytes above baseline at the largest context: %d",
                                 pts.back().kv_bytes));
    const double first = static_cast<double>(pts.front().rss_bytes);
    const double last = static_cast<double>(pts.back().rss_bytes);
    const double allowed =
        std::max(o_.rss_tolerance * first, static_cast<double>(o_.rss_slack_bytes));
    checks_->Add(std::abs(last - first) <= allowed, absl::StrCat(name(), " server RSS flat"),
                 absl::StrFormat("RSS %s at %d tokens, %s at %d tokens (diff %s, allowed %s)",
                                 MiB(first), pts.front().context_tokens, MiB(last),
                                 pts.back().context_tokens, MiB(last - first), MiB(allowed)));
    ReachedAllContexts();
  }

  // Linear kinds must reach every context; softmax may stop early at pool exhaustion.
  void ReachedAllContexts() {
    if (!result_.error.empty()) return;  // already failed
    const bool all = result_.points.size() == o_.contexts.size();
    const std::string detail =
        absl::StrFormat("%d of %d contexts measured", result_.points.size(), o_.contexts.size());
    if (linear()) {
      checks_->Add(all, absl::StrCat(name(), " reached every context"), detail);
    } else if (!all) {
      checks_->Info(absl::StrCat(name(), ": ", detail, " (KV pool exhausted first)"));
    }
  }

  void CheckDeviceMemory() {
    const auto& pts = result_.points;
    if (pts.empty()) return;
    const double first = static_cast<double>(pts.front().device_memory_bytes);
    const double last = static_cast<double>(pts.back().device_memory_bytes);
    const double allowed =
        std::max(o_.rss_tolerance * first, static_cast<double>(o_.device_slack_bytes));
    checks_->Add(std::abs(last - first) <= allowed, absl::StrCat(name(), " device memory flat"),
                 absl::StrFormat("GPU memory used %s at %d tokens, %s at %d tokens (diff %s, "
                                 "allowed %s); state slot pages %s",
                                 MiB(first), pts.front().context_tokens, MiB(last),
                                 pts.back().context_tokens, MiB(last - first), MiB(allowed),
                                 MiB(static_cast<double>(pts.back().device_state_bytes))));
  }

  // Models with K/V: pure softmax, and hybrids whose softmax layers grow while their recurrent
  // layers keep state_bytes_per_session.
  void CheckSoftmax() {
    const auto& pts = result_.points;
    const uint64_t per_token = info_.kv_bytes_per_token();
    const uint64_t fixed = info_.state_bytes_per_session();  // 0 for pure softmax
    if (info_.architecture() == "flatstate" && info_.num_kv_layers() == info_.num_layers()) {
      // 4 B per element (--kv_dtype f32) or 2 B (bf16); flatstate's K/V width is d_model.
      const uint64_t elems = 2 * info_.num_layers() * info_.hidden_size();
      checks_->Add(per_token == elems * 4 || per_token == elems * 2,
                   absl::StrCat(name(), " kv_bytes_per_token"),
                   absl::StrFormat("ListModels %d B, 2 x %d layers x %d x (4 B f32 | 2 B bf16) = "
                                   "%d | %d B",
                                   per_token, info_.num_layers(), info_.hidden_size(), elems * 4,
                                   elems * 2));
    } else {
      checks_->Info(absl::StrFormat(
          "%s (%s, %s): %d B of K/V per token in %d of %d layers, %d B of fixed state", name(),
          info_.architecture(), info_.attention_kind(), per_token, info_.num_kv_layers(),
          info_.num_layers(), fixed));
    }
    if (!pts.empty()) {
      bool exact = true;
      std::string worst;
      std::vector<double> kv;
      for (size_t k = 0; k < pts.size(); ++k) {
        const MemoryPoint& p = pts[k];
        const uint64_t blocks = p.kv_bytes / std::max<uint64_t>(block_bytes(), 1);
        const uint64_t fixed_total = fixed * static_cast<uint64_t>(p.sessions);
        const bool ok = p.state_bytes_total >= fixed_total &&
                        p.kv_bytes == p.state_bytes_total - fixed_total &&
                        blocks >= static_cast<uint64_t>(lo_blocks_[k]) &&
                        blocks <= static_cast<uint64_t>(hi_blocks_[k]);
        if (!ok && worst.empty()) {
          worst = absl::StrFormat(
              " (at %d tokens: server KV %d B, sessions %d B of which %d B "
              "fixed state, expected %d..%d blocks of %d B)",
              p.context_tokens, p.kv_bytes, p.state_bytes_total,
              fixed * static_cast<uint64_t>(p.sessions), lo_blocks_[k], hi_blocks_[k],
              block_bytes());
        }
        exact = exact && ok;
        kv.push_back(static_cast<double>(p.kv_bytes));
      }
      checks_->Add(exact, absl::StrCat(name(), " KV bytes = ceil(tokens / 16) blocks"),
                   absl::StrFormat("%d points, %s at %d tokens%s", pts.size(),
                                   MiB(static_cast<double>(pts.back().kv_bytes)),
                                   pts.back().context_tokens, worst));
      if (pts.size() >= 2) {
        const double slope = Slope(total_tokens_, kv);
        const bool ok = std::abs(slope - per_token) <= 0.01 * per_token + 1;
        checks_->Add(ok, absl::StrCat(name(), " KV bytes grow linearly"),
                     absl::StrFormat("slope %.1f B/token, expected %d B/token", slope, per_token));
      }
    }
    ReachedAllContexts();
    if (o_.exhaust && result_.error.empty()) {
      checks_->Add(result_.exhausted, absl::StrCat(name(), " RESOURCE_EXHAUSTED reported"),
                   result_.exhausted
                       ? absl::StrFormat("at %d tokens (pool %d blocks = %d tokens)",
                                         result_.exhausted_at_tokens, info_.kv_blocks_total(),
                                         info_.kv_blocks_total() * kBlockTokens)
                       : "the pool never filled");
    }
    if (result_.exhausted) AfterExhaustion();
  }

  bool SmallGenerate(const std::string& model, std::string* detail) {
    pb::GenerateRequest req;
    req.set_model(model);
    AppendPromptTokens(13, 0, VocabOf(client_, model), &req);
    req.set_max_new_tokens(8);
    GenerateResult r = client_.Generate(req);
    *detail = r.ok() ? absl::StrFormat("%d tokens in %.1f ms", r.tokens, r.total_s * 1e3)
                     : Describe(r.status);
    return r.ok() && r.tokens > 0;
  }

  void AfterExhaustion() {
    std::string linear_model;
    for (const std::string& m : o_.models) {
      for (const pb::ModelInfo& mi : models_.models()) {
        if (mi.name() == m && mi.kv_bytes_per_token() == 0 && linear_model.empty()) {
          linear_model = m;
        }
      }
    }
    for (const pb::ModelInfo& mi : models_.models()) {
      if (mi.kv_bytes_per_token() == 0 && linear_model.empty()) linear_model = mi.name();
    }
    std::string detail;
    if (linear_model.empty()) {
      checks_->Info("no linear model loaded: skipped the after-exhaustion linear Generate");
    } else {
      const bool ok = SmallGenerate(linear_model, &detail);
      checks_->Add(ok, absl::StrCat(name(), " exhausted: ", linear_model, " still serves"), detail);
    }
    const bool before = SmallGenerate(name(), &detail);
    checks_->Info(absl::StrCat(
        name(), ": fresh Generate while the pool is full: ", before ? "OK " : "", detail));
    Cleanup();
    pb::ServerStats stats;
    grpc::Status s = client_.GetStats(&stats);
    checks_->Add(s.ok() && stats.kv_blocks_used() == baseline_blocks_,
                 absl::StrCat(name(), " blocks released on DeleteSession"),
                 s.ok() ? absl::StrFormat("kv_blocks_used %d (before the sweep %d)",
                                          stats.kv_blocks_used(), baseline_blocks_)
                        : Describe(s));
    const bool after = SmallGenerate(name(), &detail);
    checks_->Add(after, absl::StrCat(name(), " serves again after release"), detail);
  }

  void Cleanup() {
    for (const std::string& id : sessions_) {
      if (grpc::Status s = client_.DeleteSession(id); !s.ok()) {
        checks_->Info(absl::StrCat("DeleteSession ", id, ": ", Describe(s)));
      }
    }
    sessions_.clear();
    ctx_.clear();
  }

  const Client& client_;
  const MemoryOptions& o_;
  const pb::ListModelsResponse& models_;
  const pb::ModelInfo info_;
  Progress* const progress_;
  CheckList* const checks_;
  MemoryModelResult result_;
  std::vector<std::string> sessions_;
  std::vector<int64_t> ctx_;
  uint64_t baseline_blocks_ = 0;
  std::vector<int64_t> lo_blocks_, hi_blocks_;  // per point, all sessions
  bool on_device_ = false;                      // the server reports device memory (a GPU server)
  std::vector<double> total_tokens_;            // per point, all sessions
};

// A hybrid's K/V per token is (K/V layers / all layers) of an all-softmax model of the same shape
// (same architecture, layers and width): checked for every such pair among the swept models.
void CheckHybridsAgainstSoftmaxTwins(const pb::ListModelsResponse& models,
                                     const std::vector<std::string>& swept, CheckList* checks) {
  std::vector<const pb::ModelInfo*> infos;
  for (const std::string& name : swept) {
    if (const pb::ModelInfo* i = FindModel(models, name)) infos.push_back(i);
  }
  for (const pb::ModelInfo* h : infos) {
    if (h->kv_bytes_per_token() == 0 || h->num_kv_layers() == h->num_layers()) continue;
    for (const pb::ModelInfo* s : infos) {
      if (s->num_kv_layers() != s->num_layers() || s->architecture() != h->architecture() ||
          s->num_layers() != h->num_layers() || s->hidden_size() != h->hidden_size()) {
        continue;
      }
      // h / s == kv layers / layers, in integers.
      const uint64_t lhs = h->kv_bytes_per_token() * h->num_layers();
      const uint64_t rhs = s->kv_bytes_per_token() * h->num_kv_layers();
      checks->Add(lhs == rhs,
                  absl::StrCat(h->name(), " K/V per token = ", h->num_kv_layers(), "/",
                               h->num_layers(), " of ", s->name(), "'s"),
                  absl::StrFormat("%d B against %d B per token (ratio %.4f, layers %d/%d)",
                                  h->kv_bytes_per_token(), s->kv_bytes_per_token(),
                                  static_cast<double>(h->kv_bytes_per_token()) /
                                      static_cast<double>(s->kv_bytes_per_token()),
                                  h->num_kv_layers(), h->num_layers()));
    }
  }
}

}  // namespace

std::vector<MemoryModelResult> RunMemorySweep(const Client& client, const MemoryOptions& options,
                                              Progress* progress, CheckList* checks) {
  std::vector<MemoryModelResult> out;
  pb::ListModelsResponse models;
  if (grpc::Status s = client.ListModels(&models); !s.ok()) {
    checks->Add(false, "ListModels", Describe(s));
    return out;
  }
  for (const std::string& name : options.models) {
    const pb::ModelInfo* info = FindModel(models, name);
    if (info == nullptr) {
      checks->Add(false, absl::StrCat(name, " loaded"), "not in ListModels");
      continue;
    }
    out.push_back(ModelSweep(client, options, models, *info, progress, checks).Run());
  }
  CheckHybridsAgainstSoftmaxTwins(models, options.models, checks);
  progress->Clear();
  return out;
}

}  // namespace flatstate::loadtest
