#include "clients/loadtest/multiturn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "clients/loadtest/growth.h"
#include "clients/loadtest/report.h"
#include "clients/loadtest/stats.h"

namespace flatstate::loadtest {

namespace pb = flatstate::v1;

namespace {

struct TurnSample {
  bool ok = false;
  double ttft_s = -1;
  uint64_t prompt_tokens = 0, cached_tokens = 0;
};

// One conversation: `turns` stateless Generates, each resending the whole history.
void Converse(const Client& client, const MultiturnOptions& o, const std::string& model,
              int64_t vocab, int conv,
              std::vector<TurnSample>* out, std::string* first_error, absl::Mutex* mu,
              std::atomic<int>* done) {
  std::vector<int32_t> history;
  for (int t = 0; t < o.turns; ++t) {
    for (int i = 0; i < o.message_tokens; ++i) {
      // Letters, with a space every 6th: distinct per conversation and turn.
      history.push_back(
          FitToVocab(i % 6 == 5 ? ' ' : 'a' + (conv * 131 + t * 17 + i * 7) % 26, vocab));
    }
    pb::GenerateRequest req;
    req.set_model(model);
    req.set_max_new_tokens(o.reply_tokens);
    req.mutable_sampling()->set_temperature(0);
    for (int32_t tok : history) req.add_prompt_tokens(tok);
    const GenerateResult r = client.Generate(req);
    TurnSample& s = (*out)[static_cast<size_t>(t)];
    s.ok = r.ok();
    s.ttft_s = r.ttft_s;
    s.prompt_tokens = r.usage.prompt_tokens();
    s.cached_tokens = r.usage.cached_prompt_tokens();
    done->fetch_add(1);
    if (!r.ok()) {
      absl::MutexLock lock(mu);
      if (first_error->empty()) {
        *first_error =
            absl::StrCat(CodeName(r.status.error_code()), ": ", r.status.error_message());
      }
      done->fetch_add(o.turns - t - 1);
      return;
    }
    history.insert(history.end(), r.token_ids.begin(), r.token_ids.end());
  }
}

}  // namespace

std::vector<MultiturnRow> RunMultiturn(const Client& client, const std::string& label,
                                       const MultiturnOptions& o, Progress* progress,
                                       CheckList* checks) {
  std::vector<MultiturnRow> rows;
  for (const std::string& model : o.models) {
    std::vector<std::vector<TurnSample>> samples(
        static_cast<size_t>(o.conversations),
        std::vector<TurnSample>(static_cast<size_t>(o.turns)));
    absl::Mutex mu;
    std::string first_error;
    std::atomic<int> done{0};
    const int64_t vocab = VocabOf(client, model);
    std::vector<std::thread> threads;
    for (int c = 0; c < o.conversations; ++c) {
      threads.emplace_back(Converse, std::cref(client), std::cref(o), std::cref(model), vocab, c,
                           &samples[static_cast<size_t>(c)], &first_error, &mu, &done);
    }
    const int total = o.conversations * o.turns;
    const std::string what = absl::StrFormat("multiturn %s %s x%d", label, model, o.conversations);
    while (done.load() < total) {
      progress->Update(what, done.load(), total);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (std::thread& t : threads) t.join();
    progress->Update(what, total, total);

    int failed = 0;
    bool any_cached = false;
    std::vector<MultiturnRow> model_rows;
    for (int t = 0; t < o.turns; ++t) {
      MultiturnRow row;
      row.label = label;
      row.model = model;
      row.turn = t + 1;
      std::vector<double> ttft;
      for (const auto& conv : samples) {
        const TurnSample& s = conv[static_cast<size_t>(t)];
        if (s.prompt_tokens == 0 && !s.ok) continue;  // never sent: an earlier turn failed
        ++row.requests;
        if (!s.ok) continue;
        ++row.ok;
        row.prompt_tokens += static_cast<double>(s.prompt_tokens);
        row.cached_tokens += static_cast<double>(s.cached_tokens);
        if (s.ttft_s >= 0) ttft.push_back(s.ttft_s * 1e3);
      }
      failed += row.requests - row.ok;
      if (row.ok > 0) {
        row.prompt_tokens /= row.ok;
        row.cached_tokens /= row.ok;
        row.prefill_tokens = row.prompt_tokens - row.cached_tokens;
      }
      any_cached |= row.cached_tokens > 0;
      if (!ttft.empty()) {
        double sum = 0;
        for (double v : ttft) sum += v;
        row.ttft_mean_ms = sum / static_cast<double>(ttft.size());
        row.ttft_p50_ms = Percentile(ttft, 50);
        row.ttft_p99_ms = Percentile(ttft, 99);
      }
      model_rows.push_back(row);
    }
    checks->Add(failed == 0 && first_error.empty(),
                absl::StrCat("multiturn ", label, " ", model, ": every turn succeeds"),
                failed == 0 ? absl::StrFormat("%d requests", total)
                            : absl::StrFormat("%d failed, first: %s", failed, first_error));
    if (any_cached && model_rows.size() >= 2) {
      double worst = 0;
      for (size_t t = 1; t < model_rows.size(); ++t) {
        worst = std::max(worst, model_rows[t].prefill_tokens);
      }
      const double base = model_rows[1].prefill_tokens;
      checks->Add(worst <= 1.5 * base,
                  absl::StrCat("multiturn ", label, " ", model,
                               ": prefix cache keeps prefill per turn flat"),
                  absl::StrFormat("turn 2: %.0f tokens, largest from turn 2 on: %.0f (turn %d "
                                  "prompt: %.0f tokens)",
                                  base, worst, o.turns, model_rows.back().prompt_tokens));
    } else {
      checks->Info(absl::StrCat("multiturn ", label, " ", model,
                                ": no cached prompt tokens reported (prefix cache off?)"));
    }
    rows.insert(rows.end(), model_rows.begin(), model_rows.end());
  }
  return rows;
}

absl::Status WriteMultiturnCsv(const std::string& dir, const std::vector<MultiturnRow>& rows) {
  std::string csv =
      "label,model,turn,requests,ok,prompt_tokens,cached_tokens,prefill_tokens,ttft_p50_ms,"
      "ttft_mean_ms,ttft_p99_ms\n";
  for (const MultiturnRow& r : rows) {
    absl::StrAppend(
        &csv, absl::StrFormat("%s,%s,%d,%d,%d,%.1f,%.1f,%.1f,%.3f,%.3f,%.3f\n", r.label, r.model,
                              r.turn, r.requests, r.ok, r.prompt_tokens, r.cached_tokens,
                              r.prefill_tokens, r.ttft_p50_ms, r.ttft_mean_ms, r.ttft_p99_ms));
  }
  return WriteFile(dir + "/multiturn.csv", csv);
}

void PrintMultiturnTable(const std::vector<MultiturnRow>& rows) {
  std::printf("%-10s %-26s %4s %8s %8s %8s %9s %9s %9s\n", "label", "model", "turn", "prompt",
              "cached", "prefill", "ttft_p50", "ttft_mean", "ttft_p99");
  for (const MultiturnRow& r : rows) {
    std::printf("%-10s %-26s %4d %8.0f %8.0f %8.0f %7.2fms %7.2fms %7.2fms\n", r.label.c_str(),
                r.model.c_str(), r.turn, r.prompt_tokens, r.cached_tokens, r.prefill_tokens,
                r.ttft_p50_ms, r.ttft_mean_ms, r.ttft_p99_ms);
  }
}

}  // namespace flatstate::loadtest
