#include "clients/loadtest/migration.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clients/loadtest/growth.h"
#include "clients/loadtest/report.h"

namespace flatstate::loadtest {

namespace pb = flatstate::v1;

namespace {

std::string Describe(const grpc::Status& s) {
  return absl::StrCat(CodeName(s.error_code()), ": ", s.error_message());
}

// Growth failures that end a model's sweep as "skipped" rather than FAIL: the softmax KV pool
// ran dry or the model's maximum position was reached.
bool ExpectedLimit(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
         s.error_code() == grpc::StatusCode::OUT_OF_RANGE ||
         s.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
}

// A linear checkpoint is constant-size except the decoder's pending UTF-8 bytes (text tail, at
// most 3) and varint-coded counters in its header.
constexpr int64_t kLinearSlackBytes = 64;

class ModelMigration {
 public:
  ModelMigration(const Client& a, const Client& b, const MigrationOptions& o,
                 const pb::ModelInfo& info, Progress* progress, CheckList* checks)
      : a_(a), b_(b), o_(o), info_(info), progress_(progress), checks_(checks) {}

  std::vector<MigrationRow> Run() {
    pb::Session session;
    if (grpc::Status s = a_.CreateSession(info_.name(), &session); !s.ok()) {
      Fail("CreateSession on A", s);
      return rows_;
    }
    id_ = session.session_id();
    std::string skip;
    for (int64_t target : o_.contexts) {
      MigrationRow row = NewRow(target);
      if (skip.empty()) {
        int64_t prefilled = 0;
        double seconds = 0;
        grpc::Status s = GrowSession(a_, id_, static_cast<int64_t>(info_.vocab_size()), target,
                                     o_.chunk_tokens,
                                     absl::StrCat("migration ", info_.name()), progress_, &ctx_,
                                     &prefilled, &seconds);
        if (!s.ok()) {
          skip = absl::StrFormat("growth stopped at %d tokens: %s", ctx_, Describe(s));
          if (!ExpectedLimit(s)) Fail(absl::StrCat("growing to ", target), s);
        } else if (!Measure(&row)) {
          skip = "measurement failed (see FAIL line)";
        }
      }
      row.skipped = skip;
      if (!skip.empty()) row.context_tokens = 0;
      rows_.push_back(row);
    }
    if (grpc::Status s = a_.DeleteSession(id_); !s.ok()) Fail("DeleteSession on A", s);
    return rows_;
  }

 private:
  MigrationRow NewRow(int64_t target) const {
    MigrationRow row;
    row.model = info_.name();
    row.kind = info_.attention_kind();
    row.target_tokens = target;
    return row;
  }

  void Fail(const std::string& what, const grpc::Status& s) {
    checks_->Add(false, absl::StrCat(info_.name(), " migration"),
                 absl::StrCat(what, ": ", Describe(s)));
  }

  bool Stats(const Client& c, const char* which, pb::ServerStats* out) {
    grpc::Status s = c.GetStats(out);
    if (!s.ok()) Fail(absl::StrCat("GetStats on ", which), s);
    return s.ok();
  }

  // One 1-token decode turn on `c`; returns its first-token time in ms (< 0 on failure).
  double Turn(const Client& c, const char* which) {
    pb::GenerateRequest req;
    req.set_session_id(id_);
    req.set_max_new_tokens(1);
    GenerateResult r = c.Generate(req);
    if (!r.ok() || r.ttft_s < 0) {
      Fail(absl::StrCat("1-token Generate on ", which), r.status);
      return -1;
    }
    if (r.usage.context_tokens() > 0) ctx_ = static_cast<int64_t>(r.usage.context_tokens());
    return r.ttft_s * 1e3;
  }

  bool Measure(MigrationRow* row) {
    row->context_tokens = ctx_;
    pb::ServerStats a0, a1, b0, b1;
    if (!Stats(a_, "A", &a0)) return false;
    if ((row->resident_first_token_ms = Turn(a_, "A")) < 0) return false;
    // The write-through is done before the stream's final message; poll briefly in case a
    // server counts it just after.
    for (int i = 0; i < 20; ++i) {
      if (!Stats(a_, "A", &a1)) return false;
      if (a1.store_writes_total() > a0.store_writes_total()) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    row->writes_per_turn = a1.store_writes_total() - a0.store_writes_total();
    row->write_bytes_per_turn = a1.store_write_bytes_total() - a0.store_write_bytes_total();
    row->write_ms_per_turn =
        (a1.store_write_seconds_total() - a0.store_write_seconds_total()) * 1e3;
    if (!Stats(b_, "B", &b0)) return false;
    if ((row->resume_first_token_ms = Turn(b_, "B")) < 0) return false;
    if (!Stats(b_, "B", &b1)) return false;
    row->bytes_moved = b1.store_load_bytes_total() - b0.store_load_bytes_total();
    row->load_ms = (b1.store_load_seconds_total() - b0.store_load_seconds_total()) * 1e3;
    if (b1.store_loads_total() == b0.store_loads_total()) {
      checks_->Add(false, absl::StrCat(info_.name(), " migration"),
                   absl::StrFormat("B did not load the session from the store at %d tokens "
                                   "(is B sharing A's --session_store?)", ctx_));
      return false;
    }
    return (row->baseline_first_token_ms = Turn(a_, "A")) >= 0;
  }

  const Client& a_;
  const Client& b_;
  const MigrationOptions& o_;
  const pb::ModelInfo& info_;
  Progress* progress_;
  CheckList* checks_;
  std::string id_;
  int64_t ctx_ = 0;
  std::vector<MigrationRow> rows_;
};

void CheckShape(const std::string& model, const std::vector<MigrationRow>& rows,
                CheckList* checks) {
  std::vector<const MigrationRow*> done;
  for (const MigrationRow& r : rows) {
    if (r.model == model && r.skipped.empty()) done.push_back(&r);
  }
  if (done.size() < 2) {
    checks->Info(absl::StrCat(model, ": fewer than two measured contexts, no shape check"));
    return;
  }
  const bool linear = done.front()->kind != "softmax";
  bool ok = true;
  for (size_t i = 1; i < done.size(); ++i) {
    const int64_t diff = static_cast<int64_t>(done[i]->bytes_moved) -
                         static_cast<int64_t>(done[0]->bytes_moved);
    ok = ok && (linear ? std::abs(diff) <= kLinearSlackBytes
                       : done[i]->bytes_moved > done[i - 1]->bytes_moved);
  }
  checks->Add(ok, absl::StrCat(model, linear ? " bytes moved constant" : " bytes moved grow"),
              absl::StrFormat("%d bytes at %d tokens .. %d bytes at %d tokens",
                              done.front()->bytes_moved, done.front()->context_tokens,
                              done.back()->bytes_moved, done.back()->context_tokens));
}

}  // namespace

std::vector<MigrationRow> RunMigration(const Client& a, const Client& b,
                                       const MigrationOptions& options, Progress* progress,
                                       CheckList* checks) {
  std::vector<MigrationRow> rows;
  pb::ListModelsResponse models;
  if (grpc::Status s = a.ListModels(&models); !s.ok()) {
    checks->Add(false, "migration", absl::StrCat("ListModels on A: ", Describe(s)));
    return rows;
  }
  for (const std::string& name : options.models) {
    const pb::ModelInfo* info = FindModel(models, name);
    if (info == nullptr) {
      checks->Add(false, "migration", absl::StrCat("model '", name, "' is not loaded on A"));
      continue;
    }
    std::vector<MigrationRow> r = ModelMigration(a, b, options, *info, progress, checks).Run();
    rows.insert(rows.end(), r.begin(), r.end());
    CheckShape(name, rows, checks);
  }
  return rows;
}

absl::Status WriteMigrationCsv(const std::string& dir, const std::vector<MigrationRow>& rows) {
  std::string csv =
      "model,attention_kind,context_tokens,write_bytes_per_turn,bytes_moved,"
      "resume_first_token_ms,baseline_first_token_ms,resident_first_token_ms,writes_per_turn,"
      "target_tokens,skipped,write_ms_per_turn,load_ms\n";
  for (const MigrationRow& r : rows) {
    std::string reason = r.skipped;
    for (char& ch : reason) {
      if (ch == ',' || ch == '"' || ch == '\n') ch = ' ';
    }
    absl::StrAppend(
        &csv, absl::StrFormat("%s,%s,%d,%d,%d,%.3f,%.3f,%.3f,%d,%d,%s,%.3f,%.3f\n", r.model, r.kind,
                              r.context_tokens, r.write_bytes_per_turn, r.bytes_moved,
                              r.resume_first_token_ms, r.baseline_first_token_ms,
                              r.resident_first_token_ms, r.writes_per_turn, r.target_tokens, reason,
                              r.write_ms_per_turn, r.load_ms));
  }
  return WriteFile(dir + "/migration.csv", csv);
}

void PrintMigrationTable(const std::vector<MigrationRow>& rows) {
  std::printf("%-26s %-10s %9s %12s %9s %12s %9s %10s %10s %10s\n", "model", "kind", "context",
              "write B/turn", "write ms", "bytes moved", "load ms", "resume ms", "back ms",
              "resident");
  for (const MigrationRow& r : rows) {
    if (!r.skipped.empty()) {
      std::printf("%-26s %-10s %9lld skipped: %s\n", r.model.c_str(), r.kind.c_str(),
                  static_cast<long long>(r.target_tokens), r.skipped.c_str());
      continue;
    }
    std::printf("%-26s %-10s %9lld %12llu %9.2f %12llu %9.2f %10.2f %10.2f %10.2f\n",
                r.model.c_str(), r.kind.c_str(), static_cast<long long>(r.context_tokens),
                static_cast<unsigned long long>(r.write_bytes_per_turn), r.write_ms_per_turn,
                static_cast<unsigned long long>(r.bytes_moved), r.load_ms, r.resume_first_token_ms,
                r.baseline_first_token_ms, r.resident_first_token_ms);
  }
  std::fflush(stdout);
}

}  // namespace flatstate::loadtest
