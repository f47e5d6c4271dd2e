// flatstate-dtype-accuracy: what quantising the weights at load (EngineOptions::weight_dtype)
// costs in accuracy, per model and type, against the same engine with f32 weights.
//
//   build/bench/flatstate-dtype-accuracy MODELS_DIR DATA_FILE [MAX_WINDOWS]
//   e.g. build/bench/flatstate-dtype-accuracy models ../shared/data/tinyshakespeare/input.txt
//
// For every model folder under MODELS_DIR and every type (f32, bf16, int8, int4), one markdown
// table row: the validation loss in nats/byte over non-overlapping 128-byte windows of the last
// 10 % of DATA_FILE (docs/models.md's split and windows), its difference from f32, the logits of
// every validation position against f32's (relative L2 error and largest absolute difference),
// argmax agreement with f32 over those positions (teacher-forced), and how many of 500 greedy
// tokens generated from "ROMEO:\n" equal f32's before the first difference. One thread.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"

namespace flatstate {
namespace {

constexpr int kWindow = 128;
constexpr int kVocab = 256;
constexpr size_t kGreedy = 500;

struct Result {
  double nll = 0, err2 = 0, ref2 = 0, max_abs = 0;
  int64_t positions = 0, argmax_agree = 0;
  std::vector<float> logits;  // f32 only: every position's logits, the reference
  std::vector<int32_t> greedy;
};

int Run(const std::string& models_dir, const std::string& data, int max_windows) {
  std::ifstream in(data, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", data.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string val = text.substr(text.size() * 9 / 10);
  std::vector<std::string> models;
  for (const auto& e : std::filesystem::directory_iterator(models_dir)) {
    if (std::filesystem::exists(e.path() / "config.json")) models.push_back(e.path().string());
  }
  std::sort(models.begin(), models.end());
  std::printf(
      "| model | type | val loss (nats/byte) | vs f32 | logit rel. error | max abs. logit "
      "error | argmax = f32 | greedy tokens = f32 (of 500) |\n|---|---|---|---|---|---|---"
      "|---|\n");
  for (const std::string& dir : models) {
    Result ref;
    for (WeightDtype dtype :
         {WeightDtype::kF32, WeightDtype::kBf16, WeightDtype::kInt8, WeightDtype::kInt4}) {
      auto model = Model::Load(dir);
      if (!model.ok()) {
        std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
        return 1;
      }
      EngineOptions o;
      o.threads = 1;
      o.kv_blocks = 64;
      o.weight_dtype = dtype;
      auto engine = Engine::Create(std::move(*model), o);
      if (!engine.ok()) {
        std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
        return 1;
      }
      Engine& e = **engine;
      Result r;
      for (size_t off = 0, w = 0; off + kWindow <= val.size() && static_cast<int>(w) < max_windows;
           off += kWindow, ++w) {
        std::vector<int32_t> t(kWindow);
        for (int i = 0; i < kWindow; ++i) t[i] = static_cast<uint8_t>(val[off + i]);
        SessionState s = e.NewSession({});
        auto logits = e.Score(&s, t);
        e.ReleaseSession(&s);
        if (!logits.ok()) {
          std::fprintf(stderr, "%s\n", std::string(logits.status().message()).c_str());
          return 1;
        }
        for (int i = 0; i + 1 < kWindow; ++i) {
          const float* l = logits->data() + static_cast<size_t>(i) * kVocab;
          const float mx = *std::max_element(l, l + kVocab);
          double z = 0;
          for (int j = 0; j < kVocab; ++j) z += std::exp(static_cast<double>(l[j] - mx));
          r.nll += std::log(z) + mx - l[t[i + 1]];
          const size_t at = static_cast<size_t>(r.positions) * kVocab;
          if (dtype == WeightDtype::kF32) {
            r.logits.insert(r.logits.end(), l, l + kVocab);
          } else {
            const float* f = ref.logits.data() + at;
            for (int j = 0; j < kVocab; ++j) {
              const double d = static_cast<double>(l[j]) - f[j];
              r.err2 += d * d;
              r.ref2 += static_cast<double>(f[j]) * f[j];
              r.max_abs = std::max(r.max_abs, std::abs(d));
            }
            r.argmax_agree +=
                std::max_element(l, l + kVocab) - l == std::max_element(f, f + kVocab) - f;
          }
          ++r.positions;
        }
      }
      SessionState s = e.NewSession(SamplingParams{0.f, 0, 1.f, 0});
      const std::string prompt = "ROMEO:\n";
      if (!e.Append(&s, std::vector<int32_t>(prompt.begin(), prompt.end())).ok()) return 1;
      std::vector<StepResult> res;
      while (r.greedy.size() < kGreedy) {
        const StepRequest req{&s, 1 << 30, true};
        if (!e.Step(std::span<const StepRequest>(&req, 1), &res).ok()) return 1;
        if (res[0].sampled) r.greedy.push_back(res[0].token);
      }
      e.ReleaseSession(&s);
      const double loss = r.nll / static_cast<double>(r.positions);
      if (dtype == WeightDtype::kF32) {
        r.argmax_agree = r.positions;
        ref = std::move(r);
        std::printf("| %s | f32 | %.4f | | | | | |\n",
                    std::filesystem::path(dir).filename().c_str(), loss);
        continue;
      }
      size_t same = 0;
      while (same < kGreedy && r.greedy[same] == ref.greedy[same]) ++same;
      std::printf("| %s | %s | %.4f | %+.4f | %.4f | %.3f | %.2f %% | %zu |\n",
                  std::filesystem::path(dir).filename().c_str(), WeightDtypeName(dtype), loss,
                  loss - ref.nll / static_cast<double>(ref.positions), std::sqrt(r.err2 / r.ref2),
                  r.max_abs, 100.0 * r.argmax_agree / r.positions, same);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace flatstate

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODELS_DIR DATA_FILE [MAX_WINDOWS]\n", argv[0]);
    return 2;
  }
  return flatstate::Run(argv[1], argv[2], argc > 3 ? std::atoi(argv[3]) : 1 << 30);
}
