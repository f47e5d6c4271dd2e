// ChatTemplate API behaviour that needs no oracle: error messages (template name and line),
// render limits (steps, output bytes, recursion, parse depth) and concurrent rendering.
#include "engine/template/chat_template.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate::tmpl {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::StatusOr<std::string> Render(const std::string& src, const nlohmann::ordered_json& ctx = {},
                                   const RenderLimits& limits = {}) {
  auto t = ChatTemplate::Parse("t", src);
  if (!t.ok()) return t.status();
  return (*t)->Render(ctx.is_null() ? nlohmann::ordered_json::object() : ctx, limits);
}

TEST(ChatTemplateTest, SyntaxErrorNamesTemplateAndLine) {
  auto t = ChatTemplate::Parse("qwen3", "line one\n{{ x }}\n{% if %}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().ToString(), HasSubstr("chat template \"qwen3\" line 3: "));
}

TEST(ChatTemplateTest, UnclosedBlockAndUnknownTagFail) {
  EXPECT_THAT(Render("{% for x in y %}").status().ToString(), HasSubstr("endfor"));
  EXPECT_THAT(Render("\n{% include 'x' %}").status().ToString(),
              HasSubstr("chat template \"t\" line 2: unknown tag 'include'"));
}

TEST(ChatTemplateTest, RaiseExceptionNamesLine) {
  auto r = Render(
      "a\n{% if messages[0].role != 'system' %}\n{{ raise_exception('bad role') }}\n"
      "{% endif %}",
      {{"messages", {{{"role", "user"}}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().ToString(),
            "INVALID_ARGUMENT: chat template \"t\" line 3: raise_exception: bad role");
}

TEST(ChatTemplateTest, RuntimeErrorsNameLine) {
  EXPECT_THAT(Render("\n\n{{ x|nosuchfilter }}").status().ToString(),
              HasSubstr("chat template \"t\" line 3: no filter named"));
  EXPECT_THAT(Render("\n{{ x.strip() }}").status().ToString(),
              HasSubstr("chat template \"t\" line 2: "));
  EXPECT_THAT(Render("{{ 1 + 'a' }}").status().ToString(), HasSubstr("unsupported operand"));
}

TEST(ChatTemplateTest, StepLimitStopsLongLoops) {
  RenderLimits limits;
  limits.max_steps = 10'000;
  auto r = Render("{% for a in range(1000) %}{% for b in range(1000) %}x{% endfor %}{% endfor %}",
                  {}, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().ToString(), HasSubstr("step limit"));
  EXPECT_FALSE(Render("{{ range(100000000000)|length }}", {}, limits).ok());
}

TEST(ChatTemplateTest, OutputLimitStopsGrowth) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  EXPECT_THAT(
      Render("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}", {}, limits).status().ToString(),
      HasSubstr("output limit"));
  EXPECT_FALSE(Render("{{ 'x' * 100000 }}", {}, limits).ok());
  EXPECT_FALSE(Render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                      {}, limits)
                   .ok());
  EXPECT_TRUE(Render("{{ 'x' * 1000 }}", {}, limits).ok());
}

TEST(ChatTemplateTest, RecursionAndNestingAreBounded) {
  auto r = Render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().ToString(), HasSubstr("recursion limit"));
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::Parse("deep", deep).ok());
  std::string deep_ifs;
  for (int i = 0; i < 1000; ++i) deep_ifs += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::Parse("deep", deep_ifs).ok());
}

TEST(ChatTemplateTest, ContextMustBeAnObjectAndPlainJsonWorks) {
  auto t = ChatTemplate::Parse("t", "{{ a }}{{ b|tojson }}");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)->Render(nlohmann::ordered_json::array()).ok());
  nlohmann::json plain = {{"a", 1}, {"b", {{"z", 1}, {"y", 2}}}};
  EXPECT_EQ(*(*t)->Render(plain), "1{\"y\": 2, \"z\": 1}");  // nlohmann::json sorts keys
  nlohmann::ordered_json ordered = {{"a", 1}, {"b", {{"z", 1}, {"y", 2}}}};
  EXPECT_EQ(*(*t)->Render(ordered), "1{\"z\": 1, \"y\": 2}");
}

// A namespace holding itself is a reference cycle; the render must free it (checked under
// LeakSanitizer, scripts/sanitize.sh and the fuzzer, which found it).
TEST(ChatTemplateTest, NamespaceCyclesAreReleased) {
  auto r = Render(
      "{% set ns = namespace(n=0) %}{% set ns.n = ns, 1 %}{% for x in [ns] %}"
      "{% set ns.l = loop %}{% endfor %}{{ ns.n[1] }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "1");
}

TEST(ChatTemplateTest, ConcurrentRendersShareOneTemplate) {
  auto t = ChatTemplate::Parse(
      "t",
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "<{{ m.role }}>{{ m.content }}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  nlohmann::ordered_json ctx = {
      {"messages",
       {{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}}}}};
  const std::string want = "<user>a<assistant>b2";
  std::vector<std::thread> threads;
  std::vector<int> good(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 500; ++k) {
        auto r = (*t)->Render(ctx);
        good[i] += r.ok() && *r == want;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int g : good) EXPECT_EQ(g, 500);
}

}  // namespace
}  // namespace flatstate::tmpl
