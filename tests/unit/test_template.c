/* tests/unit/test_template.c: the Jinja2 interpreter feature by feature. The table of cases was
 * rendered by jinja2 3.1.6 with transformers' settings (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols, transformers' tojson/raise_exception/strftime_now; list.append cases
 * with a plain Environment since the sandbox forbids them) and must match byte for byte; error
 * cases must fail with a message containing the given text. Then syntax errors, API behaviour,
 * concurrency and limits. */
#include "test.h"
#include "mlxcel/template.h"

#include "template/tpl.h"

#include <pthread.h>
#include <unistd.h>

struct tcase { const char *name, *tpl, *vars, *want, *err; };
struct scase { const char *name, *tpl, *msg; };

/* generated from jinja2 3.1.6 with transformers' environment settings */
static const struct tcase CASES[] = {
    {"text_only",
     "hello world",
     "{}",
     "hello world", NULL},
    {"trailing_newline_dropped",
     "a\n",
     "{}",
     "a", NULL},
    {"crlf_normalized",
     "a\r\nb\rc",
     "{}",
     "a\nb\nc", NULL},
    {"var",
     "{{ x }}",
     "{\"x\": \"hi\"}",
     "hi", NULL},
    {"undefined_empty",
     "[{{ nope }}]",
     "{}",
     "[]", NULL},
    {"undefined_attr_of_dict_empty",
     "[{{ d.missing }}]",
     "{\"d\": {}}",
     "[]", NULL},
    {"for_simple",
     "{% for m in ms %}{{ m }},{% endfor %}",
     "{\"ms\": [1, 2, 3]}",
     "1,2,3,", NULL},
    {"for_else",
     "{% for m in ms %}{{ m }}{% else %}empty{% endfor %}",
     "{\"ms\": []}",
     "empty", NULL},
    {"for_filter",
     "{% for m in ms if m > 1 %}{{ loop.index }}:{{ m }} {% endfor %}",
     "{\"ms\": [1, 2, 3]}",
     "1:2 2:3 ", NULL},
    {"loop_vars",
     "{% for m in ms %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     "{\"ms\": [\"a\", \"b\"]}",
     "1021TrueFalse2|2110FalseTrue2|", NULL},
    {"loop_prev_next",
     "{% for m in ms %}{{ loop.previtem }}<{{ m }}>{{ loop.nextitem }};{% endfor %}",
     "{\"ms\": [\"a\", \"b\", \"c\"]}",
     "<a>b;a<b>c;b<c>;", NULL},
    {"loop_cycle",
     "{% for m in ms %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
     "{\"ms\": [1, 2, 3]}",
     "odd even odd ", NULL},
    {"loop_changed",
     "{% for m in ms %}{% if loop.changed(m) %}{{ m }}{% endif %}{% endfor %}",
     "{\"ms\": [1, 1, 2, 2, 1]}",
     "121", NULL},
    {"loop_break_continue",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}",
     "0134", NULL},
    {"nested_loop",
     "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endfor %}",
     "{}",
     "1x1 1y2 1;2x1 2y2 2;", NULL},
    {"for_unpack_items",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "b=1;a=2;", NULL},
    {"for_dict_keys",
     "{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"x\": 1, \"y\": 2}}",
     "xy", NULL},
    {"loop_recursive",
     "{% for n in tree recursive %}{{ n.name }}{% if n.kids %}({{ loop(n.kids) }}){% endif %}{% endfor %}",
     "{\"tree\": [{\"name\": \"a\", \"kids\": [{\"name\": \"b\"}, {\"name\": \"c\", \"kids\": [{\"name\": \"d\"}]}]}, {\"name\": \"e\"}]}",
     "a(bc(d))e", NULL},
    {"if_elif_else",
     "{% for x in [1,2,3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}",
     "{}",
     "one two many ", NULL},
    {"set_and_scope",
     "{% set a = 1 %}{% for i in [1,2] %}{% set a = a + i %}{{ a }}{% endfor %}|{{ a }}",
     "{}",
     "23|1", NULL},
    {"namespace",
     "{% set ns = namespace(total=0, s='') %}{% for i in [1,2,3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
     "{}",
     "6", NULL},
    {"block_set",
     "{% set x %}  hello {{ 1 + 1 }} {% endset %}[{{ x }}]",
     "{}",
     "[  hello 2 ]", NULL},
    {"block_set_filter",
     "{% set x | upper %}abc{% endset %}{{ x }}",
     "{}",
     "ABC", NULL},
    {"set_tuple",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
     "{}",
     "12", NULL},
    {"macro",
     "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }}",
     "{}",
     "Hi Bob! Hi Al?", NULL},
    {"macro_varargs",
     "{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, x=4) }}",
     "{}",
     "1(2, 3){'x': 4}", NULL},
    {"call_block",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}",
     "{}",
     "<b>bold</b>", NULL},
    {"call_block_args",
     "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}[{{ item }}]{% endcall %}",
     "{}",
     "[1][2]", NULL},
    {"filter_block",
     "{% filter upper %}abc {{ 'def' }}{% endfilter %}",
     "{}",
     "ABC DEF", NULL},
    {"with_block",
     "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
     "{}",
     "3[]", NULL},
    {"raw_block",
     "{% raw %}{{ not evaluated }}{% endraw %}",
     "{}",
     "{{ not evaluated }}", NULL},
    {"comment",
     "a{# comment #}b",
     "{}",
     "ab", NULL},
    {"ws_minus",
     "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e",
     "{}",
     "abcde", NULL},
    {"trim_blocks",
     "{% if true %}\nyes\n{% endif %}\nafter",
     "{}",
     "yes\nafter", NULL},
    {"lstrip_blocks",
     "  {% if true %}\n  x\n  {% endif %}\ny",
     "{}",
     "  x\ny", NULL},
    {"lstrip_not_var",
     "  {{ 'v' }}\n",
     "{}",
     "  v", NULL},
    {"lstrip_plus",
     "  {%+ if true %}x{% endif %}",
     "{}",
     "  x", NULL},
    {"comment_ws",
     "a\n  {# c #}\nb",
     "{}",
     "a\nb", NULL},
    {"slicing",
     "{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ s[1:3] }}{{ s[::-1] }}",
     "{\"xs\": [1, 2, 3, 4], \"s\": \"h\\u00e9llo\"}",
     "[2, 3, 4][1, 2, 3][4, 3, 2, 1][1, 3]\303\251loll\303\251h", NULL},
    {"index_neg",
     "{{ xs[-1] }}{{ s[0] }}{{ s[-1] }}",
     "{\"xs\": [1, 2], \"s\": \"\\u00e9t\\u00e9\"}",
     "2\303\251\303\251", NULL},
    {"in_notin",
     "{{ 'a' in 'cat' }}{{ 2 in [1,2] }}{{ 'k' in d }}{{ 'z' not in d }}",
     "{\"d\": {\"k\": 1}}",
     "TrueTrueTrueTrue", NULL},
    {"is_tests",
     "{{ x is defined }}{{ y is undefined }}{{ n is none }}{{ s is string }}{{ 1 is number }}{{ d is mapping }}{{ l is iterable }}{{ l is sequence }}{{ t is boolean }}{{ t is true }}{{ f is false }}",
     "{\"x\": 1, \"n\": null, \"s\": \"a\", \"d\": {}, \"l\": [], \"t\": true, \"f\": false}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue", NULL},
    {"is_not",
     "{{ n is not none }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 'a' is eq 'a' }}{{ 1 is equalto 2 }}",
     "{\"n\": 1}",
     "TrueTrueTrueTrueFalseTrueFalse", NULL},
    {"is_integer_float",
     "{{ 1 is integer }}{{ 1.0 is float }}{{ true is integer }}{{ 'a' is lower }}{{ 'A' is upper }}",
     "{}",
     "TrueTrueFalseTrueTrue", NULL},
    {"concat_tilde",
     "{{ 'a' ~ 1 ~ none ~ true }}",
     "{}",
     "a1NoneTrue", NULL},
    {"plus_strings",
     "{{ 'a' + 'b' }}{{ [1] + [2] }}",
     "{}",
     "ab[1, 2]", NULL},
    {"arith",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} {{ 4 / 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }}",
     "{}",
     "3 -4 1 2 3.5 1024 3.0 2.0 0.30000000000000004 1e+20 1.5e-07", NULL},
    {"cond_expr",
     "{{ 'y' if x else 'n' }}{{ 'y' if not x else 'n' }}[{{ 'only' if false }}]",
     "{\"x\": true}",
     "yn[]", NULL},
    {"and_or_values",
     "{{ 0 or 'b' }}{{ 'a' and 'b' }}{{ none or [] }}",
     "{}",
     "bb[]", NULL},
    {"compare_chain",
     "{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' < 'b' }}{{ [1,2] == [1,2] }}{{ 1 == 1.0 }}{{ 1 == true }}",
     "{}",
     "TrueFalseTrueTrueTrueTrue", NULL},
    {"list_dict_literals",
     "{{ [1, 'a', none, true, 1.5] }}{{ {'a': 1, 'b': [2]} }}{{ (1,) }}{{ (1, 2) }}",
     "{}",
     "[1, 'a', None, True, 1.5]{'a': 1, 'b': [2]}(1,)(1, 2)", NULL},
    {"attr_item_access",
     "{{ m.role }}{{ m['content'] }}{{ m.get('role') }}{{ m.get('x', 'dflt') }}{{ m.get('x') }}",
     "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}}",
     "userhiuserdfltNone", NULL},
    {"dict_methods",
     "{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}",
     "{\"d\": {\"a\": 1, \"b\": \"x\"}}",
     "['a', 'b'][1, 'x'][('a', 1), ('b', 'x')]", NULL},
    {"str_methods",
     "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello world'.title() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}",
     "{\"s\": \"  Hi There  \"}",
     "Hi There|Hi There  |  Hi There|a|  HI THERE  |  hi there  |Hello World|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']", NULL},
    {"str_methods2",
     "{{ s.startswith('ab') }}{{ s.endswith('cd') }}{{ s.startswith(('x', 'a')) }}{{ s.replace('b', 'B') }}{{ s.find('c') }}{{ s.count('b') }}{{ '-'.join(['a','b']) }}{{ s.capitalize() }}{{ 'AbC'.swapcase() }}",
     "{\"s\": \"abcdb\"}",
     "TrueFalseTrueaBcdB22a-bAbcdbaBc", NULL},
    {"str_format",
     "{{ '{} and {}'.format('a', 1) }} {{ '{0}{name}'.format('x', name='y') }} {{ '{{}}'.format() }}",
     "{}",
     "a and 1 xy {}", NULL},
    {"percent_format",
     "{{ '%s-%d-%.2f' % ('a', 3, 1.5) }} {{ '%05d'|format(42) }} {{ 'hi %s' % 'bob' }}",
     "{}",
     "a-3-1.50 00042 hi bob", NULL},
    {"list_append",
     "{% set xs = [] %}{% set _ = xs.append(1) %}{% set _ = xs.append('b') %}{{ xs }}",
     "{}",
     "[1, 'b']", NULL},
    {"tojson_basic",
     "{{ d | tojson }}",
     "{\"d\": {\"b\": [1, 2.5, null, true], \"a\": \"x\\\"y\\n\\u00e9\\ud83d\\ude00\", \"c\": {}}}",
     "{\"b\": [1, 2.5, null, true], \"a\": \"x\\\"y\\n\303\251\360\237\230\200\", \"c\": {}}", NULL},
    {"tojson_indent",
     "{{ d | tojson(indent=2) }}",
     "{\"d\": {\"b\": [1, {\"z\": []}], \"a\": \"x\"}}",
     "{\n  \"b\": [\n    1,\n    {\n      \"z\": []\n    }\n  ],\n  \"a\": \"x\"\n}", NULL},
    {"tojson_indent_pos",
     "{{ d | tojson(4) }}",
     "{\"d\": [1, [2, 3]]}",
     "[1, [2, 3]]", NULL},
    {"tojson_sort_keys",
     "{{ d | tojson(sort_keys=true) }}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "{\"a\": 2, \"b\": 1}", NULL},
    {"tojson_scalars",
     "{{ 1 | tojson }}{{ 'a' | tojson }}{{ none | tojson }}{{ 2.0 | tojson }}{{ true | tojson }}",
     "{}",
     "1\"a\"null2.0true", NULL},
    {"tojson_control_chars",
     "{{ s | tojson }}",
     "{\"s\": \"\\u0001\\t\\b\\f\\r\\u001f\\u007f/\"}",
     "\"\\u0001\\t\\b\\f\\r\\u001f\177/\"", NULL},
    {"filter_trim",
     "[{{ '  a b  ' | trim }}][{{ 'xxaxx' | trim('x') }}]",
     "{}",
     "[a b][a]", NULL},
    {"filter_length",
     "{{ 'h\303\251' | length }}{{ [1,2,3] | count }}{{ {'a':1} | length }}{{ nope | length }}",
     "{}",
     "2310", NULL},
    {"filter_join",
     "{{ [1,2,3] | join(', ') }}{{ ['a','b'] | join }}{{ users | join(',', attribute='name') }}",
     "{\"users\": [{\"name\": \"x\"}, {\"name\": \"y\"}]}",
     "1, 2, 3abx,y", NULL},
    {"filter_items",
     "{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}",
     "{\"d\": {\"a\": 1, \"b\": 2}}",
     "a1b2", NULL},
    {"filter_selectattr",
     "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}{{ ms | rejectattr('role', 'eq', 'user') | list | length }}{{ ms | selectattr('flag') | list | length }}",
     "{\"ms\": [{\"role\": \"user\", \"content\": \"a\", \"flag\": true}, {\"role\": \"assistant\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
     "['a', 'c']11", NULL},
    {"filter_select",
     "{{ [1,2,3,4] | select('odd') | list }}{{ [1,2,3,4] | reject('even') | list }}{{ [0,1,'',2] | select | list }}",
     "{}",
     "[1, 3][1, 3][1, 2]", NULL},
    {"filter_map_filter",
     "{{ ['a','b'] | map('upper') | list }}{{ [1.5, 2.5] | map('int') | list }}",
     "{}",
     "['A', 'B'][1, 2]", NULL},
    {"filter_map_default",
     "{{ ms | map(attribute='x', default='?') | list }}",
     "{\"ms\": [{\"x\": 1}, {}]}",
     "[1, '?']", NULL},
    {"filter_default",
     "{{ nope | default('d') }}{{ nope | d('e') }}{{ '' | default('f') }}{{ '' | default('g', true) }}{{ none | default('h') }}",
     "{}",
     "degNone", NULL},
    {"filter_replace",
     "{{ 'aaa' | replace('a', 'b') }}{{ 'aaa' | replace('a', 'b', 2) }}",
     "{}",
     "bbbbba", NULL},
    {"filter_indent",
     "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(2, blank=true) }}|{{ 'x\ny' | indent('> ') }}",
     "{}",
     "a\n  b\n\n  c|  a\n  b|a\n  \n  b|x\n> y", NULL},
    {"filter_string_int_float",
     "{{ 3 | string }}{{ '42' | int + 1 }}{{ 'x' | int }}{{ '3.7' | int }}{{ 3.9 | int }}{{ '2.5' | float }}{{ 2 | float }}{{ 'q' | float }}",
     "{}",
     "3430332.52.00.0", NULL},
    {"filter_first_last",
     "{{ [1,2,3] | first }}{{ [1,2,3] | last }}{{ 'abc' | first }}{{ 'abc' | last }}",
     "{}",
     "13ac", NULL},
    {"filter_list",
     "{{ 'ab' | list }}{{ {'x': 1} | list }}",
     "{}",
     "['a', 'b']['x']", NULL},
    {"filter_case",
     "{{ 'hELLO wORLD' | capitalize }} {{ 'hello wOrld-foo(bar' | title }} {{ 'Ab' | lower }}{{ 'Ab' | upper }}",
     "{}",
     "Hello world Hello World-Foo(Bar abAB", NULL},
    {"filter_unique",
     "{{ [3, 1, 3, 2, 1] | unique | list }}{{ ['a', 'A', 'b'] | unique | list }}",
     "{}",
     "[3, 1, 2]['a', 'b']", NULL},
    {"filter_sort",
     "{{ [3, 1, 2] | sort }}{{ [3, 1, 2] | sort(reverse=true) }}{{ ['b', 'A', 'c'] | sort }}{{ us | sort(attribute='age') | map(attribute='n') | list }}",
     "{\"us\": [{\"n\": \"x\", \"age\": 3}, {\"n\": \"y\", \"age\": 1}]}",
     "[1, 2, 3][3, 2, 1]['A', 'b', 'c']['y', 'x']", NULL},
    {"filter_reverse",
     "{{ [1,2,3] | reverse | list }}{{ 'abc' | reverse }}",
     "{}",
     "[3, 2, 1]cba", NULL},
    {"filter_round_abs",
     "{{ 2.5 | round }}{{ 3.14159 | round(2) }}{{ 2.1 | round(0, 'ceil') }}{{ 2.9 | round(method='floor') }}{{ -3 | abs }}{{ -2.5 | abs }}{{ 3 | round }}",
     "{}",
     "2.03.143.02.032.53", NULL},
    {"filter_safe_escape",
     "{{ '<a>' | safe }}{{ '<a href=\"x\">&\\'' | e }}{{ '<b>' | escape }}",
     "{}",
     "<a>&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;b&gt;", NULL},
    {"filter_sum_min_max",
     "{{ [1,2,3] | sum }}{{ [1,2,3] | min }}{{ [1,2,3] | max }}{{ xs | sum(attribute='v') }}",
     "{\"xs\": [{\"v\": 1}, {\"v\": 2.5}]}",
     "6133.5", NULL},
    {"filter_dictsort",
     "{{ d | dictsort }}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "[('a', 2), ('b', 1)]", NULL},
    {"filter_chain_precedence",
     "{{ xs | length - 1 }}{{ -xs | length if false else 'x' }}{{ 'a' + 'b' | upper }}",
     "{\"xs\": [1, 2, 3]}",
     "2xaB", NULL},
    {"filter_wordcount_truncate",
     "{{ 'a b  c' | wordcount }}{{ 'hello world foo bar' | truncate(9, leeway=0) }}",
     "{}",
     "3hello...", NULL},
    {"filter_batch",
     "{{ [1,2,3,4,5] | batch(2) | list }}",
     "{}",
     "[[1, 2], [3, 4], [5]]", NULL},
    {"range_forms",
     "{{ range(3) | list }}{{ range(1, 4) | list }}{{ range(10, 0, -3) | list }}",
     "{}",
     "[0, 1, 2][1, 2, 3][10, 7, 4, 1]", NULL},
    {"dict_global",
     "{{ dict(a=1, b='x') }}",
     "{}",
     "{'a': 1, 'b': 'x'}", NULL},
    {"str_of_values",
     "{{ none }} {{ true }} {{ 1.0 }} {{ [1, 'a', none] }} {{ {'k': 'v\\'s'} }} {{ ('a',) }}",
     "{}",
     "None True 1.0 [1, 'a', None] {'k': \"v's\"} ('a',)", NULL},
    {"unicode_passthrough",
     "{{ s }}|{{ s | upper }}|{{ s | length }}",
     "{\"s\": \"\\uc548\\ub155 \\u00e9\\u00df \\ud83d\\ude00\"}",
     "\354\225\210\353\205\225 \303\251\303\237 \360\237\230\200|\354\225\210\353\205\225 \303\211SS \360\237\230\200|7", NULL},
    {"string_escapes",
     "{{ 'a\\nb\\tc\\u00e9\\x41' }}|{{ \"q'q\" }}|{{ 'x' 'y' }}",
     "{}",
     "a\nb\tc\303\251A|q'q|xy", NULL},
    {"strip_unicode_ws",
     "[{{ s.strip() }}]",
     "{\"s\": \"\\u3000\\u00a0a\\u2028\"}",
     "[a]", NULL},
    {"messages_loop",
     "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] }}{% if not loop.last %}\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Yo\"}], \"add_generation_prompt\": true}",
     "<|user|>Hi<|assistant|>Yo<|assistant|>", NULL},
    {"macro_scope_sees_globals",
     "{% macro f() %}{{ g }}{% endmacro %}{{ f() }}",
     "{\"g\": \"G\"}",
     "G", NULL},
    {"items_of_none_content",
     "{% if m.content is none %}none{% endif %}{{ m.content }}",
     "{\"m\": {\"content\": null}}",
     "noneNone", NULL},
    {"string_iteration",
     "{% for ch in 'h\303\251' %}[{{ ch }}]{% endfor %}",
     "{}",
     "[h][\303\251]", NULL},
    {"splitlines_method",
     "{{ 'a\\nb\\r\\nc'.splitlines() }}",
     "{}",
     "['a', 'b', 'c']", NULL},
    {"inline_if_in_concat",
     "{{ 'a' + ('b' if x else 'c') + 'd' }}",
     "{\"x\": false}",
     "acd", NULL},
    {"not_precedence",
     "{{ not 1 == 2 }}{{ not x is defined }}",
     "{}",
     "TrueTrue", NULL},
    {"neg_pow",
     "{{ -2 ** 2 }}{{ 2 ** -1 }}",
     "{}",
     "40.5", NULL},
    {"big_int_mul",
     "{{ 123456789 * 1000 }}",
     "{}",
     "123456789000", NULL},
    {"is_in_test",
     "{{ 1 is in [1, 2] }}",
     "{}",
     "True", NULL},
    {"namespace_from_dict_kwargs",
     "{% set ns = namespace(a=1) %}{{ ns.a }}{% set ns.b = 2 %}{{ ns.b }}",
     "{}",
     "12", NULL},
    {"length_filter_on_messages_minus",
     "{% set ns = namespace(i=messages|length - 1) %}{{ ns.i }}",
     "{\"messages\": [1, 2, 3]}",
     "2", NULL},
    {"whitespace_control_mixed",
     "{%- for x in xs -%}\n  {{ x }}\n{%- endfor %}\n end",
     "{\"xs\": [1, 2]}",
     "12 end", NULL},
    {"empty_for_output",
     "{% for x in [] %}{{ x }}{% endfor %}done",
     "{}",
     "done", NULL},
    {"set_in_if_visible",
     "{% if true %}{% set v = 'yes' %}{% endif %}{{ v }}",
     "{}",
     "yes", NULL},
    {"loop_set_not_leaking",
     "{% set v = 'outer' %}{% for i in [1] %}{% set v = 'inner' %}{% endfor %}{{ v }}",
     "{}",
     "outer", NULL},
    {"float_repr",
     "{{ 1/3 }} {{ 2.0 }} {{ 1e16 }} {{ 1.0e-5 }} {{ 123456789.125 }} {{ -0.0 }} {{ 3.0 * 1e15 }}",
     "{}",
     "0.3333333333333333 2.0 1e+16 1e-05 123456789.125 -0.0 3000000000000000.0", NULL},
    {"dict_iteration_order",
     "{% for k, v in d.items() %}{{ k }}{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": 2, \"m\": 3}}",
     "zam", NULL},
    {"get_item_int_key_on_list_attr",
     "{{ xs.0 }}{{ xs[1] }}",
     "{\"xs\": [\"a\", \"b\"]}",
     "ab", NULL},
    {"undefined_default_chain",
     "{{ (m.tool_calls or []) | length }}",
     "{\"m\": {}}",
     "0", NULL},
    {"str_in_list",
     "{{ 'b' in ['a', 'b'] }}{{ x in [1, 2] }}",
     "{\"x\": 2}",
     "TrueTrue", NULL},
    {"multiline_tag",
     "{{\n  'a'\n  ~ 'b'\n}}",
     "{}",
     "ab", NULL},
    {"strftime_shape",
     "{{ strftime_now('%Y') | length }}",
     "{}",
     "4", NULL},
    {"trim_plus",
     "{% if true +%}\nx{% endif %}",
     "{}",
     "\nx", NULL},
    {"raw_ws",
     "  {% raw %}\n a {% endraw %}\nb",
     "{}",
     "\n a b", NULL},
    {"comment_trim",
     "{# c #}\nx",
     "{}",
     "x", NULL},
    {"macro_default_refs_param",
     "{% macro f(a, b=a*2) %}{{ a }}{{ b }}{% endmacro %}{{ f(2) }}",
     "{}",
     "24", NULL},
    {"loop_read_before_set",
     "{% for x in xs %}{{ y }}{% set y = x %}{% endfor %}",
     "{\"xs\": [1, 2], \"y\": \"Y\"}",
     "YY", NULL},
    {"percent_width",
     "{{ '%5s|%-4d|%+.1f' % ('ab', 7, 2.25) }}",
     "{}",
     "   ab|7   |+2.2", NULL},
    {"tuple_concat_mul",
     "{{ (1,2) + (3,) }}{{ 3 * 'ab' }}",
     "{}",
     "(1, 2, 3)ababab", NULL},
    {"loop_last_if",
     "{% for x in [1,2,3] %}{{ loop.last }}{% if loop.last %}L{% endif %}{% endfor %}",
     "{}",
     "FalseFalseTrueL", NULL},
    {"upper_sharp_s",
     "{{ 'stra\303\237e' | upper }}",
     "{}",
     "STRASSE", NULL},
    {"err_in_none",
     "{{ 'x' in none }}",
     "{}",
     NULL, "not iterable"},
    {"generator_truthy",
     "{% if [] | select %}T{% endif %}{% if [] | select | list %}L{% endif %}",
     "{}",
     "T", NULL},
    {"generator_first_join_sum",
     "{{ [1,2] | select | first }}{{ [1,2] | map('string') | join }}{{ [1,2] | select | sum }}",
     "{}",
     "1123", NULL},
    {"generator_single_use",
     "{% set g = [1,2] | select %}{% for x in g %}{{ x }}{% endfor %}{% for x in g %}{{ x }}{% endfor %}",
     "{}",
     "12", NULL},
    {"select_on_none",
     "{{ none | select | list }}{{ none | map(attribute='x') | list }}{{ 0 | rejectattr('a') | list }}",
     "{}",
     "[][][]", NULL},
    {"wordcount_regex",
     "{{ 'a-b c_d 2.5 \303\251t\303\251' | wordcount }}",
     "{}",
     "6", NULL},
    {"callable_undefined",
     "{{ nope is callable }}{{ 'x'.upper is callable }}{{ 1 is callable }}",
     "{}",
     "TrueTrueFalse", NULL},
    {"percent_list_arg",
     "{{ 'user' % ['x'] }}",
     "{}",
     "user", NULL},
    {"safe_stringifies",
     "{{ (1, 2) | safe ~ '' }}{{ ([1] | safe)[0] }}",
     "{}",
     "(1, 2)[", NULL},
    {"truncate_list_short",
     "{{ ['x', 'y'] | truncate(5, leeway=0) }}",
     "{}",
     "['x', 'y']", NULL},
    {"lower_test_on_list",
     "{{ ['a', 0] is lower }}{{ 'ABC' is upper }}",
     "{}",
     "TrueTrue", NULL},
    {"err_generator_length",
     "{{ [1,2] | select | length }}",
     "{}",
     NULL, "has no len()"},
    {"err_generator_last",
     "{{ [1,2] | select | last }}",
     "{}",
     NULL, "not reversible"},
    {"err_generator_tojson",
     "{{ [1,2] | select | tojson }}",
     "{}",
     NULL, "not JSON serializable"},
    {"err_slice_int",
     "{{ x[1:] }}",
     "{\"x\": 5}",
     NULL, "not subscriptable"},
    {"err_unhashable_in",
     "{{ [1] in {'a': 1} }}",
     "{}",
     NULL, "unhashable"},
    {"err_int_undefined",
     "{{ nope | int }}",
     "{}",
     NULL, "'nope' is undefined"},
    {"err_indent_list",
     "{{ [1] | indent }}",
     "{}",
     NULL, "indent"},
    {"err_list_lt_tuple",
     "{{ [1] < (1,) }}",
     "{}",
     NULL, "not supported between"},
    {"err_percent_unused",
     "{{ 'abc' % 'x' }}",
     "{}",
     NULL, "not all arguments converted"},
    {"err_raise",
     "{{ raise_exception('Bad roles!') }}",
     "{}",
     NULL, "Bad roles!"},
    {"err_attr_of_undefined",
     "{{ nope.x }}",
     "{}",
     NULL, "'nope' is undefined"},
    {"err_call_undefined_method",
     "{{ m.content.startswith('a') }}",
     "{\"m\": {}}",
     NULL, "has no attribute 'content'"},
    {"err_add_int_str",
     "{{ 1 + 'a' }}",
     "{}",
     NULL, "unsupported operand"},
    {"err_div_zero",
     "{{ 1 / 0 }}",
     "{}",
     NULL, "division by zero"},
    {"err_undefined_plus",
     "{{ nope + 'a' }}",
     "{}",
     NULL, "'nope' is undefined"},
    {"err_not_iterable",
     "{% for x in 3 %}{% endfor %}",
     "{}",
     NULL, "not iterable"},
    {"err_tojson_undefined",
     "{{ nope | tojson }}",
     "{}",
     NULL, "undefined"},
    {"err_set_attr_non_ns",
     "{% set d = {} %}{% set d.x = 1 %}",
     "{}",
     NULL, "non-namespace"},
    {"err_range_too_big",
     "{{ range(1000000) | length }}",
     "{}",
     NULL, "Range too big"},
    {"err_lt_mixed",
     "{{ 1 < 'a' }}",
     "{}",
     NULL, "not supported between"},
};
static const struct scase SYNTAX[] = {
    {"syn_unclosed_if", "{% if true %}x", "never closed"},
    {"syn_unclosed_for", "{% for x in y %}x{% endif %}", "endif"},
    {"syn_unknown_filter", "{{ x | frobnicate }}", "no filter named 'frobnicate'"},
    {"syn_unknown_test", "{{ x is frobbed }}", "no test named 'frobbed'"},
    {"syn_unknown_tag", "{% frob %}", "unknown tag 'frob'"},
    {"syn_unclosed_var", "{{ x ", "missing '}}'"},
    {"syn_unclosed_string", "{{ 'abc }}", "unterminated string"},
    {"syn_unclosed_comment", "{# abc", "unclosed comment"},
    {"syn_stray_endfor", "{% endfor %}", "outside any block"},
    {"syn_bad_expr", "{{ 1 + }}", "unexpected"},
    {"syn_unbalanced_paren", "{{ (1 + 2 }}", "unexpected '}', expected ')'"},
    {"syn_bad_char", "{{ 1 ? 2 }}", "unexpected character"},
    {"syn_unclosed_macro", "{% macro f() %}x", "never closed"},
    {"syn_else_outside", "a{% else %}b", "outside any block"},
};

static void run_case(const struct tcase *c) {
    mx_template *t = NULL;
    mx_status st = mx_template_parse(c->tpl, &t);
    TREQUIRE(st == MX_OK, "parse: %s", mx_last_error());
    json_error_t je;
    json_t *vars = json_loads(c->vars, 0, &je);
    char *out = NULL;
    st = mx_template_render(t, vars, &out);
    if (c->want) {
        TCHECK(st == MX_OK, "render: %s", mx_last_error());
        if (st == MX_OK) TCHECK(!strcmp(out, c->want), "got [%s] want [%s]", out, c->want);
    } else {
        TCHECK(st == MX_ERR_INVALID_ARG, "expected a render error, got status %d out [%s]", st, out ? out : "");
        TCHECK(strstr(mx_last_error(), c->err) != NULL, "message [%s] lacks [%s]", mx_last_error(), c->err);
    }
    free(out);
    json_decref(vars);
    mx_template_free(t);
}

static void run_syntax(const struct scase *c) {
    mx_template *t = NULL;
    mx_status st = mx_template_parse(c->tpl, &t);
    TCHECK(st == MX_ERR_FORMAT && t == NULL, "expected a syntax error, got %d", st);
    TCHECK(strstr(mx_last_error(), c->msg) != NULL, "message [%s] lacks [%s]", mx_last_error(), c->msg);
    TCHECK(strstr(mx_last_error(), "line ") != NULL, "message [%s] has no line", mx_last_error());
    mx_template_free(t);
}

static char *render_s(const char *tpl, const char *vars, mx_status *st) {
    mx_template *t = NULL;
    char *out = NULL;
    *st = mx_template_parse(tpl, &t);
    if (*st != MX_OK) return NULL;
    json_t *v = vars ? json_loads(vars, 0, NULL) : NULL;
    *st = mx_template_render(t, v, &out);
    json_decref(v);
    mx_template_free(t);
    return out;
}

static void syntax_error_line_number(void) {
    mx_template *t = NULL;
    TCHECK(mx_template_parse("line1\n{{ ok }}\n{% if x %}\n{{ 1 + }}\n{% endif %}", &t) == MX_ERR_FORMAT, "no error");
    TCHECK(strstr(mx_last_error(), "line 4") != NULL, "message [%s] should name line 4", mx_last_error());
}

static void runtime_error_line_number(void) {
    mx_status st;
    char *o = render_s("a\nb\n{{ 1 // 0 }}", NULL, &st);
    TCHECK(st == MX_ERR_INVALID_ARG && !o, "no error");
    TCHECK(strstr(mx_last_error(), "line 3") != NULL, "message [%s] should name line 3", mx_last_error());
    free(o);
}

static void raise_exception_message_verbatim(void) {
    mx_status st;
    char *o = render_s("{% if x %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}", "{\"x\": 1}", &st);
    TCHECK(st == MX_ERR_INVALID_ARG && !o, "no error");
    TCHECK(!strcmp(mx_last_error(), "Only user and assistant roles are supported!"), "message [%s]", mx_last_error());
    free(o);
}

static void render_chat_variables(void) {
    mx_template *t = NULL;
    mx_status rq_1 = mx_template_parse("{{ bos_token }}|{{ eos_token is defined }}|{{ tools is none }}|{{ documents is none }}|"
                               "{{ add_generation_prompt }}|{{ messages | length }}|{{ enable_thinking }}", &t);
    TREQUIRE(rq_1 == MX_OK,
             "%s", mx_last_error());
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"x\"}]", 0, NULL);
    json_t *kw = json_loads("{\"enable_thinking\": false}", 0, NULL);
    char *out = NULL;
    TCHECK(mx_template_render_chat(t, msgs, NULL, true, "<s>", NULL, kw, &out) == MX_OK, "%s", mx_last_error());
    TCHECK(out && !strcmp(out, "<s>|False|True|True|True|1|False"), "got [%s]", out ? out : "");
    free(out);
    out = NULL;
    json_t *tools = json_loads("[{\"type\":\"function\"}]", 0, NULL);
    TCHECK(mx_template_render_chat(t, msgs, tools, false, NULL, "</s>", NULL, &out) == MX_OK, "%s", mx_last_error());
    TCHECK(out && !strcmp(out, "|True|False|True|False|1|"), "got [%s]", out ? out : "");
    free(out);
    out = NULL;
    json_t *notarray = json_loads("{\"role\":\"user\"}", 0, NULL);
    TCHECK(mx_template_render_chat(t, notarray, NULL, true, NULL, NULL, NULL, &out) == MX_ERR_INVALID_ARG && !out, "object accepted as messages");
    json_decref(notarray);
    json_t *badkw = json_loads("{\"messages\": []}", 0, NULL);
    TCHECK(mx_template_render_chat(t, msgs, NULL, true, NULL, NULL, badkw, &out) == MX_ERR_INVALID_ARG && !out &&
           strstr(mx_last_error(), "messages"), "kwargs overriding messages must fail");
    json_decref(badkw);
    json_decref(tools);
    json_decref(msgs);
    json_decref(kw);
    mx_template_free(t);
}

static void find_and_special_tokens(void) {
    char p[1024], *src = NULL, *bos = NULL, *eos = NULL;
    /* tokenizer_config.json string template */
    TCHECK(mx_chat_template_find(t_path(p, sizeof p, "tests/fixtures/tokenizers/llama3_1"), false, &src) == MX_OK, "%s", mx_last_error());
    TCHECK(src && strstr(src, "start_header_id"), "wrong template");
    free(src);
    src = NULL;
    TCHECK(mx_template_special_tokens(p, &bos, &eos) == MX_OK, "%s", mx_last_error());
    TCHECK(bos && !strcmp(bos, "<|begin_of_text|>") && eos && !strcmp(eos, "<|eot_id|>"), "bos/eos [%s] [%s]", bos ? bos : "", eos ? eos : "");
    free(bos); free(eos);
    /* {"content": ...} form */
    TCHECK(mx_template_special_tokens(t_path(p, sizeof p, "tests/fixtures/tokenizers/deepseek_v3"), &bos, &eos) == MX_OK, "%s", mx_last_error());
    TCHECK(bos && strstr(bos, "begin") && eos && strstr(eos, "end"), "deepseek bos/eos");
    free(bos); free(eos);
    /* null bos */
    TCHECK(mx_template_special_tokens(t_path(p, sizeof p, "tests/fixtures/tokenizers/qwen3"), &bos, &eos) == MX_OK, "%s", mx_last_error());
    TCHECK(bos == NULL && eos && !strcmp(eos, "<|im_end|>"), "qwen3 bos should be NULL");
    free(bos); free(eos);
    /* chat_template.jinja wins */
    TCHECK(mx_chat_template_find(t_path(p, sizeof p, "models/fortune-6m"), false, &src) == MX_OK, "%s", mx_last_error());
    TCHECK(src && strstr(src, "<|im_start|>"), "fortune template");
    free(src);
    src = NULL;
    /* no template */
    TCHECK(mx_chat_template_find(t_path(p, sizeof p, "tests/fixtures/tokenizers/llama2"), false, &src) == MX_ERR_IO && !src, "llama2 has no template");
    TCHECK(mx_chat_template_find(t_path(p, sizeof p, "tests/fixtures/does-not-exist"), false, &src) == MX_ERR_IO && !src, "missing dir");
}

static void named_template_list(void) {
    char dir[] = "/tmp/mlxcel-tpl-XXXXXX";
    char *made = mkdtemp(dir);
    TREQUIRE(made != NULL, "mkdtemp");
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(p, "w");
    TREQUIRE(f, "fopen");
    fputs("{\"chat_template\": [{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"tool_use\", \"template\": \"T\"}],"
          " \"bos_token\": {\"content\": \"<b>\", \"lstrip\": false}, \"eos_token\": null}", f);
    fclose(f);
    char *src = NULL, *bos = NULL, *eos = NULL;
    TCHECK(mx_chat_template_find(dir, false, &src) == MX_OK && src && !strcmp(src, "D"), "default");
    free(src); src = NULL;
    TCHECK(mx_chat_template_find(dir, true, &src) == MX_OK && src && !strcmp(src, "T"), "tool_use");
    free(src); src = NULL;
    TCHECK(mx_template_special_tokens(dir, &bos, &eos) == MX_OK && bos && !strcmp(bos, "<b>") && !eos, "tokens");
    free(bos); free(eos);
    f = fopen(p, "w");
    fputs("{\"chat_template\": [{\"name\": \"other\", \"template\": \"O\"}]}", f);
    fclose(f);
    TCHECK(mx_chat_template_find(dir, false, &src) == MX_ERR_FORMAT && !src, "no default must fail");
    TCHECK(strstr(mx_last_error(), "default") != NULL, "message [%s]", mx_last_error());
    f = fopen(p, "w");
    fputs("{\"chat_template\": ", f);
    fclose(f);
    TCHECK(mx_chat_template_find(dir, false, &src) == MX_ERR_FORMAT && !src, "bad json must fail");
    TCHECK(mx_template_special_tokens(dir, &bos, &eos) == MX_ERR_FORMAT, "bad json tokens");
    /* no chat_template key: chat_template.json (processor layout) is the fallback */
    f = fopen(p, "w");
    fputs("{\"bos_token\": \"<s>\"}", f);
    fclose(f);
    TCHECK(mx_chat_template_find(dir, false, &src) == MX_ERR_IO && !src, "no template anywhere must be MX_ERR_IO");
    char pj[512];
    snprintf(pj, sizeof pj, "%s/chat_template.json", dir);
    f = fopen(pj, "w");
    fputs("{\"chat_template\": \"P{{ messages | length }}\"}", f);
    fclose(f);
    TCHECK(mx_chat_template_find(dir, false, &src) == MX_OK && src && !strcmp(src, "P{{ messages | length }}"), "chat_template.json");
    free(src); src = NULL;
    remove(pj);
    remove(p);
    rmdir(dir);
}

static void limits_stop_runaway_templates(void) {
    mx_status st;
    char *o = render_s("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", NULL, &st);
    TCHECK(st == MX_ERR_INVALID_ARG && !o && (strstr(mx_last_error(), "step limit") || strstr(mx_last_error(), "memory")),
           "nested loops: %d %s", st, mx_last_error());
    free(o);
    /* the step limit itself, through the internal entry point with a small budget */
    mx_template *lt = NULL;
    mx_status rq_2 = mx_template_parse("{% for a in range(1000) %}{% for b in range(1000) %}{{ b }}{% endfor %}{% endfor %}", &lt);
    TREQUIRE(rq_2 == MX_OK, "parse");
    o = NULL;
    st = tpl_render_ex(lt, NULL, 100000, 64u << 20, &o);
    TCHECK(st == MX_ERR_INVALID_ARG && !o && strstr(mx_last_error(), "step limit"), "step limit: %d %s", st, mx_last_error());
    free(o);
    o = NULL;
    st = tpl_render_ex(lt, NULL, 100000000, 1u << 20, &o);
    TCHECK(st == MX_ERR_INVALID_ARG && !o && (strstr(mx_last_error(), "too large") || strstr(mx_last_error(), "memory")),
           "output limit: %d %s", st, mx_last_error());
    free(o);
    mx_template_free(lt);
    o = render_s("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &st);
    TCHECK(st == MX_ERR_INVALID_ARG && !o && strstr(mx_last_error(), "recursion"), "recursion: %s", mx_last_error());
    free(o);
    o = render_s("{{ 'x' * 100000000000 }}", NULL, &st);
    TCHECK(st == MX_ERR_INVALID_ARG && !o && strstr(mx_last_error(), "memory"), "huge string: %s", mx_last_error());
    free(o);
    /* a list containing itself prints, compares and serializes without recursing forever */
    o = render_s("{% set xs = [1] %}{% set _ = xs.append(xs) %}{{ xs | length }}{{ xs == xs }}{{ (xs | string)[:7] }}", NULL, &st);
    TCHECK(st == MX_OK && o && !strcmp(o, "2True[1, [1,"), "self-reference: %d [%s] %s", st, o ? o : "", mx_last_error());
    free(o);
    o = render_s("{% set xs = [] %}{% set _ = xs.append(xs) %}{{ xs | tojson }}", NULL, &st);
    TCHECK(st == MX_ERR_INVALID_ARG && !o, "self-referential tojson must fail");
    free(o);
    /* deep nesting is a syntax error, not a stack overflow */
    char deep[4000];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    mx_template *t = NULL;
    TCHECK(mx_template_parse(deep, &t) == MX_ERR_FORMAT && !t, "deep nesting must fail cleanly");
    mx_template_free(t);
}

struct thr { const mx_template *t; json_t *msgs; char *out; mx_status st; };
static void *thr_main(void *p) {
    struct thr *a = p;
    for (int i = 0; i < 50; i++) {
        free(a->out);
        a->out = NULL;
        a->st = mx_template_render_chat(a->t, a->msgs, NULL, true, "<s>", "</s>", NULL, &a->out);
        if (a->st != MX_OK) break;
    }
    return NULL;
}

static void concurrent_renders_agree(void) {
    mx_template *t = NULL;
    mx_status rq_3 = mx_template_parse("{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                               "[{{ m.role | upper }}:{{ m.content | trim }}]{% endfor %}{{ ns.n }}", &t);
    TREQUIRE(rq_3 == MX_OK, "%s", mx_last_error());
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\" a \"},{\"role\":\"assistant\",\"content\":\"b\"}]", 0, NULL);
    struct thr a[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) { a[i].t = t; a[i].msgs = msgs; a[i].out = NULL; a[i].st = MX_OK; pthread_create(&th[i], NULL, thr_main, &a[i]); }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        TCHECK(a[i].st == MX_OK && a[i].out && !strcmp(a[i].out, "<s>[USER:a][ASSISTANT:b]2"), "thread %d: [%s]", i, a[i].out ? a[i].out : "");
        free(a[i].out);
    }
    json_decref(msgs);
    mx_template_free(t);
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        char name[128];
        snprintf(name, sizeof name, "template_%s", CASES[i].name);
        RUN_NAMED(name, run_case, &CASES[i]);
    }
    for (size_t i = 0; i < sizeof SYNTAX / sizeof *SYNTAX; i++) {
        char name[128];
        snprintf(name, sizeof name, "template_%s", SYNTAX[i].name);
        RUN_NAMED(name, run_syntax, &SYNTAX[i]);
    }
    RUN(syntax_error_line_number);
    RUN(runtime_error_line_number);
    RUN(raise_exception_message_verbatim);
    RUN(render_chat_variables);
    RUN(find_and_special_tokens);
    RUN(named_template_list);
    RUN(limits_stop_runaway_templates);
    RUN(concurrent_renders_agree);
    TEST_EXIT();
}
