// Argument checking for filters: Python raises TypeError on extra positional arguments and
// unknown keywords, so do the same.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/template/builtins.h"

namespace flatstate::tmpl {
namespace {

absl::Status Err(std::string_view msg) { return absl::InvalidArgumentError(std::string(msg)); }

// Python signatures: how many positional arguments (after the value) and which keywords.
struct Signature {
  size_t max_positional;
  std::vector<std::string_view> keywords;
};

const Signature* FilterSignature(std::string_view f) {
  static const auto* sigs = new std::vector<std::pair<std::string_view, Signature>>{
      {"tojson", {4, {"ensure_ascii", "indent", "separators", "sort_keys"}}},
      {"trim", {1, {"chars"}}},
      {"length", {0, {}}},
      {"count", {0, {}}},
      {"string", {0, {}}},
      {"safe", {0, {}}},
      {"upper", {0, {}}},
      {"lower", {0, {}}},
      {"title", {0, {}}},
      {"capitalize", {0, {}}},
      {"default", {2, {"default_value", "boolean"}}},
      {"d", {2, {"default_value", "boolean"}}},
      {"items", {0, {}}},
      {"join", {2, {"d", "attribute"}}},
      {"first", {0, {}}},
      {"last", {0, {}}},
      {"list", {0, {}}},
      {"reverse", {0, {}}},
      {"sort", {3, {"reverse", "case_sensitive", "attribute"}}},
      {"unique", {2, {"case_sensitive", "attribute"}}},
      {"dictsort", {3, {"case_sensitive", "by", "reverse"}}},
      {"replace", {3, {"old", "new", "count"}}},
      {"int", {2, {"default", "base"}}},
      {"float", {1, {"default"}}},
      {"round", {2, {"precision", "method"}}},
      {"abs", {0, {}}},
      {"indent", {3, {"width", "first", "blank"}}},
      {"escape", {0, {}}},
      {"e", {0, {}}},
      {"sum", {2, {"attribute", "start"}}},
      {"attr", {1, {"name"}}}};
  for (const auto& [name, sig] : *sigs) {
    if (name == f) return &sig;
  }
  return nullptr;
}

}  // namespace

absl::Status CheckFilterArgs(std::string_view f, const CallArgs& a) {
  const Signature* sig = FilterSignature(f);
  if (sig == nullptr) return absl::OkStatus();
  if (a.positional.size() > sig->max_positional) {
    return Err(absl::StrCat(std::string(f), "() takes at most ", sig->max_positional + 1,
                            " positional arguments"));
  }
  for (const auto& [k, unused] : a.keyword) {
    if (std::find(sig->keywords.begin(), sig->keywords.end(), k) == sig->keywords.end()) {
      return Err(absl::StrCat(std::string(f), "() got an unexpected keyword argument '", k, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace flatstate::tmpl
