// The official OpenAI Node SDK against a running `tandem serve`: chat and completions, streaming
// and not, n > 1, usage, and the SDK's typed errors. Run by tests/test_server_e2e_api.cpp:
//   TANDEM_BASE_URL=http://127.0.0.1:PORT/v1 TANDEM_API_KEY=KEY TANDEM_MODEL=NAME \
//     node tests/sdk/openai_sdk_test.mjs
// (after `npm ci --prefix tests/sdk`). Exits non-zero on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { baseURL, check, client, model } from './check.mjs';

const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];

await check('models.list', async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  assert.ok(ids.includes(model), `models: ${ids}`);
});

let chatText = '';
await check('chat, not streaming', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  chatText = r.choices[0].message.content;
});

await check('chat, streaming with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 16, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let finish = null;
  let usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(ids.size, 1);
  assert.equal(role, 'assistant');
  assert.ok(finish);
  assert.equal(text, chatText);
  assert.ok(usage && usage.completion_tokens > 0);
});

await check('chat, n=2 with logprobs', async () => {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, n: 2, logprobs: true, top_logprobs: 2,
  });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    for (const lp of c.logprobs.content) {
      assert.ok(lp.logprob <= 0);
      assert.equal(lp.top_logprobs.length, 2);
    }
  }
});

let completionText = '';
await check('completions, not streaming', async () => {
  const r = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0,
  });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.choices[0].text.length > 0);
  completionText = r.choices[0].text;
});

await check('completions, streaming', async () => {
  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stream: true,
  });
  let text = '';
  for await (const chunk of stream) for (const c of chunk.choices) text += c.text;
  assert.equal(text, completionText);
});

await check('bad request is a BadRequestError with param', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages, temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
  );
});

await check('wrong key is an AuthenticationError', async () => {
  const other = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(other.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

await check('unknown model is a NotFoundError', async () => {
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }),
    (e) => e instanceof OpenAI.NotFoundError,
  );
});

console.log('all SDK checks passed');
