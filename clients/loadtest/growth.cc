#include "clients/loadtest/growth.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace flatstate::loadtest {

namespace pb = flatstate::v1;

int32_t FitToVocab(int32_t id, int64_t vocab) {
  if (vocab <= 0 || id < vocab) return id;
  return static_cast<int32_t>(id % vocab);
}

int64_t VocabOf(const Client& client, const std::string& model) {
  pb::ListModelsResponse models;
  if (!client.ListModels(&models).ok()) return 256;
  for (const pb::ModelInfo& m : models.models()) {
    if (m.name() == model || (model.empty() && m.is_default())) {
      return m.vocab_size() > 0 ? static_cast<int64_t>(m.vocab_size()) : 256;
    }
  }
  return 256;
}

void AppendPromptTokens(int64_t n, int64_t offset, int64_t vocab, pb::GenerateRequest* req) {
  static constexpr char kText[] =
      "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer "
      "the slings and arrows of outrageous fortune, or to take arms against a sea of troubles "
      "and by opposing end them. To die, to sleep; no more; and by a sleep to say we end the "
      "heart-ache and the thousand natural shocks that flesh is heir to.\n";
  constexpr int64_t kLen = sizeof(kText) - 1;
  for (int64_t i = 0; i < n; ++i) {
    req->add_prompt_tokens(FitToVocab(static_cast<uint8_t>(kText[(offset + i) % kLen]), vocab));
  }
}

grpc::Status GrowSession(const Client& client, const std::string& session_id, int64_t vocab,
                         int64_t target, int64_t chunk_tokens, const std::string& label,
                         Progress* progress,
                         int64_t* context, int64_t* prefilled, double* seconds) {
  chunk_tokens = std::max<int64_t>(1, chunk_tokens);
  const int64_t left = std::max<int64_t>(0, target - *context);
  const int64_t max_iters = (left + chunk_tokens - 1) / chunk_tokens + 2;
  for (int64_t it = 0; it < max_iters && *context + 1 < target; ++it) {
    const int64_t n = std::min(chunk_tokens, target - *context - 1);
    pb::GenerateRequest req;
    req.set_session_id(session_id);
    req.set_max_new_tokens(1);
    AppendPromptTokens(n, *context, vocab, &req);
    GenerateResult r = client.Generate(req);
    if (!r.ok()) return r.status;
    *prefilled += n;
    *seconds += r.total_s;
    *context = r.usage.context_tokens() > 0 ? static_cast<int64_t>(r.usage.context_tokens())
                                            : *context + n + static_cast<int64_t>(r.tokens);
    if (progress != nullptr) {
      progress->Update(absl::StrFormat("%s: %d/%d tokens", label, *context, target),
                       static_cast<double>(*context), static_cast<double>(target));
    }
  }
  return grpc::Status::OK;
}

}  // namespace flatstate::loadtest
