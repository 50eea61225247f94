// The reference renderer (@huggingface/jinja, loaded by the entry from the chosen node_modules)
// and the fixture writer: every case rendered by the reference, the file written to outDir.
import fs from "node:fs";
import path from "node:path";

// Patches Environment once (raise_exception), then returns render and fixture bound to the
// reference's Template, its name (REFERENCE, stored in every fixture) and the output folder.
export function makeReference({ Template, Environment, REFERENCE, outDir }) {
  // Errors thrown by the template's raise_exception(msg), told apart from the reference's own
  // runtime errors: the C++ engine must reproduce the former's message exactly.
  class RaiseError extends Error {}
  const originalSet = Environment.prototype.set;
  Environment.prototype.set = function (name, value) {
    if (name === "raise_exception") {
      value = (msg) => {
        throw new RaiseError(msg);
      };
    }
    return originalSet.call(this, name, value);
  };

  function render(template, context) {
    const ctx = JSON.parse(JSON.stringify(context)); // what the fixture stores is what was rendered
    try {
      return { context: ctx, expected: new Template(template).render(ctx) };
    } catch (e) {
      return { context: ctx, error: e.message, error_is_raise: e instanceof RaiseError };
    }
  }

  function fixture(name, source, template, bos, eos, cases) {
    new Template(template); // the reference must parse it
    const out = { name, source, reference: REFERENCE, bos_token: bos, eos_token: eos, template, cases: [] };
    for (const [caseName, ctx] of cases) {
      const full = { bos_token: bos, eos_token: eos, ...ctx };
      out.cases.push({ name: caseName, ...render(template, full) });
    }
    fs.mkdirSync(outDir, { recursive: true });
    fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(out, null, 1) + "\n");
    const errors = out.cases.filter((c) => "error" in c).length;
    console.log(`${name}: ${out.cases.length} cases (${errors} errors) from ${source}`);
  }
  return { render, fixture };
}
