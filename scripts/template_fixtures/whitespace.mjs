// Random whitespace-control templates (whitespace_random.json).
import fs from "node:fs";
import path from "node:path";

// Nested if/for/set/comment/generation tags with random `-` markers between random whitespace:
// exercises trim_blocks, lstrip_blocks and the strip markers the way the reference applies them.
export function whitespaceFixture({ render, REFERENCE, outDir }, count) {
  let seed = 12345; // deterministic LCG
  const rnd = (n) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const pick = (a) => a[rnd(a.length)];
  const texts = ["", " ", "  ", "\n", " \n", "\n  ", "\t", "a", "b c", "\n\n", " x \n ", "\r\n", "  \t\n"];
  const open = () => pick(["{%", "{%-"]);
  const close = () => pick(["%}", "-%}"]);
  const block = (depth) => {
    let out = "";
    for (let i = 1 + rnd(4); i > 0; i--) {
      out += pick(texts);
      const k = rnd(depth > 2 ? 4 : 8);
      if (k === 0) out += `${pick(["{{", "{{-"])} ${pick(["'v'", "x", "1 + 1", "'{{'", "'%}\\n'", "s"])} ${pick(["}}", "-}}"])}`;
      else if (k === 1) out += pick(["{# c #}", "{#- c -#}", "{#- c #}", "{# c -#}"]);
      else if (k === 2) out += `${open()} set y = ${pick(["1", "'a'"])} ${close()}`;
      else if (k === 3) out += pick(["{% generation %}", "{%- generation -%}", "{% endgeneration %}", "{%- endgeneration %}", "{% generation -%}"]);
      else if (k < 6) {
        const orElse = rnd(2) ? `${open()} else ${close()}${block(depth + 1)}` : "";
        out += `${open()} if ${pick(["true", "false", "x"])} ${close()}${block(depth + 1)}${orElse}${open()} endif ${close()}`;
      } else {
        out += `${open()} for i in ${pick(["[1, 2]", "[]", "range(3)"])} ${close()}${block(depth + 1)}${open()} endfor ${close()}`;
      }
      out += pick(texts);
    }
    return out;
  };
  const context = { x: "X", s: " S " };
  const cases = [];
  for (let i = 0; i < count; i++) {
    const template = block(0) + pick(["", "\n", "\n\n", " "]);
    const r = render(template, context);
    if (!("error" in r)) cases.push({ template, expected: r.expected });
  }
  const out = { name: "whitespace_random", source: "generated: random whitespace control", reference: REFERENCE, bos_token: "", eos_token: "", template: null, context, cases };
  fs.writeFileSync(path.join(outDir, "whitespace_random.json"), JSON.stringify(out).replaceAll('},{"template"', '},\n{"template"') + "\n");
  console.log(`whitespace_random: ${cases.length} cases`);
}
