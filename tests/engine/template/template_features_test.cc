// Feature tests of ChatTemplate: each tiny template is rendered by Python Jinja2 (configured as
// transformers configures it) in one batch and the C++ output must match byte for byte, or both
// must fail.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/template/jinja_oracle.h"

namespace flatstate::tmpl {
namespace {

struct FeatureCase {
  const char* group;
  const char* source;
  const char* context;  // JSON object
};

const char kCtx[] = R"({"s": "Hello World", "n": 7, "f": 2.5, "t": true, "z": null,
  "l": [3, 1, 2], "e": [], "d": {"b": 2, "a": 1, "c": {"x": [1, "two", 3.0]}},
  "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
           {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"q": "é\n\"x\""}}}]},
           {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}],
  "u": "naïve ünïcode ✓", "ws": "  \t pad \n "})";

// clang-format off
const FeatureCase kCases[] = {
  // Literals and printing (Python str() of every type).
  {"print", "{{ 1 }}|{{ -3 }}|{{ 1.0 }}|{{ 1.5e-5 }}|{{ 1e16 }}|{{ 0.1 + 0.2 }}|{{ 10 / 4 }}|{{ 3.0 * 2 }}", "{}"},
  {"print", "{{ true }}{{ false }}{{ none }}{{ True }}{{ None }}|{{ undefined_var }}|", "{}"},
  {"print", "{{ [1, 'a', \"b'c\", none, true, 1.0] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}", "{}"},
  {"print", "{{ d }}|{{ l }}|{{ msgs[2] }}|{{ z }}|{{ e }}", kCtx},
  {"print", "{{ 'a\\nb\\t\\'q\\' \\\\ \\x41\\u00e9' }}|{{ \"dq\\\"\" }}|{{ 'adj' 'acent' }}", "{}"},
  {"print", "{{ 12345678901234567 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7.5 // 2 }}|{{ 1_000 }}", "{}"},
  {"print", "{{ 1e300 * 1e10 }}|{{ 123456789.123 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 1/3 }}|{{ 2.0 ** 60 }}", "{}"},
  // Whitespace control.
  {"ws", "a\n  {% if t %}\n    x\n  {% endif %}\nb\n", kCtx},
  {"ws", "a  {%- if t -%}  x  {%- endif -%}  b", kCtx},
  {"ws", "a\n  {%+ if t %}x{% endif +%}\nb  {{- s -}}  c {{ s }}\n\n", kCtx},
  {"ws", "{# comment #}\n  {# c2 -#}  x\n{#- c3 #}y", kCtx},
  {"ws", "{% raw %}{{ not evaluated }}{% endraw %}\n  {% raw -%}  a {%- endraw %}", kCtx},
  {"ws", "line1\r\nline2\r\n{% if t %}\r\nyes\r\n{% endif %}\r\n", kCtx},
  {"ws_opts", "a\n  {% if t %}\n    x\n  {% endif %}\nb\n", kCtx},
  // if / elif / else, and/or/not, comparisons.
  {"if", "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}", kCtx},
  {"if", "{% if z %}a{% elif e %}b{% elif not l %}c{% else %}d{% endif %}", kCtx},
  {"if", "{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ [1,2] == [1,2] }}{{ 'x' != 'x' }}{{ none == none }}", "{}"},
  {"if", "{{ n and s }}|{{ z or 'dflt' }}|{{ e or l }}|{{ not z }}|{{ 0 or '' }}|{{ t and n > 3 }}", kCtx},
  {"if", "{{ 'ell' in s }}{{ 3 in l }}{{ 'a' in d }}{{ 'q' not in d }}{{ 9 not in l }}{{ 'x' in undefined_x }}", kCtx},
  {"if", "{{ 'yes' if t else 'no' }}|{{ 'yes' if z }}|{{ 'a' if z else 'b' if n else 'c' }}", kCtx},
  // for loops.
  {"for", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}:{{ x }} {% endfor %}", kCtx},
  {"for", "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{{ loop.cycle('odd', 'even') }} {% endfor %}", kCtx},
  {"for", "{% for x in e %}x{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ x }}{{ loop.index }}/{{ loop.length }} {% endfor %}", kCtx},
  {"for", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'abc' %}{{ c }}.{% endfor %}", kCtx},
  {"for", "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", kCtx},
  {"for", "{% for a in [1,2] %}{% for b in [3,4] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}", kCtx},
  {"for", "{% for (a, b) in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% for m in msgs[::-1] %}{{ m.role }} {% endfor %}", kCtx},
  {"for", "{% for x in z %}{% endfor %}", kCtx},
  // Scoping: set in loops does not leak; namespace does.
  {"set", "{% set x = 5 %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}", kCtx},
  {"set", "{% set ns = namespace(c=0, s='') %}{% for i in l %}{% set ns.c = ns.c + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.c }}|{{ ns.s }}|{{ ns.missing }}", kCtx},
  {"set", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}{% if t %}{% set inner = 'leak' %}{% endif %}{{ inner }}", kCtx},
  {"set", "{% set block %}  text {{ n }}\n{% endset %}[{{ block }}]{% set b2 | upper %}abc{% endset %}{{ b2 }}", kCtx},
  {"set", "{% set ns = namespace(d={'a': 1}) %}{{ ns.d.a }}{% set x = namespace() %}{% set x.y = 'z' %}{{ x.y }}", kCtx},
  // Macros and call blocks.
  {"macro", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('A') }} {{ greet('B', 'Hi') }} {{ greet(greeting='Yo', name='C') }}", kCtx},
  {"macro", "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}", kCtx},
  {"macro", "{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}inside {{ n }}{% endcall %}", kCtx},
  {"macro", "{% macro m(x) %}{{ x }}{{ s }}{% endmacro %}{% set s = 'late' %}{{ m(1) }}", kCtx},
  {"macro", "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1, 2) }}", kCtx},
  {"filterblock", "{% filter upper %}abc {{ s }}{% endfilter %}|{% generation %}gen {{ n }}{% endgeneration %}", kCtx},
  // Attribute and item access, undefined behaviour.
  {"access", "{{ d.a }}{{ d['b'] }}{{ d.c.x[1] }}{{ d.c.x[-1] }}{{ l[5] }}|{{ d.nope }}|{{ d.nope is defined }}|{{ msgs[0]['role'] }}{{ msgs.0.role }}", kCtx},
  {"access", "{{ s[0] }}{{ s[-1] }}{{ s[1:4] }}{{ s[::-1] }}{{ s[::2] }}{{ l[1:] }}{{ l[:-1] }}{{ l[::-1] }}{{ u[1:4] }}{{ u[::-1] }}", kCtx},
  {"access", "{{ d.nope.deeper }}", kCtx},
  {"access", "{{ nope.attr }}", kCtx},
  {"access", "{{ nope() }}", kCtx},
  {"access", "{{ nope['x'] }}", kCtx},
  {"access", "{{ z.attr }}|{{ z['k'] }}|{{ n.attr }}", kCtx},
  {"access", "{{ d.nope.strip() }}", kCtx},
  {"access", "{{ d.items()|length }}{{ (d.items)()|length }}", kCtx},
  // Operators and errors.
  {"ops", "{{ 'a' ~ 1 ~ none ~ undefined_v ~ 2.0 }}|{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ [1] + [2] }}|{{ 'x' + 'y' }}|{{ 3 - 1.5 }}", kCtx},
  {"ops", "{{ 'a' + 1 }}", kCtx},
  {"ops", "{{ 1 / 0 }}", kCtx},
  {"ops", "{{ undefined_v + 1 }}", kCtx},
  {"ops", "{{ -n|abs }}|{{ (-n)|abs }}|{{ -2 ** 2 }}|{{ 2 ** 3 ** 2 }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ 'a' ~ 1 + 2 }}", kCtx},
  {"ops", "{{ 1 < 'a' }}", kCtx},
  {"ops", "{{ raise_exception('bad role') }}", kCtx},
  {"ops", "{% if n > 3 %}{{ raise_exception('n is ' ~ n) }}{% endif %}", kCtx},
  // Filters.
  {"filters", "{{ ws|trim }}|{{ ws.strip() }}|{{ '--x--'.strip('-') }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ '..a..'|trim('.') }}", kCtx},
  {"filters", "{{ l|length }}{{ s|length }}{{ u|length }}{{ d|length }}{{ d|count }}{{ undefined_v|length }}", kCtx},
  {"filters", "{{ s|upper }}|{{ s|lower }}|{{ 'hello wORLD-x(y'|title }}|{{ 'hELLO'|capitalize }}|{{ \"it's\"|title }}", kCtx},
  {"filters", "{{ l|join(', ') }}|{{ msgs|map(attribute='role')|join('/') }}|{{ ['a','b']|map('upper')|list }}|{{ l|first }}{{ l|last }}{{ e|first }}", kCtx},
  {"filters", "{{ undefined_v|default('dflt') }}|{{ ''|default('x') }}|{{ ''|default('x', true) }}|{{ z|d('nn') }}|{{ z|default('nn', boolean=true) }}", kCtx},
  {"filters", "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}|{{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='role')|list }}|{{ l|select('odd')|list }}|{{ l|reject('even')|list }}|{{ [0, 1, '', 'a']|select|list }}", kCtx},
  {"filters", "{{ msgs|selectattr('tool_calls', 'defined')|list|length }}|{{ msgs|selectattr('role', 'in', ['system', 'user'])|list|length }}", kCtx},
  {"filters", "{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 3.14159|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 7|round }}|{{ 2.567|round(1, 'floor') }}", kCtx},
  {"filters", "{{ 'x\\ny\\n\\nz'|indent }}|{{ 'x\\ny'|indent(2, true) }}|{{ 'x\\n\\ny'|indent(2, blank=true) }}|{{ 'a\\nb'|indent('> ') }}", kCtx},
  {"filters", "{{ '42'|int }}{{ ' 7 '|int }}{{ '3.9'|int }}{{ 'x'|int }}{{ 'x'|int(-1) }}{{ 4.7|int }}|{{ '2.5'|float }}{{ 'q'|float }}{{ 3|float }}|{{ 5|string }}{{ none|string }}", kCtx},
  {"filters", "{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ l|sort(reverse=true) }}|{{ msgs|sort(attribute='role')|map(attribute='role')|list }}", kCtx},
  {"filters", "{{ [1, 2, 1, 'a', 'A']|unique|list }}|{{ d|dictsort }}|{{ d|items|list }}|{{ d|list }}|{{ s|list|length }}|{{ l|reverse|list }}|{{ s|reverse }}", kCtx},
  {"filters", "{{ '<a href=\"x\">&'|e }}|{{ '<b>'|escape }}|{{ '<i>'|safe }}|{{ l|sum }}|{{ [1.5, 2]|sum }}", kCtx},
  {"filters", "{{ 1|nofilter }}", kCtx},
  {"filters", "{% if false %}{{ 1|nofilter }}{% endif %}ok", kCtx},
  // tojson with transformers' override.
  {"tojson", "{{ d|tojson }}|{{ l|tojson }}|{{ s|tojson }}|{{ z|tojson }}|{{ t|tojson }}|{{ f|tojson }}|{{ 1.0|tojson }}|{{ u|tojson }}", kCtx},
  {"tojson", "{{ msgs[2]|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(indent=4, sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ e|tojson(indent=2) }}|{{ {}|tojson(indent=2) }}", kCtx},
  {"tojson", "{{ '<>&\\'\\x01\\x7f'|tojson }}|{{ (1, 2)|tojson }}|{{ d|tojson(indent='\\t') }}", kCtx},
  {"tojson", "{{ undefined_v|tojson }}", kCtx},
  {"tojson", "{{ u|tojson(ensure_ascii=true) }}|{{ '\\x7f😀é'|tojson(true) }}|{{ d|tojson(2) }}|{{ {'ü': u}|tojson(ensure_ascii=1, sort_keys=true) }}", kCtx},
  // Tests.
  {"tests", "{{ s is string }}{{ n is string }}{{ n is number }}{{ f is number }}{{ t is number }}{{ n is integer }}{{ f is float }}{{ t is boolean }}{{ n is boolean }}", kCtx},
  {"tests", "{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ s is iterable }}{{ n is iterable }}{{ l is sequence }}{{ s is sequence }}{{ z is none }}{{ undefined_v is none }}", kCtx},
  {"tests", "{{ t is true }}{{ 1 is true }}{{ t is false }}{{ n is odd }}{{ n is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ n is defined }}{{ undefined_v is undefined }}{{ n is not defined }}", kCtx},
  {"tests", "{{ n is eq 7 }}{{ n is ne 7 }}{{ n is lt 8 }}{{ n is gt 8 }}{{ n is le 7 }}{{ n is ge 8 }}{{ 'a' is in 'abc' }}{{ n is sameas 7 }}{{ z is sameas none }}{{ 'abc' is lower }}", kCtx},
  {"tests", "{{ 1 is notatest }}", kCtx},
  // String, dict and list methods.
  {"methods", "{{ s.startswith('Hell') }}{{ s.endswith('x') }}{{ s.startswith(('x', 'H')) }}|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ '  a  b  '.split() }}|{{ 'a b c'.split(None, 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}", kCtx},
  {"methods", "{{ s.upper() }}{{ s.lower() }}{{ 'ab cd'.title() }}{{ 'aB'.capitalize() }}|{{ s.replace('l', 'L') }}|{{ s.replace('l', 'L', 1) }}|{{ s.find('o') }}{{ s.find('z') }}{{ s.rfind('o') }}{{ s.count('l') }}|{{ ', '.join(['x', 'y']) }}", kCtx},
  {"methods", "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'dv') }}|{{ d.keys()|list }}|{{ d.values()|list|length }}|{{ d.items()|list }}|{{ '{} and {}'.format(1, 'x') }}|{{ 'x{0}y{k}'.format(5, k='K') }}", kCtx},
  {"methods", "{{ '12'.isdigit() }}{{ 'a1'.isdigit() }}{{ 'ab'.isalpha() }}{{ '  '.isspace() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ l.index(1) }}{{ l.count(3) }}", kCtx},
  {"methods", "{% set x = l.append(4) %}{{ l }}", kCtx},
  {"methods", "{{ s.nosuchmethod() }}", kCtx},
  {"methods", "{{ msgs[3].content[0].text }}{{ msgs[2].tool_calls[0].function.arguments|tojson }}{% for p in msgs[3].content %}{{ p.type }}{% endfor %}", kCtx},
  {"globals", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(5, 0, -2)|list }}{% for i in range(2) %}{{ i }}{% endfor %}|{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}", kCtx},
  // Found by the fuzzer's differential run.
  {"edge", "{{ 0x1F }}{{ 0b101 }}{{ 0o17 }}{{ 0 }}{{ 0_0 }}{{ 1_0 }}", "{}"},
  {"edge", "{{ 05 }}", "{}"},
  {"edge", "{{ undefined_v|int }}", "{}"},
  {"edge", "{{ 'x'|float(1, 2) }}", "{}"},
  {"edge", "{{ l|sort(nokey=1) }}", kCtx},
  {"edge", "{{ l|sort(undefined_v) }}", kCtx},
  {"edge", "{{ 'ab'.upper(1) }}", kCtx},
  {"edge", "{{ '\\x4' }}", kCtx},
  {"edge", "{% macro m() %}{% break %}{% endmacro %}", kCtx},
  {"edge", "{{ (undefined_v, 1) }}|{{ [undefined_v] }}", kCtx},
  {"edge", "a{#", kCtx},
  {"edge", "{% set ns = namespace(a=[]) %}{{ ns.a|length }}{{ msgs|map(attribute='nope.deeper')|list }}", kCtx},
  {"edge", "{{ strftime_now('%Y')|length }}{{ 'x'|indent(false) }}", kCtx},
  // Syntax errors.
  {"syntax", "{% if x %}unterminated", kCtx},
  {"syntax", "{{ 1 + }}", kCtx},
  {"syntax", "{% unknowntag %}", kCtx},
  {"syntax", "{% for x in l %}{% endif %}", kCtx},
  {"syntax", "{{ 'unterminated }}", kCtx},
  {"syntax", "{% endfor %}", kCtx},
};
// clang-format on

class TemplateFeaturesTest : public ::testing::Test {
 protected:
  void CheckGroup(const std::string& group) {
    REQUIRE_JINJA_ORACLE();
    std::vector<testing::OracleCase> cases;
    for (const FeatureCase& c : kCases) {
      if (group != c.group) continue;
      testing::OracleCase oc;
      oc.label = absl::StrCat(group, "#", cases.size());
      oc.template_source = c.source;
      oc.context = nlohmann::ordered_json::parse(c.context);
      if (group == "ws_opts") {
        oc.options = {
            {"trim_blocks", false}, {"lstrip_blocks", false}, {"keep_trailing_newline", true}};
      }
      cases.push_back(std::move(oc));
    }
    ASSERT_FALSE(cases.empty());
    int ok = 0, err = 0;
    for (const std::string& f : testing::CompareWithOracle(cases, &ok, &err)) ADD_FAILURE() << f;
    EXPECT_EQ(ok + err, static_cast<int>(cases.size()));
  }
};

TEST_F(TemplateFeaturesTest, PrintsValuesLikePython) { CheckGroup("print"); }
TEST_F(TemplateFeaturesTest, WhitespaceControl) { CheckGroup("ws"); }
TEST_F(TemplateFeaturesTest, WhitespaceOptionsOff) { CheckGroup("ws_opts"); }
TEST_F(TemplateFeaturesTest, IfAndLogic) { CheckGroup("if"); }
TEST_F(TemplateFeaturesTest, ForLoops) { CheckGroup("for"); }
TEST_F(TemplateFeaturesTest, SetAndNamespaces) { CheckGroup("set"); }
TEST_F(TemplateFeaturesTest, MacrosAndCallBlocks) { CheckGroup("macro"); }
TEST_F(TemplateFeaturesTest, FilterAndGenerationBlocks) { CheckGroup("filterblock"); }
TEST_F(TemplateFeaturesTest, AttributeItemAndUndefined) { CheckGroup("access"); }
TEST_F(TemplateFeaturesTest, Operators) { CheckGroup("ops"); }
TEST_F(TemplateFeaturesTest, Filters) { CheckGroup("filters"); }
TEST_F(TemplateFeaturesTest, ToJsonOverride) { CheckGroup("tojson"); }
TEST_F(TemplateFeaturesTest, Tests) { CheckGroup("tests"); }
TEST_F(TemplateFeaturesTest, Methods) { CheckGroup("methods"); }
TEST_F(TemplateFeaturesTest, Globals) { CheckGroup("globals"); }
TEST_F(TemplateFeaturesTest, SyntaxErrors) { CheckGroup("syntax"); }
TEST_F(TemplateFeaturesTest, EdgeCasesFoundByFuzzing) { CheckGroup("edge"); }

}  // namespace
}  // namespace flatstate::tmpl
