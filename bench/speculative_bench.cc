// Speculative decoding's speed (docs/speculative.md, docs/benchmarks.md): one session decodes
// `tokens` tokens after a prompt, greedy, on the CPU engine, five ways (six with a draft model),
// each timed (wall, median of `reps` rounds, each round every way once, interleaved; the prompt's
// prefill and first token are not timed), and
// every speculative run's tokens are checked against the plain run's (the program fails if one
// differs):
//   plain         one token per step, no drafts;
//   lookup        PromptLookupDrafter over the prompt and the output, paced by a StepCostModel
//                 of the steps of this mode's runs so far (what the server does: it keeps one per
//                 model across requests, so only the first round starts unmeasured; that round's
//                 ratio is printed apart as "cold");
//   oracle-right  the draft is the plain run's next tokens (every draft accepted: the ceiling);
//   oracle-half   the first half of every draft (rounded up) right, the rest wrong: every step
//                 keeps part of its draft and rolls the rest back;
//   oracle-wrong  every draft token is wrong and every step drafts (no pause: the floor; each
//                 step pays the verification rows and, on recurrent models, the state records);
//   draft-model   (with a draft model folder) DraftModelDrafter: that model's greedy drafts,
//                 paced as lookup's.
//   flatstate-speculative-bench <model dir> <prompt file> [tokens=256] [max_draft=8] [threads=1]
//       [reps=3] [weight dtype=auto: the file's own; f32 | bf16 | int8 | int4] [draft model dir]
// FLATSTATE_SPEC_TRACE set: every timed step of the lookup runs to stderr ("step rows R us T"),
// what the cost model is fed.
// The prompt file's text is encoded with the model's tokenizer; a file named *.ids holds token ids
// (whitespace-separated), for models whose tokenizer flatstate does not read.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/runtime/engine.h"
#include "engine/speculate/draft_model.h"
#include "engine/speculate/prompt_lookup.h"
#include "engine/speculate/step_cost.h"

namespace fs = flatstate;

namespace {

enum class Mode { kPlain, kLookup, kOracleRight, kOracleHalf, kOracleWrong, kDraftModel };
constexpr const char* kModeNames[] = {"plain",       "lookup",       "oracle-right",
                                      "oracle-half", "oracle-wrong", "draft-model"};

struct RunResult {
  std::vector<int32_t> tokens;
  double seconds = 0;
  int64_t steps = 0, drafted = 0, accepted = 0;
  // lookup, draft-model: StepCostModel::Costs(1, 1, max_draft) at the end.
  std::vector<double> costs;
};

// `draft_engine`: the draft model's engine (kDraftModel only). `step_cost`: the mode's cost
// model, kept across its runs.
RunResult Decode(fs::Engine* e, const std::vector<int32_t>& prompt, size_t n, Mode mode,
                 int max_draft, const std::vector<int32_t>& plain, fs::Engine* draft_engine,
                 fs::StepCostModel* step_cost) {
  RunResult out;
  fs::SessionState s = e->NewSession(fs::SamplingParams{});
  std::unique_ptr<fs::Drafter> drafter;
  if (mode == Mode::kDraftModel) {
    drafter = std::make_unique<fs::DraftModelDrafter>(draft_engine, max_draft);
  } else {
    drafter =
        std::make_unique<fs::PromptLookupDrafter>(fs::PromptLookupOptions{.max_draft = max_draft});
  }
  drafter->Append(prompt);
  if (!e->Append(&s, prompt).ok()) std::abort();
  std::vector<fs::StepResult> res;
  std::vector<int32_t> draft;
  // The prompt and the first token, untimed: the runs differ only in decoding.
  while (out.tokens.empty()) {
    fs::StepRequest r{&s, 1 << 30, true};
    if (!e->Step(std::span<const fs::StepRequest>(&r, 1), &res).ok()) std::abort();
    if (res[0].sampled) out.tokens.push_back(res[0].token);
  }
  drafter->Append(out.tokens);
  // What the server does: the drafters are paced by the measured cost of the model's steps.
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const bool trace = std::getenv("FLATSTATE_SPEC_TRACE") != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  while (out.tokens.size() < n) {
    fs::StepRequest r{&s, 1 << 30, true};
    const size_t have = out.tokens.size();
    const int limit = static_cast<int>(std::min<size_t>(max_draft, n - have - 1));
    draft.clear();
    if (limit > 0) {
      if (mode == Mode::kLookup || mode == Mode::kDraftModel) {
        const auto td = std::chrono::steady_clock::now();
        draft = drafter->Draft(limit, step_cost->Costs(1, 1, max_draft));
        if (!draft.empty())
          step_cost->ObserveDraft(static_cast<int>(draft.size()), seconds_since(td));
      }
      for (size_t j = have; mode >= Mode::kOracleRight && mode <= Mode::kOracleWrong &&
                            j < plain.size() &&
                            draft.size() < static_cast<size_t>(limit);
           ++j) {
        const bool right =
            mode == Mode::kOracleRight ||
            (mode == Mode::kOracleHalf && j - have < static_cast<size_t>(limit + 1) / 2);
        draft.push_back(right ? plain[j] : (plain[j] + 1) % e->config().vocab_size);
      }
    }
    r.draft = draft;
    const auto ts = std::chrono::steady_clock::now();
    if (absl::Status st = e->Step(std::span<const fs::StepRequest>(&r, 1), &res); !st.ok()) {
      std::fprintf(stderr, "step: %s\n", std::string(st.message()).c_str());
      std::exit(1);
    }
    step_cost->ObserveStep(1 + res[0].drafted, seconds_since(ts));
    if (trace && mode == Mode::kLookup)
      std::fprintf(stderr, "step rows %d us %.1f\n", 1 + res[0].drafted, 1e6 * seconds_since(ts));
    ++out.steps;
    if (!res[0].sampled) continue;
    out.drafted += res[0].drafted;
    out.accepted += static_cast<int64_t>(res[0].accepted.size());
    if (res[0].drafted > 0) {
      drafter->Feedback(res[0].drafted, static_cast<int>(res[0].accepted.size()));
    }
    for (int32_t t : res[0].accepted) out.tokens.push_back(t);
    out.tokens.push_back(res[0].token);
    drafter->Append(res[0].accepted);
    drafter->Append(std::span<const int32_t>(&res[0].token, 1));
  }
  out.seconds = seconds_since(t0);
  if (mode == Mode::kLookup || mode == Mode::kDraftModel)
    out.costs = step_cost->Costs(1, 1, max_draft);
  out.tokens.resize(std::min(out.tokens.size(), n));
  e->ReleaseSession(&s);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s <model dir> <prompt file> [tokens=256] [max_draft=8] [threads=1] "
                 "[reps=3] [weight dtype] [draft model dir]\n",
                 argv[0]);
    return 2;
  }
  const size_t n = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 256;
  const int max_draft = argc > 4 ? std::atoi(argv[4]) : 8;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 1;
  const int reps = argc > 6 ? std::atoi(argv[6]) : 3;
  auto dtype = fs::ParseWeightDtypeOption(argc > 7 ? argv[7] : "auto");
  if (!dtype.ok()) {
    std::fprintf(stderr, "%s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  auto model = fs::Model::Load(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  std::ifstream f(argv[2]);
  std::stringstream text;
  text << f.rdbuf();
  const std::string path = argv[2];
  absl::StatusOr<std::vector<int32_t>> prompt;
  if (path.size() > 4 && path.substr(path.size() - 4) == ".ids") {
    prompt.emplace();
    for (int32_t id; text >> id;) prompt->push_back(id);
  } else {
    prompt = (*model)->tokenizer().Encode(text.str(), /*add_special=*/true);
  }
  if (!prompt.ok()) {
    std::fprintf(stderr, "prompt: %s\n", std::string(prompt.status().message()).c_str());
    return 1;
  }
  fs::EngineOptions o;
  o.threads = threads;
  o.weight_dtype = *dtype;
  auto engine = fs::Engine::Create(std::move(*model), o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  // The draft model: its folder's own weight type, the same threads.
  std::unique_ptr<fs::Engine> draft_engine;
  if (argc > 8) {
    auto draft_model = fs::Model::Load(argv[8]);
    fs::EngineOptions d;
    d.threads = threads;
    auto de = draft_model.ok() ? fs::Engine::Create(std::move(*draft_model), d)
                               : absl::StatusOr<std::unique_ptr<fs::Engine>>(draft_model.status());
    if (!de.ok()) {
      std::fprintf(stderr, "draft model: %s\n", std::string(de.status().message()).c_str());
      return 1;
    }
    draft_engine = std::move(*de);
  }
  std::printf(
      "model %s, prompt %zu tokens, %zu generated, max_draft %d, %d thread(s), %d reps%s%s\n",
      argv[1], prompt->size(), n, max_draft, threads, reps, draft_engine ? ", draft model " : "",
      draft_engine ? argv[8] : "");
  fs::StepCostModel warmup_cost;
  const RunResult plain =
      Decode(engine->get(), *prompt, n, Mode::kPlain, max_draft, {}, nullptr, &warmup_cost);
  double plain_tps = 0;
  std::vector<Mode> modes = {Mode::kPlain, Mode::kLookup, Mode::kOracleRight, Mode::kOracleHalf,
                             Mode::kOracleWrong};
  if (draft_engine) modes.push_back(Mode::kDraftModel);
  // Interleaved: each round runs every mode once, so a slow minute on a shared machine hits every
  // mode alike (the modes one after another, `reps` each, put the plain runs and the lookup runs
  // minutes apart: their ratio moved by several per cent between runs of the same binary).
  std::vector<std::vector<double>> secs(modes.size());
  std::vector<RunResult> last(modes.size());
  std::vector<fs::StepCostModel> step_costs(modes.size());  // per mode, across its rounds
  std::vector<double> secs_cold(modes.size());              // round 1's seconds
  for (int r = 0; r < reps; ++r) {
    for (size_t m = 0; m < modes.size(); ++m) {
      last[m] = Decode(engine->get(), *prompt, n, modes[m], max_draft, plain.tokens,
                       draft_engine.get(), &step_costs[m]);
      if (last[m].tokens != plain.tokens) {
        std::fprintf(stderr, "%s: the tokens differ from the plain run's\n",
                     kModeNames[static_cast<int>(modes[m])]);
        return 1;
      }
      secs[m].push_back(last[m].seconds);
      if (r == 0) secs_cold[m] = last[m].seconds;
    }
  }
  for (size_t m = 0; m < modes.size(); ++m) {
    const Mode mode = modes[m];
    std::sort(secs[m].begin(), secs[m].end());
    const double tps = static_cast<double>(n - 1) / secs[m][secs[m].size() / 2];  // timed tokens
    if (mode == Mode::kPlain) plain_tps = tps;
    std::printf(
        "%-13s %9.1f tok/s  %5.2fx  steps %5lld  drafted %6lld  accepted %6lld (%.0f%%)  "
        "same tokens: yes\n",
        kModeNames[static_cast<int>(mode)], tps, tps / plain_tps,
        static_cast<long long>(last[m].steps), static_cast<long long>(last[m].drafted),
        static_cast<long long>(last[m].accepted),
        last[m].drafted > 0
            ? 100.0 * static_cast<double>(last[m].accepted) / static_cast<double>(last[m].drafted)
            : 0.0);
    if (!last[m].costs.empty() && reps > 1) {  // round 1: the cost model started unmeasured
      const double cold = secs_cold[m] > 0 ? secs_cold[0] / secs_cold[m] : 0;
      std::printf("%-13s cold (round 1, its cost model unmeasured): %.2fx\n", "", cold);
    }
    if (!last[m].costs.empty()) {  // what the pacer saw at the end of the last rep
      std::printf("%-13s measured cost of a step verifying k = 1..%d drafted, in plain steps:", "",
                  max_draft);
      for (size_t k = 1; k < last[m].costs.size(); ++k) std::printf(" %.2f", last[m].costs[k]);
      std::printf("\n");
    }
  }
  return 0;
}
