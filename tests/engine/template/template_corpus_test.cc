// Differential check of a directory of templates (e.g. a template_fuzzer corpus copied to /tmp)
// against Python Jinja2: set FLATSTATE_TEMPLATE_CORPUS=<dir>. The first byte of each file picks
// the whitespace options as in tests/fuzz/template_fuzzer.cc. Skipped when the variable is unset.
// Cases where either side hits a limit (C++ step/size limits, the oracle's 5 s timeout) or the
// output is not valid UTF-8 are not compared.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/engine/template/jinja_oracle.h"

namespace flatstate::tmpl {
namespace {

TEST(TemplateCorpusTest, MatchesPythonJinja) {
  const char* dir = std::getenv("FLATSTATE_TEMPLATE_CORPUS");
  if (dir == nullptr) GTEST_SKIP() << "FLATSTATE_TEMPLATE_CORPUS not set";
  REQUIRE_JINJA_ORACLE();
  const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
      {"role": "assistant", "content": "<think>r</think>ok", "reasoning_content": "r",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1.5}}}]},
      {"role": "tool", "content": "{\"x\": null}"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
               "properties": {"a": {"type": "number"}}, "required": ["a"]}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>", "n": 3, "f": -0.5, "none": null})");
  std::vector<testing::OracleCase> cases;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string data = ss.str();
    if (data.empty() || data.size() > 8192) continue;
    unsigned char b = static_cast<unsigned char>(data[0]);
    testing::OracleCase c;
    c.label = path.filename().string();
    c.template_source = data;
    c.context = ctx;
    c.options = {{"trim_blocks", (b & 1) != 0},
                 {"lstrip_blocks", (b & 2) != 0},
                 {"keep_trailing_newline", (b & 4) != 0}};
    // The oracle reads JSON: only valid UTF-8 sources can be sent.
    try {
      (void)nlohmann::json(data).dump();
    } catch (...) {
      continue;
    }
    cases.push_back(std::move(c));
  }
  int ok = 0, err = 0, skipped = 0;
  for (const std::string& f : testing::CompareWithOracle(cases, &ok, &err)) {
    if (f.find("limit of") != std::string::npos || f.find("RenderTimeout") != std::string::npos) {
      ++skipped;
      continue;
    }
    ADD_FAILURE() << f;
  }
  std::cout << "[ info ] " << cases.size() << " templates: " << ok << " identical, " << err
            << " fail in both, " << skipped << " hit a limit\n";
}

}  // namespace
}  // namespace flatstate::tmpl
