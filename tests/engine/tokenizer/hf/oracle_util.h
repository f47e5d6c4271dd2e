// Test helpers for the Hugging Face tokenizer tests: where the Node oracle
// (tests/oracles/hf_encode.js + node_modules) and the shared corpora are, and running the oracle.
// Owns nothing; not thread-safe (writes temporary files); failures are returned as strings.
#ifndef FLATSTATE_TESTS_ENGINE_TOKENIZER_HF_ORACLE_UTIL_H_
#define FLATSTATE_TESTS_ENGINE_TOKENIZER_HF_ORACLE_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace flatstate::testing {

inline std::string SourceDir() { return FLATSTATE_SOURCE_DIR; }

inline std::string OracleModules() { return SourceDir() + "/tests/oracles/node_modules"; }

// "" when the oracle can run, else why not.
inline std::string OracleMissing() {
  if (std::system("command -v node >/dev/null 2>&1") != 0) return "node is not on PATH";
  if (!std::filesystem::exists(OracleModules() + "/tokenizers")) {
    return OracleModules() + "/tokenizers is missing (cd tests/oracles && npm ci)";
  }
  return "";
}

inline bool OraclesRequired() {
  const char* v = std::getenv("FLATSTATE_REQUIRE_ORACLES");
  return v != nullptr && std::string(v) == "1";
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs hf_encode.js on `tokenizer_json` with `input`; fills *output or returns an error.
inline std::string RunOracle(const std::string& tokenizer_json, const nlohmann::json& input,
                             nlohmann::json* output) {
  char tmpl[] = "/tmp/flatstate_hf_oracle_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return "mkdtemp failed";
  const std::string dir = tmpl;
  const std::string in = dir + "/in.json", out = dir + "/out.json", err = dir + "/err.txt";
  std::ofstream(in, std::ios::binary) << input.dump();
  const std::string cmd = "node '" + SourceDir() + "/tests/oracles/hf_encode.js' '" +
                          tokenizer_json + "' '" + in + "' '" + out + "' 2>'" + err + "'";
  const int rc = std::system(cmd.c_str());
  std::string result;
  if (rc != 0) {
    result = "oracle failed (" + cmd + "): " + ReadAll(err);
  } else {
    *output = nlohmann::json::parse(ReadAll(out), nullptr, false);
    if (output->is_discarded()) result = "oracle output is not JSON";
  }
  std::filesystem::remove_all(dir);
  return result;
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_ENGINE_TOKENIZER_HF_ORACLE_UTIL_H_
