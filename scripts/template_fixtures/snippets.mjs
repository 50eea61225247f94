// Expression snippets: a cross product of values and operators, filters, tests and string
// methods, rendered by the reference (snippets.json).
import fs from "node:fs";
import path from "node:path";

// Where Tandem follows Python Jinja2 on purpose instead of a JavaScript coercion of the reference;
// such snippets are left out of the fixture (and tested in C++ where they matter).
const DIVERGENT = [
  ["containers concatenated or joined into strings print as JSON, not JS join/[object Map]", (s, a, op, b) =>
    ((op === "~" || op === "+") && [a, b].some((v) => /^[[{]|ctx_[lo]/.test(v))) || (a === "ctx_l" && /join/.test(s))],
  ["== is Python equality (no JS loose coercion; lists and dicts by value)", (s, a, op, b) =>
    (op === "==" || op === "!=") && (kind(a) !== kind(b) || ["list", "dict"].includes(kind(a)))],
  ["% follows the sign of the divisor (Python)", (s, a, op, b) => op === "%" && (a.startsWith("-") || b.startsWith("-"))],
  ["division by zero is an error, not Infinity/NaN", (s, a, op, b) => ["/", "//", "%"].includes(op) && b === "0"],
  ["true == 1 also for `in`", (s, a, op, b) => (op === "in" || op === "not in") && kind(a) === "bool"],
  ["float ** float may differ in the last digit (C pow vs V8)", (s, a, op, b) => op === "**" && (kind(a) === "float" || kind(b) === "float")],
  ["|int(d) / |float(d) convert numbers too (the reference returns them unchanged)", (s) => /\| (int|float)\(/.test(s)],
  ["title/capitalize lower the rest of each word (Python)", (s) => /title|capitalize/.test(s) && /ctx_s|Hi There|héllo/.test(s)],
];
function kind(v) {
  if (/^-?\d+$/.test(v)) return "num";
  if (/^-?\d+\.\d+$/.test(v) || v === "ctx_f") return "float";
  if (v.startsWith("'") || v === "ctx_s") return "str";
  if (v.startsWith("[") || v === "ctx_l") return "list";
  if (v.startsWith("{") || v === "ctx_o") return "dict";
  if (v === "true" || v === "false") return "bool";
  return v; // none, nope (undefined)
}

export function snippetsFixture({ render, REFERENCE, outDir }) {
  const vals = ["0", "1", "-1", "2.5", "7", "'a'", "''", "'abc'", "[]", "[1, 2]", "{}", "{'a': 1}", "none", "true", "false", "nope", "ctx_s", "ctx_f", "ctx_l", "ctx_o"];
  const ops = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"];
  const filters = ["length", "upper", "lower", "trim", "first", "last", "string", "int", "float", "abs", "list", "tojson", "join", "reverse", "sort", "unique", "items", "title", "capitalize", "safe", "default('D')", "join(',')", "tojson(indent=2)", "int(5)", "float(1.5)", "replace('a', 'x')", "indent(2)", "selectattr('a')", "map(attribute='a')", "dictsort", "sort(reverse=true)", "default('D', true)", "string | length"];
  const tests = ["defined", "undefined", "none", "string", "number", "integer", "iterable", "mapping", "sequence", "boolean", "true", "false", "odd", "even", "callable", "lower", "upper"];
  const strs = ["'  Hi There  '", "'a,b,,c'", "'héllo'", "'x\\ny'", "ctx_s"];
  const methods = ["strip()", "lstrip()", "rstrip()", "upper()", "lower()", "title()", "capitalize()", "split()", "split(',')", "split(',', 1)", "startswith('a')", "endswith('c')", "replace('l', 'L')", "replace('l', 'L', 1)", "split('x')", "startswith(('x', ' '))"];
  const snippets = [];
  for (const a of vals) for (const op of ops) for (const b of vals) snippets.push([`{{ ${a} ${op} ${b} }}`, a, op, b]);
  for (const a of vals) for (const f of filters) snippets.push([`{{ ${a} | ${f} }}`, a, "|", f]);
  for (const a of vals) {
    for (const t of tests) snippets.push([`{{ ${a} is ${t} }}`, a, "is", t], [`{{ ${a} is not ${t} }}`, a, "is", t]);
    for (const e of ["{{ X }}", "{{ not X }}", "{{ -X }}", "{{ X[0] }}", "{{ X[-1] }}", "{{ X[1:] }}", "{{ X[::-1] }}", "{{ X.a }}", "{{ X['a'] }}", "{% for x in X %}[{{ x }}]{% else %}E{% endfor %}", "{{ 'y' if X else 'n' }}", "{{ X.length }}", "{% if X %}T{% endif %}"]) {
      snippets.push([e.replaceAll("X", a), a, "", ""]);
    }
  }
  for (const s of strs) for (const m of methods) snippets.push([`{{ ${s}.${m} }}`, s, ".", m]);
  const context = { ctx_s: "Some String", ctx_f: 1.25, ctx_l: [{ a: 1, b: "x" }, { a: 0, b: "y" }], ctx_o: { z: 1, a: [1, 2] } };
  const cases = [];
  const skipped = new Map();
  for (const [template, a, op, b] of snippets) {
    const rule = DIVERGENT.find(([, pred]) => pred(template, a, op, b));
    if (rule) {
      skipped.set(rule[0], (skipped.get(rule[0]) ?? 0) + 1);
      continue;
    }
    const r = render(template, context);
    if ("error" in r) continue; // the reference rejects it; Tandem is often more lenient (Python)
    cases.push({ template, expected: r.expected });
  }
  const out = { name: "snippets", source: "hand-written: expression cross product", reference: REFERENCE, bos_token: "", eos_token: "", template: null, context, cases };
  fs.writeFileSync(path.join(outDir, "snippets.json"), JSON.stringify(out).replaceAll('},{"template"', '},\n{"template"') + "\n");
  console.log(`snippets: ${cases.length} cases; left out as deliberate divergences:`);
  for (const [reason, n] of skipped) console.log(`  ${n} ${reason}`);
}
