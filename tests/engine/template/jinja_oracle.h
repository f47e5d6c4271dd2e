// Test helper: renders template cases with Python Jinja2 set up as transformers sets it up
// (tests/oracles/jinja_render.py), one python process per batch, and compares with ChatTemplate.
//
// Not thread-safe (writes temporary files). Functions return absl::Status on I/O or oracle
// failures; OracleMissingReason says why the oracle cannot run (tests then GTEST_SKIP, or fail
// when FLATSTATE_REQUIRE_ORACLES=1).
#ifndef FLATSTATE_TESTS_ENGINE_TEMPLATE_JINJA_ORACLE_H_
#define FLATSTATE_TESTS_ENGINE_TEMPLATE_JINJA_ORACLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::tmpl::testing {

struct OracleCase {
  std::string label;
  std::string template_source;
  nlohmann::ordered_json context;
  nlohmann::ordered_json options = nlohmann::ordered_json::object();
};

struct OracleResult {
  bool ok = false;
  std::string output;  // the render, or the Python exception text
};

// Empty when python3 with jinja2 is available, else the reason it is not.
std::string OracleMissingReason();
bool OraclesRequired();
absl::StatusOr<std::vector<OracleResult>> RunOracle(const std::vector<OracleCase>& cases);

// Renders every case with ChatTemplate and the oracle and returns one message per mismatch
// (output bytes differ, or exactly one side failed).
std::vector<std::string> CompareWithOracle(const std::vector<OracleCase>& cases,
                                           int* compared_ok = nullptr,
                                           int* compared_error = nullptr);

}  // namespace flatstate::tmpl::testing

// Skips (or fails, under FLATSTATE_REQUIRE_ORACLES=1) the current test without an oracle.
#define REQUIRE_JINJA_ORACLE()                                              \
  do {                                                                      \
    std::string reason = ::flatstate::tmpl::testing::OracleMissingReason(); \
    if (!reason.empty()) {                                                  \
      if (::flatstate::tmpl::testing::OraclesRequired()) FAIL() << reason;  \
      GTEST_SKIP() << reason;                                               \
    }                                                                       \
  } while (0)

#endif  // FLATSTATE_TESTS_ENGINE_TEMPLATE_JINJA_ORACLE_H_
