// Hand-written templates that exercise the engine's features one family at a time
// (expressions, statements, filters, macros, strings, whitespace control, errors, a tool schema).

export const FEATURES_EXPRESSIONS = String.raw`{%- set xs = [3, 1, 2] -%}
literals: {{ 42 }} {{ -7 }} {{ 1.5 }} {{ 2.0 }} {{ 'str' }} {{ "dq" }} {{ true }} {{ false }} {{ none }} {{ True }}|
arith: {{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 / 2 }} {{ 8 / 4 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 + 0.5 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }}|
concat: {{ 'a' ~ 1 ~ 'b' }} {{ 'x' + 'y' }} {{ [1, 2] + [3] }} {{ 'n' ~ true }}|
compare: {{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' == 'a' }} {{ 1 != 1 }} {{ 3 > 2 and 2 > 1 }} {{ not false or false }} {{ 1 == 1.0 }} {{ not 1 == 2 }}|
logic: {{ 0 or 'fallback' }} {{ 'x' and 'y' }} {{ [] or 'empty-list' }} {{ none or 'none-or' }}|
membership: {{ 'ell' in 'hello' }} {{ 2 in xs }} {{ 5 not in xs }} {{ 'k' in {'k': 1} }} {{ 'z' not in {'k': 1} }}|
ternary: {{ 'yes' if xs else 'no' }} {{ 'a' if false else 'b' if true else 'c' }} [{{ 'shown' if false }}]|
index: {{ xs[0] }} {{ xs[-1] }} {{ 'hello'[1] }} {{ 'hello'[-1] }} {{ data.nested.list[1] }} {{ data['nested']['key'] }} {{ data.nested['list'][-1] }} [{{ xs[10] }}]|
slices: {{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[::-1] }} {{ xs[-2:] }} {{ 'héllo'[1:3] }} {{ xs[:-1] }}|
tests: {{ undefined_var is defined }} {{ xs is defined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ data is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ true is true }} {{ false is false }} {{ 1 is not string }} {{ 3 is odd }} {{ 4 is even }} {{ xs is mapping }} {{ 'ABC' is upper }}|
undefined: [{{ undefined_var }}] {{ 'u' if not undefined_var else 'd' }} {{ undefined_var is undefined }} [{{ data.missing }}] [{{ data.missing.deeper }}]|
print: {{ xs }} {{ data.nested }} {{ [1, 'a', none, true] }}|
dict literal: {{ {'b': 1, 'a': [1, 2]} }} {{ {'k': 'v'}['k'] }}|
escapes: {{ 'tab\there' }} {{ "dq 'single' inside" }} {{ 'sq "double" inside' }} {{ 'esc \' quote' }} {{ '\u00e9\x41' }} {{ 'adjacent' 'strings' }}|
`;

export const FEATURES_STATEMENTS = String.raw`{#- comment at top -#}
{%- set ns = namespace(count=0, last_role='') -%}
{%- for m in messages -%}
  {%- set ns.count = ns.count + 1 -%}
  {%- set ns.last_role = m.role -%}
  [{{ loop.index }}/{{ loop.length }} i0={{ loop.index0 }} rev={{ loop.revindex }} rev0={{ loop.revindex0 }} first={{ loop.first }} last={{ loop.last }}{% if not loop.first %} prev={{ loop.previtem.role }}{% endif %}{% if not loop.last %} next={{ loop.nextitem.role }}{% endif %}] {{ m.role }}: {{ m.content }}
{% endfor -%}
count={{ ns.count }} last_role={{ ns.last_role }}
{% for k, v in config.items() -%}
{{ k }}={{ v }};
{%- endfor %}
{% for k in config -%}{{ k }},{%- endfor %}
{% for x in [] %}never{% else %}empty-else{% endfor %}
{% for x in [1, 2, 3, 4, 5, 6] if x is odd %}{{ x }}{{ loop.index }}{% endfor %}
{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}
{% for a, b in [[1, 'one'], [2, 'two']] %}{{ a }}:{{ b }} {% endfor %}
{% for i in range(2) %}{% for j in range(2) %}({{ loop.index }},{{ i }},{{ j }}){% endfor %}{{ loop.index }}{% endfor %}
{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}
{% set block %}
  inside block {{ 1 + 1 }}
{% endset %}
[{{ block }}]
{% if false %}no{% elif 1 == 2 %}no{% elif config %}elif-hit{% else %}no{% endif %}
{% if messages[0]['role'] == 'system' %}sys-first{% else %}not-sys-first{% endif %}
  {% if true %}lstrip-ok{% endif %}
{% for x in range(3, 0, -1) %}{{ x }}{% endfor %} {% for x in range(0, 10, 3) %}{{ x }}{% endfor %}
{% set a, b = 1, 2 %}{{ a }}{{ b }}
{% for m in messages %}{% set inner = m.role %}{% endfor %}[{{ inner }}]
{% if true %}{% set leaked = 'if-sets-leak' %}{% endif %}{{ leaked }}
`;

export const FEATURES_FILTERS = String.raw`{%- set people = [{'name': 'bob', 'age': 30, 'role': 'user'}, {'name': 'alice', 'age': 25, 'role': 'admin'}, {'name': 'Carol', 'age': 35, 'role': 'user'}] -%}
trim=[{{ '  x y  ' | trim }}] upper={{ 'abc' | upper }} lower={{ 'ABC' | lower }} title={{ 'hello world' | title }} cap={{ 'hello' | capitalize }}
length={{ people | length }} {{ 'héllo' | length }} {{ {'a': 1} | length }} {{ '' | length }}
join={{ ['a', 'b', 'c'] | join(', ') }} {{ ['x', 'y'] | join }} {{ [1, 2] | join('-') }}
first={{ people | first | tojson }} last={{ (people | last).name }}
default=[{{ missing | default('dflt') }}] [{{ '' | default('empty', true) }}] [{{ 'set' | default('x') }}] [{{ none | default('not-for-none') }}]
replace={{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }}
string={{ 42 | string }} {{ [1, 2] | string }} {{ 'already' | string }}
int={{ '42' | int }} {{ 3.7 | int }} {{ 'x' | int }} {{ '12abc' | int }} float={{ '2.5' | float }} {{ 3 | float }} {{ 'nan-ish' | float }}
abs={{ -5 | abs }} {{ -2.5 | abs }}
items={% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %}
dictsort={% for k, v in {'b': 1, 'a': 2, 'C': 3} | dictsort %}{{ k }}{{ v }}{% endfor %}
selectattr={{ people | selectattr('role', 'equalto', 'user') | map(attribute='name') | join(',') }}
rejectattr={{ people | rejectattr('role', 'equalto', 'user') | map(attribute='name') | join(',') }}
selectattr-truthy={{ people | selectattr('age') | list | length }}
map={{ people | map(attribute='age') | list }} {{ people | map(attribute='missing', default='?') | list }}
sort={{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ people | sort(attribute='age') | map(attribute='name') | join(',') }} {{ [1, 3, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}
unique={{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'b', 'a'] | unique | join }}
reverse={{ [1, 2, 3] | reverse | list }}
indent={{ 'a\nb\n\nc' | indent(2) }} / {{ 'a\nb' | indent(4, true) }} / {{ 'a\n\nb' | indent(first=true, blank=true) }} / {{ 'x\ny' | indent }}
tojson={{ people[0] | tojson }} {{ people[0] | tojson(indent=2) }} {{ 'quote " and \\ and é\n' | tojson }} {{ {'z': 1, 'a': [1, {'b': none}], 'e': {}, 'l': []} | tojson(indent=4) }} {{ 'é' | tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ [1, 2] | tojson(separators=[',', ':']) }} {{ 0.25 | tojson }} {{ none | tojson }}
safe={{ '<b>' | safe }}
chain={{ '  Mixed Case  ' | trim | lower | replace(' ', '_') }}
count-of-tools={{ tools | length }} names={{ tools | map(attribute='function.name') | join(' ') }}
{% filter upper %}block filter {{ 'text' }}{% endfilter %} {% filter replace('a', 'o') %}banana{% endfilter %}
`;

export const FEATURES_MACROS = String.raw`{%- macro greet(name, greeting='Hello', punct='!') -%}
{{ greeting }}, {{ name }}{{ punct }}
{%- endmacro -%}
{%- macro wrap(tag) -%}<{{ tag }}>{{ caller() }}</{{ tag }}>{%- endmacro -%}
{%- macro row(item) -%}{{ item.name }}({{ item.age }}){%- endmacro -%}
{%- macro fact(n) -%}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{%- endmacro -%}
{{ greet('World') }} {{ greet('Bob', greeting='Hi') }} {{ greet('Eve', 'Hey', '?') }} {{ greet(name='Kw') }}
{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}
{% for p in people %}{{ row(p) }}{{ ', ' if not loop.last }}{% endfor %}
{{ fact(5) }}
{%- set shout = greet('loud') | upper %}
{{ shout }}
`;

export const FEATURES_STRINGS = String.raw`{%- set s = '  Hello, World  ' -%}
[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }}
{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ 'no-sep'.split('|') }}
{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}
{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }}
{{ '\n\nthink\n\n'.strip('\n') }}|{{ '\nx\n'.lstrip('\n') }}|{{ '\nx\n'.rstrip('\n') }}|
{{ 'héllo wörld'.upper() }} {{ 'ÀÉÎ'.lower() }} {{ 'abc'.length }}
{{ messages[0].content.split(' ')[0] }} {{ messages[0]['content'] | upper }}
`;

export const FEATURES_WHITESPACE = `Line one
  {%- if true %} no-left-space{% endif %}
{% if true -%}
   stripped-right
{%- endif %}
{{- '  expr-strip' -}}
   after
{#- comment strips -#}
   tail
{% for i in range(2) %}
    item {{ i }}
{% endfor %}
  {# an indented comment #}
text {{ 'a' }}   {{ 'b' -}}   {{ 'c' }}
{%- generation %}gen-content{% endgeneration -%}
 [{% generation %} spaced {% endgeneration %}]
ends with a newline
`;

export const FEATURES_ERRORS = String.raw`{%- for m in messages -%}
{%- if m.role not in ['system', 'user', 'assistant'] -%}
{{ raise_exception('Unknown role: ' + m.role) }}
{%- endif -%}
{{ m.role }};
{%- endfor -%}`;

// Tool schemas rendered as Python signatures: recursive macros, `| items` loops with a filter,
// membership tests, indent(first=true), tojson(indent) | indent.
export const FEATURES_TOOL_SCHEMA = String.raw`{%- macro py_type(spec) -%}
{%- set simple = {'string': 'str', 'integer': 'int', 'number': 'float', 'boolean': 'bool'} -%}
{%- if spec.enum is defined -%}
Literal[{% for v in spec.enum %}{{ v | tojson }}{{ ', ' if not loop.last }}{% endfor %}]
{%- elif spec.type == 'array' -%}
list[{{ py_type(spec['items']) }}]
{%- elif spec.type == 'object' -%}
dict[str, {{ py_type(spec.additionalProperties) if spec.additionalProperties is mapping else 'Any' }}]
{%- elif spec.type is string and spec.type in simple -%}
{{ simple[spec.type] }}
{%- else -%}
Any
{%- endif -%}
{%- endmacro -%}
{%- macro signature(fn) -%}
def {{ fn.name }}(
{%- for name, spec in fn.parameters.properties | items -%}
{{ name }}: {{ py_type(spec) if name in fn.parameters.required else 'Optional[' ~ py_type(spec) ~ '] = None' }}{{ ', ' if not loop.last }}
{%- endfor -%}
):
    """{{ fn.description | trim }}
{%- for name, spec in fn.parameters.properties | items if spec.description is defined %}
{{ ('- ' ~ name ~ ': ' ~ spec.description) | indent(4, true) }}
{%- endfor %}
    """
{%- endmacro -%}
{%- for tool in tools -%}
{{ signature(tool.function if tool.function is defined else tool) }}
{% if not loop.last %}

{% endif -%}
{%- endfor -%}
{%- for m in messages if m.tool_calls is defined -%}
{%- for call in m.tool_calls -%}
CALL {{ call.function.name }}
{{ call.function.arguments | tojson(indent=2) | indent(2, first=true) }}
{% endfor -%}
{%- endfor -%}`;
