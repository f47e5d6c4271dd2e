#include "tests/engine/template/jinja_oracle.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/template/chat_template.h"

namespace flatstate::tmpl::testing {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

std::string TempPath(const std::string& suffix) {
  const char* dir = std::getenv("TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/flatstate_jinja_", getpid(), "_", suffix);
}

}  // namespace

bool OraclesRequired() {
  const char* v = std::getenv("FLATSTATE_REQUIRE_ORACLES");
  return v != nullptr && std::string(v) == "1";
}

std::string OracleMissingReason() {
  static const std::string reason = [] {
    if (access(kPython, X_OK) != 0) return std::string("/usr/bin/python3 not found");
    std::string cmd = absl::StrCat(kPython, " -c 'import jinja2' >/dev/null 2>&1");
    if (std::system(cmd.c_str()) != 0) {
      return std::string("python3 jinja2 missing (apt-get install python3-jinja2)");
    }
    return std::string();
  }();
  return reason;
}

absl::StatusOr<std::vector<OracleResult>> RunOracle(const std::vector<OracleCase>& cases) {
  nlohmann::ordered_json in;
  in["cases"] = nlohmann::ordered_json::array();
  for (const OracleCase& c : cases) {
    in["cases"].push_back(
        {{"template", c.template_source}, {"context", c.context}, {"options", c.options}});
  }
  const std::string in_path = TempPath("in.json"), out_path = TempPath("out.json");
  {
    std::ofstream f(in_path, std::ios::binary);
    f << in.dump();
    if (!f) return absl::InternalError("cannot write " + in_path);
  }
  std::string cmd = absl::StrCat(kPython, " ", FLATSTATE_SOURCE_DIR,
                                 "/tests/oracles/jinja_render.py ", in_path, " ", out_path);
  int rc = std::system(cmd.c_str());
  std::remove(in_path.c_str());
  if (rc != 0) return absl::InternalError(absl::StrCat("oracle failed: ", cmd));
  std::ifstream f(out_path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(out_path.c_str());
  nlohmann::json out = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!out.is_array() || out.size() != cases.size()) {
    return absl::InternalError("oracle output malformed");
  }
  std::vector<OracleResult> results;
  for (const auto& r : out) {
    OracleResult res;
    res.ok = r.at("ok").get<bool>();
    res.output = res.ok ? r.at("output").get<std::string>() : r.at("error").get<std::string>();
    results.push_back(std::move(res));
  }
  return results;
}

std::vector<std::string> CompareWithOracle(const std::vector<OracleCase>& cases, int* compared_ok,
                                           int* compared_error) {
  std::vector<std::string> failures;
  auto expected = RunOracle(cases);
  if (!expected.ok()) return {std::string(expected.status().message())};
  for (size_t i = 0; i < cases.size(); ++i) {
    const OracleCase& c = cases[i];
    TemplateOptions options;
    options.trim_blocks = c.options.value("trim_blocks", true);
    options.lstrip_blocks = c.options.value("lstrip_blocks", true);
    options.keep_trailing_newline = c.options.value("keep_trailing_newline", false);
    auto t = ChatTemplate::Parse(c.label, c.template_source, options);
    absl::StatusOr<std::string> got =
        t.ok() ? (*t)->Render(c.context) : absl::StatusOr<std::string>(t.status());
    const OracleResult& want = (*expected)[i];
    if (want.ok && got.ok() && *got == want.output) {
      if (compared_ok) ++*compared_ok;
      continue;
    }
    if (!want.ok && !got.ok()) {
      if (compared_error) ++*compared_error;
      continue;
    }
    failures.push_back(absl::StrCat(
        "case ", c.label, "\n  template: ", c.template_source.substr(0, 300),
        "\n  python: ", want.ok ? "" : "ERROR ",
        nlohmann::json(want.output).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
        "\n  c++:    ",
        got.ok()
            ? nlohmann::json(*got).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
            : "ERROR " + std::string(got.status().message())));
  }
  return failures;
}

}  // namespace flatstate::tmpl::testing
