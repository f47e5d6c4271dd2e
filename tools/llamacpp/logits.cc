// Dump llama.cpp's logits for a fixed prompt, and its greedy continuation, as JSON.
//
//   g++ -O2 -std=c++17 tools/llamacpp/logits.cc -I LLAMA_CPP_DIR/include
//       -I LLAMA_CPP_DIR/ggml/include -L LLAMA_CPP_DIR/build/bin -lllama
//       -Wl,-rpath,LLAMA_CPP_DIR/build/bin -o logits          (one command line)
//   ./logits MODEL.gguf PROMPT_IDS N_GREEDY OUT.json [THREADS]
//
// PROMPT_IDS is a comma-separated list of token ids (no tokenizer is involved). The prompt is
// decoded as one batch with an output at every position; the greedy tokens then come one
// llama_decode at a time, each the argmax of the previous step's logits (the lowest id wins a
// tie), with no sampler at all. To keep llama.cpp as close to exact as it goes: an F32 K/V
// cache (type_k = type_v = GGML_TYPE_F32), flash attention off, one ubatch for the whole
// prompt, THREADS threads (default 1), CPU only (n_gpu_layers 0).
//
// OUT.json: {"n_vocab": V, "prompt": [ids], "logits": [[V floats] per prompt position],
//            "greedy": [N_GREEDY ids], "greedy_logits": [[V floats] per greedy step: the row
//            its argmax was taken from]}; floats printed with %.9g (float32 round-trips).
//
// Only llama.h's public API is used. Written for flatstate (tools/llamacpp_parity.sh).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void Quiet(enum ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

bool NoProgress(float, void*) { return true; }  // load without printing dots

bool ParseIds(const char* s, std::vector<llama_token>* out) {
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (cur.empty()) return false;
      char* end = nullptr;
      long v = std::strtol(cur.c_str(), &end, 10);
      if (*end != '\0' || v < 0) return false;
      out->push_back(static_cast<llama_token>(v));
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur.push_back(*p);
    }
  }
  return !out->empty();
}

int Argmax(const float* row, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

void WriteRow(FILE* f, const float* row, int n) {
  std::fputc('[', f);
  for (int i = 0; i < n; ++i) std::fprintf(f, i ? ",%.9g" : "%.9g", static_cast<double>(row[i]));
  std::fputc(']', f);
}

void WriteIds(FILE* f, const std::vector<llama_token>& ids) {
  std::fputc('[', f);
  for (size_t i = 0; i < ids.size(); ++i) std::fprintf(f, i ? ",%d" : "%d", ids[i]);
  std::fputc(']', f);
}

// One llama_decode of `tokens` at positions start.., sequence 0; outputs at every token.
bool Decode(llama_context* ctx, const std::vector<llama_token>& tokens, int start) {
  llama_batch b = llama_batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
  b.n_tokens = static_cast<int32_t>(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.token[i] = tokens[i];
    b.pos[i] = start + static_cast<llama_pos>(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  if (rc != 0) std::fprintf(stderr, "llama_decode returned %d\n", rc);
  return rc == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 6) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT_IDS N_GREEDY OUT.json [THREADS]\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> prompt;
  if (!ParseIds(argv[2], &prompt)) {
    std::fprintf(stderr, "bad PROMPT_IDS %s\n", argv[2]);
    return 2;
  }
  const int n_greedy = std::atoi(argv[3]);
  const int threads = argc == 6 ? std::atoi(argv[5]) : 1;
  if (n_greedy < 0 || threads < 1) {
    std::fprintf(stderr, "bad N_GREEDY or THREADS\n");
    return 2;
  }

  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.progress_callback = NoProgress;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (llama_token t : prompt) {
    if (t >= n_vocab) {
      std::fprintf(stderr, "prompt id %d out of range (vocab %d)\n", t, n_vocab);
      return 2;
    }
  }

  const uint32_t n_total = static_cast<uint32_t>(prompt.size() + n_greedy);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_total < 64 ? 64 : n_total;
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }

  FILE* f = std::fopen(argv[4], "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", argv[4]);
    return 1;
  }
  if (!Decode(ctx, prompt, 0)) return 1;
  std::fprintf(f, "{\"n_vocab\":%d,\"prompt\":", n_vocab);
  WriteIds(f, prompt);
  std::fputs(",\n\"logits\":[", f);
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i) std::fputs(",\n", f);
    WriteRow(f, llama_get_logits_ith(ctx, static_cast<int32_t>(i)), n_vocab);
  }
  std::fputs("],\n\"greedy_logits\":[", f);
  std::vector<llama_token> greedy;
  const float* row = llama_get_logits_ith(ctx, -1);
  for (int s = 0; s < n_greedy; ++s) {
    if (s) std::fputs(",\n", f);
    WriteRow(f, row, n_vocab);
    llama_token next = Argmax(row, n_vocab);
    greedy.push_back(next);
    if (s + 1 == n_greedy) break;
    if (!Decode(ctx, {next}, static_cast<int>(prompt.size()) + s)) return 1;
    row = llama_get_logits_ith(ctx, -1);
  }
  std::fputs("],\n\"greedy\":", f);
  WriteIds(f, greedy);
  std::fputs("}\n", f);
  std::fclose(f);

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  std::printf("%s: %zu prompt positions, %d greedy tokens, vocab %d\n", argv[4], prompt.size(),
              n_greedy, n_vocab);
  return 0;
}
