#include "clients/loadtest/report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flatstate::loadtest {

absl::Status EnsureDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::Status WriteMemoryCsv(const std::string& dir, const std::vector<MemoryModelResult>& results) {
  std::string csv =
      "model,attention_kind,context_tokens,sessions,state_bytes,state_bytes_total,"
      "kv_blocks_used,kv_bytes,expected_kv_bytes,rss_bytes,prefill_tokens_per_s,"
      "decode_tokens_per_s,ttft_ms,itl_p50_ms,itl_p99_ms,exhausted_at_tokens,device_memory_bytes,"
      "device_state_bytes,checkpoint_bytes\n";
  for (const MemoryModelResult& r : results) {
    for (const MemoryPoint& p : r.points) {
      absl::StrAppend(
          &csv,
          absl::StrFormat("%s,%s,%d,%d,%d,%d,%d,%d,%d,%d,%.1f,%.2f,%.3f,%.3f,"
                          "%.3f,%d,%d,%d,%d\n",
                          p.model, p.kind, p.context_tokens, p.sessions, p.state_bytes,
                          p.state_bytes_total, p.kv_blocks_used, p.kv_bytes, p.expected_kv_bytes,
                          p.rss_bytes, p.prefill_tokens_per_s, p.decode_tokens_per_s, p.ttft_ms,
                          p.itl_p50_ms, p.itl_p99_ms, r.exhausted ? r.exhausted_at_tokens : 0,
                          p.device_memory_bytes, p.device_state_bytes, p.checkpoint_bytes));
    }
  }
  return WriteFile(dir + "/memory.csv", csv);
}

absl::Status WriteConcurrencyCsv(const std::string& dir, const std::vector<ConcurrencyRow>& rows) {
  std::string csv =
      "model,concurrency,requests,ok,errors,tokens,wall_s,tokens_per_s,ttft_p50_ms,ttft_p99_ms,"
      "itl_p50_ms,itl_p99_ms,rss_bytes,errors_by_code\n";
  for (const ConcurrencyRow& r : rows) {
    absl::StrAppend(&csv, absl::StrFormat("%s,%d,%d,%d,%d,%d,%.3f,%.2f,%.3f,%.3f,%.3f,%.3f,%d,%s\n",
                                          r.model, r.concurrency, r.requests, r.ok,
                                          r.error_count(), r.tokens, r.wall_s, r.tokens_per_s,
                                          r.ttft_p50_ms, r.ttft_p99_ms, r.itl_p50_ms,
                                          r.itl_p99_ms, r.rss_bytes, r.ErrorsString()));
  }
  return WriteFile(dir + "/concurrency.csv", csv);
}

void PrintMemoryTable(const std::vector<MemoryModelResult>& results) {
  std::printf("%-28s %-10s %9s %12s %12s %10s %10s %10s %9s %9s\n", "model", "kind", "context",
              "state_B", "kv_B", "rss_MiB", "gpu_MiB", "decode/s", "itl_p50", "itl_p99");
  for (const MemoryModelResult& r : results) {
    for (const MemoryPoint& p : r.points) {
      std::printf("%-28s %-10s %9lld %12llu %12llu %10.1f %10.1f %10.1f %7.2fms %7.2fms\n",
                  p.model.c_str(), p.kind.c_str(), static_cast<long long>(p.context_tokens),
                  static_cast<unsigned long long>(p.state_bytes),
                  static_cast<unsigned long long>(p.kv_bytes), p.rss_bytes / 1048576.0,
                  p.device_memory_bytes / 1048576.0, p.decode_tokens_per_s, p.itl_p50_ms,
                  p.itl_p99_ms);
    }
  }
  std::fflush(stdout);
}

void PrintConcurrencyTable(const std::vector<ConcurrencyRow>& rows) {
  std::printf("%-28s %5s %8s %10s %10s %10s %9s %9s %s\n", "model", "conc", "ok/req",
              "tokens/s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "errors");
  for (const ConcurrencyRow& r : rows) {
    std::printf("%-28s %5d %4d/%-3d %10.1f %8.1fms %8.1fms %7.2fms %7.2fms %s\n",
                r.model.c_str(), r.concurrency, r.ok, r.requests, r.tokens_per_s, r.ttft_p50_ms,
                r.ttft_p99_ms, r.itl_p50_ms, r.itl_p99_ms, r.ErrorsString().c_str());
  }
  std::fflush(stdout);
}

}  // namespace flatstate::loadtest
