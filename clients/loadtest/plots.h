// PNG plots of the sweeps through gnuplot: writes a gnuplot script (data inline) next to each
// PNG in `dir` and runs `gnuplot <script>` (found on PATH; pngcairo terminal, as in Debian's
// gnuplot-nox). Stateless; thread-compatible. Returns the paths written, or an error naming the
// script whose gnuplot run failed (gnuplot missing, non-zero exit).
//
//   memory_vs_context.png      per-session memory (state_bytes) vs context, every model
//   rss_vs_context.png         server RSS vs context, every model
//   decode_tps_vs_context.png  decode tokens/s vs context
//   itl_vs_context.png         inter-token latency p50/p99 vs context
//   concurrency_tps.png        aggregate tokens/s vs concurrency
//   concurrency_latency.png    TTFT and inter-token latency p50/p99 vs concurrency
//   migration_bytes.png        bytes moved per migration and write-through bytes per turn vs
//                              context (log y)
//   migration_latency.png      first token after the move (resume), back on A, resident
//   multiturn_ttft.png         multi-turn chat: mean time to first token vs turn number
//   multiturn_prefill.png      multi-turn chat: prompt tokens prefilled vs turn number
#ifndef FLATSTATE_CLIENTS_LOADTEST_PLOTS_H_
#define FLATSTATE_CLIENTS_LOADTEST_PLOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/loadtest/concurrency_sweep.h"
#include "clients/loadtest/memory_sweep.h"
#include "clients/loadtest/migration.h"
#include "clients/loadtest/multiturn.h"

namespace flatstate::loadtest {

absl::StatusOr<std::vector<std::string>> PlotMemory(const std::string& dir,
                                                    const std::vector<MemoryModelResult>& results);
absl::StatusOr<std::vector<std::string>> PlotConcurrency(const std::string& dir,
                                                         const std::vector<ConcurrencyRow>& rows);
absl::StatusOr<std::vector<std::string>> PlotMultiturn(const std::string& dir,
                                                       const std::vector<MultiturnRow>& rows);
absl::StatusOr<std::vector<std::string>> PlotMigration(const std::string& dir,
                                                       const std::vector<MigrationRow>& rows);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_PLOTS_H_
