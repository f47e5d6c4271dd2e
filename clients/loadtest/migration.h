// Migration sweep (docs/loadtest.md, "Migration mode"): moves a session between two replicas that
// share a session store (--session_store=redis://...) and measures what a move costs.
// For each model, one session is created on replica A and grown (growth.h) to each context in
// turn. At each context:
//   1. one extra 1-token Generate on A, with A's GetStats store_write_bytes_total and
//      store_writes_total read around it: the write-through of one turn at that context;
//   2. the move: a 1-token Generate of the session on replica B, timed from send to first token
//      (B loads the session from the store), with B's store_load_bytes_total delta (bytes moved);
//   3. a baseline: the same 1-token Generate on A again. A still holds the session in memory but
//      B advanced it, so A reloads it from the store too: the baseline is "move back", not a
//      resident turn (step 1's first-token time is the resident figure).
// The session is deleted at the end. A context that cannot be reached (softmax KV pool
// RESOURCE_EXHAUSTED, max position) gives a skipped row with the reason, as do the larger ones.
// Checks: linear kinds move the same bytes at every context (within 64 bytes: the checkpoint
// carries the decoder's pending UTF-8 bytes and varint counters), softmax moves more at each
// larger context; any other RPC failure is a FAIL.
//
// Assumes nothing else uses A or B meanwhile (the store counters are server-wide).
// Thread-compatible; uses the clients from one thread. Failures become FAIL lines in `checks`.
#ifndef FLATSTATE_CLIENTS_LOADTEST_MIGRATION_H_
#define FLATSTATE_CLIENTS_LOADTEST_MIGRATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "clients/loadtest/checks.h"
#include "clients/loadtest/client.h"
#include "clients/loadtest/progress.h"

namespace flatstate::loadtest {

struct MigrationOptions {
  std::vector<std::string> models;  // must be loaded on both replicas
  std::vector<int64_t> contexts = {1024, 16384, 65536};  // ascending
  int64_t chunk_tokens = 4096;      // prompt tokens per growth Generate
};

struct MigrationRow {
  std::string model;
  std::string kind;
  int64_t context_tokens = 0;          // session context before step 1 (0 when skipped)
  int64_t target_tokens = 0;           // the requested context
  uint64_t write_bytes_per_turn = 0;   // A: store_write_bytes_total delta over step 1
  uint64_t writes_per_turn = 0;        // A: store_writes_total delta over step 1 (expect 1)
  uint64_t bytes_moved = 0;            // B: store_load_bytes_total delta over step 2
  double write_ms_per_turn = -1;       // A: store_write_seconds_total delta over step 1
  double load_ms = -1;                 // B: store_load_seconds_total delta over step 2
  double resident_first_token_ms = -1;  // step 1 (A holds the current session)
  double resume_first_token_ms = -1;    // step 2 (B loads it)
  double baseline_first_token_ms = -1;  // step 3 (A reloads it)
  std::string skipped;                 // empty: measured; else why not
};

std::vector<MigrationRow> RunMigration(const Client& a, const Client& b,
                                       const MigrationOptions& options, Progress* progress,
                                       CheckList* checks);

// <dir>/migration.csv: one row per (model, context), skipped rows included.
absl::Status WriteMigrationCsv(const std::string& dir, const std::vector<MigrationRow>& rows);
void PrintMigrationTable(const std::vector<MigrationRow>& rows);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_MIGRATION_H_
