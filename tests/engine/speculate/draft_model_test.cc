// DraftModelDrafter (engine/speculate/draft_model.h) on the shipped models: its drafts are the
// draft model's greedy continuation of the context, whatever was drafted and refused before (it
// goes back to its fork), a clone drafts as the original would, a failing draft engine ends
// drafting, and a target verifying its drafts (StepRequest::draft) emits exactly the tokens of
// plain decoding, accepting most drafts when the draft model is the target's own weights.
#include "engine/speculate/draft_model.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using Tokens = std::vector<int32_t>;

// Verification costing nothing: the pacer proposes the longest draft it may.
const std::vector<double> kFree(9, 1.0);

std::unique_ptr<Engine> Load(const std::string& name, int kv_blocks = 0) {
  auto model = Model::Load(std::string(FLATSTATE_SOURCE_DIR) + "/models/" + name);
  EXPECT_TRUE(model.ok()) << model.status();
  EngineOptions o;
  o.threads = 1;
  if (kv_blocks > 0) o.kv_blocks = kv_blocks;
  auto e = Engine::Create(std::move(*model), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

Tokens Prompt(const Engine& e) {
  auto t = e.model().tokenizer().Encode(
      "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and", true);
  EXPECT_TRUE(t.ok());
  return *t;
}

struct Decoded {
  Tokens tokens;
  int drafted = 0, accepted = 0;
};

// Greedy decoding of n tokens on `target` after `prompt`, drafts from `drafter` when set.
Decoded Decode(Engine* target, const Tokens& prompt, size_t n, Drafter* drafter) {
  Decoded out;
  SessionState s = target->NewSession(SamplingParams{});
  EXPECT_TRUE(target->Append(&s, prompt).ok());
  if (drafter != nullptr) drafter->Append(prompt);
  std::vector<StepResult> res;
  Tokens draft;
  while (out.tokens.size() < n) {
    StepRequest r{&s, 1 << 30, true};
    if (drafter != nullptr && !out.tokens.empty()) {
      draft = drafter->Draft(static_cast<int>(n - out.tokens.size() - 1), {});  // prior costs
      r.draft = draft;
    }
    EXPECT_TRUE(target->Step(std::span<const StepRequest>(&r, 1), &res).ok());
    EXPECT_TRUE(res[0].status.ok()) << res[0].status;
    if (!res[0].sampled) continue;
    if (drafter != nullptr && res[0].drafted > 0) {
      drafter->Feedback(res[0].drafted, static_cast<int>(res[0].accepted.size()));
    }
    out.drafted += res[0].drafted;
    out.accepted += static_cast<int>(res[0].accepted.size());
    Tokens emitted = res[0].accepted;
    emitted.push_back(res[0].token);
    if (drafter != nullptr) drafter->Append(emitted);
    out.tokens.insert(out.tokens.end(), emitted.begin(), emitted.end());
  }
  out.tokens.resize(n);
  target->ReleaseSession(&s);
  return out;
}

TEST(DraftModelDrafter, TargetOutputIsPlainDecodingAndItsOwnWeightsDraftWell) {
  for (const char* target_name : {"shakespeare-gated-deltanet", "shakespeare-softmax"}) {
    SCOPED_TRACE(target_name);
    std::unique_ptr<Engine> target = Load(target_name);
    const Tokens prompt = Prompt(*target);
    const Decoded plain = Decode(target.get(), prompt, 120, nullptr);
    // The target's own weights as the draft model: its greedy drafts are the target's choices.
    std::unique_ptr<Engine> same = Load(target_name);
    DraftModelDrafter self(same.get(), 5);
    const Decoded with_self = Decode(target.get(), prompt, 120, &self);
    EXPECT_EQ(with_self.tokens, plain.tokens);
    EXPECT_GT(with_self.drafted, 60);
    // The chunked prefill of the draft session rounds differently from the target's decode
    // steps, so a near-tie may go the other way; almost every draft token is kept.
    EXPECT_GE(with_self.accepted * 10, with_self.drafted * 9)
        << with_self.accepted << " of " << with_self.drafted;
    // Another model of the same (byte) vocabulary: fewer drafts kept, the same output.
    std::unique_ptr<Engine> other = Load("shakespeare-linear-elu");
    DraftModelDrafter linear(other.get(), 5);
    const Decoded with_other = Decode(target.get(), prompt, 120, &linear);
    EXPECT_EQ(with_other.tokens, plain.tokens);
    EXPECT_GT(with_other.drafted, 0);
    EXPECT_FALSE(linear.failed());
  }
}

TEST(DraftModelDrafter, RefusedDraftsLeaveNoTraceAndAClonedDrafterDraftsTheSame) {
  std::unique_ptr<Engine> e = Load("shakespeare-gated-deltanet");
  const Tokens prompt = Prompt(*e);
  DraftModelDrafter d(e.get(), 4);
  d.Append(prompt);
  const Tokens first = d.Draft(4, kFree);
  ASSERT_EQ(first.size(), 4u);
  // The target kept two tokens and drew another: the context goes on with those three.
  d.Feedback(4, 2);
  const Tokens next = {first[0], first[1], first[2] == 'x' ? int32_t{'y'} : int32_t{'x'}};
  d.Append(next);
  // A drafter fed the same context from the start drafts the same tokens.
  DraftModelDrafter fresh(e.get(), 4);
  Tokens context = prompt;
  context.insert(context.end(), next.begin(), next.end());
  fresh.Append(context);
  std::unique_ptr<Drafter> clone = d.Clone();
  ASSERT_NE(clone, nullptr);
  const Tokens again = d.Draft(2, kFree);
  EXPECT_EQ(again, fresh.Draft(2, kFree));
  EXPECT_EQ(again.size(), 2u);
  // A draft never verified (no Feedback) is dropped by the next Append as well.
  d.Append(Tokens{again[0]});
  // The clone, taken before `again`, drafts what the original drafted then.
  EXPECT_EQ(clone->Draft(2, kFree), again);
}

TEST(DraftModelDrafter, AFailingDraftEngineStopsDrafting) {
  // A softmax draft model with 2 KV blocks cannot hold the prompt: the draft step fails.
  std::unique_ptr<Engine> small = Load("shakespeare-softmax", /*kv_blocks=*/2);
  Tokens prompt = Prompt(*small);
  while (prompt.size() < 200) prompt.insert(prompt.end(), prompt.begin(), prompt.end());
  DraftModelDrafter d(small.get(), 4);
  d.Append(prompt);
  EXPECT_TRUE(d.Draft(4, kFree).empty());
  EXPECT_TRUE(d.failed());
  d.Append(Tokens{'a'});
  EXPECT_TRUE(d.Draft(4, kFree).empty());
  std::unique_ptr<Drafter> clone = d.Clone();
  if (clone != nullptr) {
    EXPECT_TRUE(clone->Draft(4, kFree).empty());
  }
}

}  // namespace
}  // namespace flatstate
