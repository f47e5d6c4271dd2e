// Writes the sweeps' results as CSV files and prints short tables on stdout.
// Stateless functions; thread-compatible. Failures (unwritable directory or file) are returned as
// absl statuses naming the path.
#ifndef FLATSTATE_CLIENTS_LOADTEST_REPORT_H_
#define FLATSTATE_CLIENTS_LOADTEST_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "clients/loadtest/concurrency_sweep.h"
#include "clients/loadtest/memory_sweep.h"

namespace flatstate::loadtest {

// Creates `dir` (and parents) if missing.
absl::Status EnsureDir(const std::string& dir);
// Writes `text` to `path` (truncating).
absl::Status WriteFile(const std::string& path, const std::string& text);

// <dir>/memory.csv: one row per measured point (header first).
absl::Status WriteMemoryCsv(const std::string& dir, const std::vector<MemoryModelResult>& results);
// <dir>/concurrency.csv: one row per (model, level).
absl::Status WriteConcurrencyCsv(const std::string& dir, const std::vector<ConcurrencyRow>& rows);

void PrintMemoryTable(const std::vector<MemoryModelResult>& results);
void PrintConcurrencyTable(const std::vector<ConcurrencyRow>& rows);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_REPORT_H_
