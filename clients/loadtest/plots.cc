#include "clients/loadtest/plots.h"

#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

extern char** environ;

namespace flatstate::loadtest {

namespace {

// One plotted line: a title and (x, y) points.
struct Series {
  std::string title;
  std::vector<std::pair<double, double>> xy;
};

struct Chart {
  std::string file;  // PNG name inside dir
  std::string title, xlabel, ylabel;
  bool logx = true, logy = false;
  std::vector<Series> series;
};

std::string Quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

absl::Status RunGnuplot(const std::string& script) {
  const std::string prog = "gnuplot";
  char* argv[] = {const_cast<char*>(prog.c_str()), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  if (int e = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ); e != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot run gnuplot (install gnuplot-nox): error ", e));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", script));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Draw(const std::string& dir, const Chart& c) {
  const std::string png = absl::StrCat(dir, "/", c.file);
  const std::string gp = absl::StrCat(png.substr(0, png.size() - 4), ".gp");
  std::string s = absl::StrCat(
      "set terminal pngcairo size 960,600 noenhanced font 'DejaVu Sans,10'\n",
      "set output ", Quote(png), "\nset title ", Quote(c.title), "\nset xlabel ",
      Quote(c.xlabel), "\nset ylabel ", Quote(c.ylabel),
      "\nset grid\nset key below\nset datafile missing 'NaN'\n");
  if (c.logx) absl::StrAppend(&s, "set logscale x 2\nset format x '%.0f'\n");
  absl::StrAppend(&s, c.logy ? "set logscale y 10\n" : "set yrange [0:*]\n");
  std::string plot;
  int n = 0;
  for (const Series& se : c.series) {
    if (se.xy.empty()) continue;
    absl::StrAppend(&s, "$d", n, " << EOD\n");
    for (const auto& [x, y] : se.xy) absl::StrAppend(&s, absl::StrFormat("%.6g %.6g\n", x, y));
    absl::StrAppend(&s, "EOD\n");
    absl::StrAppend(&plot, plot.empty() ? "plot " : ", \\\n     ", "$d", n,
                    " using 1:2 with linespoints lw 2 pt 7 title ", Quote(se.title));
    ++n;
  }
  if (n == 0) return std::string();  // nothing to draw
  absl::StrAppend(&s, plot, "\n");
  {
    std::ofstream out(gp, std::ios::trunc);
    out << s;
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write '", gp, "'"));
  }
  if (absl::Status st = RunGnuplot(gp); !st.ok()) return st;
  return png;
}

absl::StatusOr<std::vector<std::string>> DrawAll(const std::string& dir,
                                                 const std::vector<Chart>& charts) {
  std::vector<std::string> out;
  for (const Chart& c : charts) {
    absl::StatusOr<std::string> p = Draw(dir, c);
    if (!p.ok()) return p.status();
    if (!p->empty()) out.push_back(*p);
  }
  return out;
}

Series MemorySeries(const MemoryModelResult& r, const std::string& suffix,
                    const std::function<double(const MemoryPoint&)>& y) {
  Series se{absl::StrCat(r.model, " (", r.kind, ")", suffix), {}};
  for (const MemoryPoint& p : r.points) {
    se.xy.emplace_back(static_cast<double>(p.context_tokens), y(p));
  }
  return se;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PlotMemory(const std::string& dir,
                                                    const std::vector<MemoryModelResult>& results) {
  constexpr double kMiB = 1 << 20;
  Chart mem{"memory_vs_context.png", "Per-session memory vs context (state_bytes: linear state "
            "or softmax KV blocks)", "context (tokens)", "MiB per session", true, true, {}};
  Chart rss{"rss_vs_context.png", "Server RSS vs context", "context (tokens)", "server RSS (MiB)",
            true, false, {}};
  Chart tps{"decode_tps_vs_context.png", "Decode throughput vs context (one stream)",
            "context (tokens)", "decode tokens/s", true, false, {}};
  Chart itl{"itl_vs_context.png", "Inter-token latency vs context (one stream)",
            "context (tokens)", "ms", true, true, {}};
  for (const MemoryModelResult& r : results) {
    mem.series.push_back(MemorySeries(r, "", [&](const MemoryPoint& p) {
      return static_cast<double>(p.state_bytes) / kMiB;
    }));
    rss.series.push_back(MemorySeries(r, "", [&](const MemoryPoint& p) {
      return static_cast<double>(p.rss_bytes) / kMiB;
    }));
    tps.series.push_back(
        MemorySeries(r, "", [](const MemoryPoint& p) { return p.decode_tokens_per_s; }));
    itl.series.push_back(
        MemorySeries(r, " p50", [](const MemoryPoint& p) { return p.itl_p50_ms; }));
    itl.series.push_back(
        MemorySeries(r, " p99", [](const MemoryPoint& p) { return p.itl_p99_ms; }));
  }
  return DrawAll(dir, {mem, rss, tps, itl});
}

absl::StatusOr<std::vector<std::string>> PlotConcurrency(const std::string& dir,
                                                         const std::vector<ConcurrencyRow>& rows) {
  Chart tps{"concurrency_tps.png", "Aggregate generated tokens/s vs concurrent sessions",
            "concurrent sessions", "tokens/s", true, false, {}};
  Chart lat{"concurrency_latency.png", "Latency vs concurrent sessions", "concurrent sessions",
            "ms", true, true, {}};
  std::map<std::string, std::vector<const ConcurrencyRow*>> by_model;
  std::vector<std::string> order;
  for (const ConcurrencyRow& r : rows) {
    if (by_model[r.model].empty()) order.push_back(r.model);
    by_model[r.model].push_back(&r);
  }
  for (const std::string& m : order) {
    Series t{m, {}}, t50{m + " TTFT p50", {}}, t99{m + " TTFT p99", {}},
        i50{m + " ITL p50", {}}, i99{m + " ITL p99", {}};
    for (const ConcurrencyRow* r : by_model[m]) {
      const double x = r->concurrency;
      t.xy.emplace_back(x, r->tokens_per_s);
      t50.xy.emplace_back(x, r->ttft_p50_ms);
      t99.xy.emplace_back(x, r->ttft_p99_ms);
      i50.xy.emplace_back(x, r->itl_p50_ms);
      i99.xy.emplace_back(x, r->itl_p99_ms);
    }
    tps.series.push_back(t);
    for (Series* s : {&t50, &t99, &i50, &i99}) lat.series.push_back(*s);
  }
  return DrawAll(dir, {tps, lat});
}

absl::StatusOr<std::vector<std::string>> PlotMigration(const std::string& dir,
                                                       const std::vector<MigrationRow>& rows) {
  Chart bytes{"migration_bytes.png", "Session migration: bytes moved (B loads) and write-through "
              "bytes per turn (A) vs context", "context (tokens)", "bytes", true, true, {}};
  Chart lat{"migration_latency.png", "Session migration: first token of a 1-token turn",
            "context (tokens)", "ms", true, true, {}};
  std::map<std::string, std::vector<const MigrationRow*>> by_model;
  std::vector<std::string> order;
  for (const MigrationRow& r : rows) {
    if (!r.skipped.empty()) continue;
    if (by_model[r.model].empty()) order.push_back(r.model);
    by_model[r.model].push_back(&r);
  }
  for (const std::string& m : order) {
    const std::string k = absl::StrCat(m, " (", by_model[m].front()->kind, ")");
    Series moved{k + " moved", {}}, write{k + " write/turn", {}}, resume{k + " on B (resume)", {}},
        back{k + " back on A (reload)", {}}, resident{k + " on A (resident)", {}};
    for (const MigrationRow* r : by_model[m]) {
      const double x = static_cast<double>(r->context_tokens);
      moved.xy.emplace_back(x, static_cast<double>(r->bytes_moved));
      write.xy.emplace_back(x, static_cast<double>(r->write_bytes_per_turn));
      resume.xy.emplace_back(x, r->resume_first_token_ms);
      back.xy.emplace_back(x, r->baseline_first_token_ms);
      resident.xy.emplace_back(x, r->resident_first_token_ms);
    }
    bytes.series.push_back(moved);
    bytes.series.push_back(write);
    for (Series* s : {&resume, &back, &resident}) lat.series.push_back(*s);
  }
  return DrawAll(dir, {bytes, lat});
}

absl::StatusOr<std::vector<std::string>> PlotMultiturn(const std::string& dir,
                                                       const std::vector<MultiturnRow>& rows) {
  Chart ttft{"multiturn_ttft.png",
             "Multi-turn chat, stateless clients: time to first token",
             "turn",
             "mean ms",
             false,
             false,
             {}};
  Chart prefill{"multiturn_prefill.png",
                "Multi-turn chat: prompt tokens prefilled per turn",
                "turn",
                "tokens (mean)",
                false,
                false,
                {}};
  std::map<std::string, size_t> index;  // "label model" -> series
  for (const MultiturnRow& r : rows) {
    const std::string k = absl::StrCat(r.model, " [", r.label, "]");
    auto [it, added] = index.emplace(k, ttft.series.size());
    if (added) {
      ttft.series.push_back(Series{k, {}});
      prefill.series.push_back(Series{k, {}});
    }
    if (r.ok == 0) continue;
    ttft.series[it->second].xy.emplace_back(r.turn, r.ttft_mean_ms);
    prefill.series[it->second].xy.emplace_back(r.turn, r.prefill_tokens);
  }
  return DrawAll(dir, {ttft, prefill});
}

}  // namespace flatstate::loadtest
