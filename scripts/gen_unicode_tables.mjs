// Writes the Unicode tables the C++ tokenizer uses (general category, canonical combining class,
// decompositions, compositions, lowercase) from this Node's ICU, so that the C++ side sees
// exactly the Unicode version of the JS reference tokenizer. Deterministic:
//
//   node scripts/gen_unicode_tables.mjs engine/tokenizer/unicode_data.cpp
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..");

// ---------------------------------------------------------------------------------------------
// Unicode tables
// ---------------------------------------------------------------------------------------------

// Order must match enum class Gc in engine/tokenizer/unicode.h.
const GC_NAMES = [
  "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
  "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co",
];

// One non-decomposing code point per canonical combining class value (ccc values are stable
// across Unicode versions); the ccc of every other mark is found by canonical-reordering tests
// against these, so no UnicodeData.txt is needed.
const CCC_REPRESENTATIVES = [
  [1, 0x334], [6, 0x16ff0], [7, 0x93c], [8, 0x3099], [9, 0x94d], [10, 0x5b0], [11, 0x5b1],
  [12, 0x5b2], [13, 0x5b3], [14, 0x5b4], [15, 0x5b5], [16, 0x5b6], [17, 0x5b7], [18, 0x5b8],
  [19, 0x5b9], [20, 0x5bb], [21, 0x5bc], [22, 0x5bd], [23, 0x5bf], [24, 0x5c1], [25, 0x5c2],
  [26, 0xfb1e], [27, 0x64b], [28, 0x64c], [29, 0x64d], [30, 0x618], [31, 0x619], [32, 0x61a],
  [33, 0x651], [34, 0x652], [35, 0x670], [36, 0x711], [84, 0xc55], [91, 0xc56], [103, 0xe38],
  [107, 0xe48], [118, 0xeb8], [122, 0xec8], [129, 0xf71], [130, 0xf72], [132, 0xf74],
  [202, 0x321], [214, 0x1dce], [216, 0x31b], [218, 0x1dfa], [220, 0x316], [222, 0x59a],
  [224, 0x302e], [226, 0x1d16d], [228, 0x5ae], [230, 0x300], [232, 0x315], [233, 0x35c],
  [234, 0x35d], [240, 0x345],
];

const cps = (s) => Array.from(s, (c) => c.codePointAt(0));
const str = (...a) => String.fromCodePoint(...a);
const isHangulSyllable = (cp) => cp >= 0xac00 && cp <= 0xd7a3;

function generalCategories() {
  const res = GC_NAMES.map((n) => new RegExp(`^\\p{gc=${n}}$`, "u"));
  // Test the common categories first.
  const order = [2, 5, 1, 6, 0, 9, 18, 22, 19, 11, 7, 4, 26, 27, 23, 13, 14, 15, 21, 20, 10, 3,
    8, 12, 16, 17, 24, 25, 28, 29];
  const out = new Uint8Array(0x110000);
  for (let cp = 0; cp < 0x110000; ++cp) {
    const s = str(cp);
    let found = -1;
    for (const i of order) {
      if (res[i].test(s)) {
        found = i;
        break;
      }
    }
    if (found < 0) throw new Error(`no general category for U+${cp.toString(16)}`);
    out[cp] = found;
  }
  return out;
}

function combiningClasses(gc) {
  const out = new Uint8Array(0x110000);
  const reps = CCC_REPRESENTATIVES.map(([v, cp]) => [v, str(cp)]);
  const mn = GC_NAMES.indexOf("Mn");
  const mc = GC_NAMES.indexOf("Mc");
  for (let cp = 0; cp < 0x110000; ++cp) {
    if (gc[cp] !== mn && gc[cp] !== mc) continue;
    const m = str(cp);
    if (m.normalize("NFD") !== m) continue;  // decomposes: its own ccc is never consulted
    let reorders = false;
    let equal = [];
    for (const [v, r] of reps) {
      const after = ("a" + m + r).normalize("NFD") !== "a" + m + r;  // ccc(m) > v
      const before = ("a" + r + m).normalize("NFD") !== "a" + r + m;  // v > ccc(m)
      if (after || before) reorders = true;
      else equal.push(v);
    }
    if (!reorders) continue;  // a starter (ccc 0)
    if (equal.length !== 1) throw new Error(`ambiguous ccc for U+${cp.toString(16)}: ${equal}`);
    out[cp] = equal[0];
  }
  for (const [v, cp] of CCC_REPRESENTATIVES) out[cp] = v;
  return out;
}

function decompositions(form) {
  const out = [];  // [cp, [cps...]]
  for (let cp = 0; cp < 0x110000; ++cp) {
    if ((cp >= 0xd800 && cp <= 0xdfff) || isHangulSyllable(cp)) continue;
    const s = str(cp);
    const d = s.normalize(form);
    if (form === "NFKD" && d === s.normalize("NFD")) continue;  // only the compat differences
    if (d !== s) out.push([cp, cps(d)]);
  }
  return out;
}

function compositions(canon) {
  const pairs = [];
  for (const [cp, d] of canon) {
    const s = str(cp);
    if (s.normalize("NFC") !== s || d.length < 2) continue;  // excluded or singleton
    const head = str(...d.slice(0, -1)).normalize("NFC");
    const a = cps(head);
    const b = d[d.length - 1];
    if (a.length !== 1 || str(a[0], b).normalize("NFC") !== s) {
      throw new Error(`cannot derive the composition pair of U+${cp.toString(16)}`);
    }
    pairs.push([a[0], b, cp]);
  }
  pairs.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  return pairs;
}

function lowercase() {
  const out = [];
  for (let cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const s = str(cp);
    const l = s.toLowerCase();
    if (l !== s) out.push([cp, cps(l)]);
  }
  return out;
}

function ranges(values) {
  const out = [];
  for (let cp = 0; cp < values.length; ++cp) {
    if (cp === 0 || values[cp] !== values[cp - 1]) out.push((cp << 8) | values[cp]);
  }
  return out;
}

function cArray(type, name, values, perLine = 10) {
  const lines = [];
  for (let i = 0; i < values.length; i += perLine) {
    lines.push("    " + values.slice(i, i + perLine).map((v) => `${v}u`).join(", ") + ",");
  }
  return `extern const ${type} ${name}[] = {\n${lines.join("\n")}\n};\n` +
    `extern const size_t ${name}Size = ${values.length};\n`;
}

function mappingArrays(prefix, entries) {
  const index = [];
  const data = [];
  for (const [cp, d] of entries) {
    index.push(cp, data.length, d.length);
    data.push(...d);
  }
  return cArray("uint32_t", `${prefix}Index`, index, 9) + cArray("uint32_t", `${prefix}Data`, data);
}

function writeUnicodeTables(outPath) {
  const gc = generalCategories();
  const ccc = combiningClasses(gc);
  const canon = decompositions("NFD");
  const compat = decompositions("NFKD");
  const comp = compositions(canon);
  const lower = lowercase();
  const header =
    `// Unicode ${process.versions.unicode} tables for engine/tokenizer/unicode.cpp. GENERATED by\n` +
    `// \`node scripts/gen_unicode_tables.mjs engine/tokenizer/unicode_data.cpp\`\n` +
    `// from Node ${process.version} (ICU ${process.versions.icu}); do not edit by hand.\n` +
    `// Range tables pack (first_code_point << 8) | value; mapping tables are (cp, offset, length)\n` +
    `// triples into a data array; compositions are (first, second, composite) triples.\n` +
    `// clang-format off\n` +
    `#include "engine/tokenizer/unicode_data.h"\n\nnamespace tandem::unicode_data {\n\n`;
  const body = [
    cArray("uint32_t", "kGeneralCategoryRanges", ranges(gc)),
    cArray("uint32_t", "kCombiningClassRanges", ranges(ccc)),
    mappingArrays("kCanonicalDecomposition", canon),
    mappingArrays("kCompatDecomposition", compat),
    cArray("uint32_t", "kCompositions", comp.flat(), 9),
    mappingArrays("kLowercase", lower),
  ].join("\n");
  fs.writeFileSync(
    outPath,
    header + body + `\nextern const char kUnicodeVersion[] = "${process.versions.unicode}";\n\n` +
      `}  // namespace tandem::unicode_data\n// clang-format on\n`);
  console.log(`wrote ${outPath}: ${ranges(gc).length} category ranges, ${canon.length} canonical ` +
    `and ${compat.length} compat decompositions, ${comp.length} compositions, ` +
    `${lower.length} lowercase mappings`);
}

writeUnicodeTables(
  path.resolve(process.argv[2] ?? path.join(REPO, "engine/tokenizer/unicode_data.cpp")));
