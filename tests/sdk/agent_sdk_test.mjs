// What agent clients need, through the official OpenAI Node SDK against a running `tandem serve`:
// structured outputs through the SDK's own parse helper with a zod schema, json_schema output
// validated by ajv (an independent validator) over seeded samples, forced tool calls (named and
// required, streamed and not), the tool-result round trip, logit_bias, and the routes next to
// the API (/tokenize, /detokenize, /v1/models/{id}). Run by tests/test_server_e2e_api.cpp:
//   TANDEM_BASE_URL=http://127.0.0.1:PORT/v1 TANDEM_API_KEY=KEY TANDEM_MODEL=NAME \
//     node tests/sdk/agent_sdk_test.mjs
// (after `npm ci --prefix tests/sdk`). Exits non-zero on the first failure. The model may write
// nonsense (the bundled ones write Python): the grammar alone must make every output valid.
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

import { apiKey, baseURL, check, client, model } from './check.mjs';

const root = baseURL.replace(/\/v1\/?$/, '');
const ajv = new Ajv({ strict: false });

async function post(path, body) {
  const r = await fetch(root + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return r.json();
}

const messages = [{ role: 'user', content: 'Describe the weather as JSON.' }];

const Weather = z.object({
  city: z.string().max(12),
  unit: z.enum(['celsius', 'fahrenheit']),
  temperature: z.number().int().min(-60).max(60),
  hourly: z.array(z.number().int().min(0).max(99)).max(3),
  windy: z.boolean().nullable(),
});

await check('structured output through chat.completions.parse with a zod schema', async () => {
  const format = zodResponseFormat(Weather, 'weather');
  const validate = ajv.compile(format.json_schema.schema);
  for (let seed = 0; seed < 8; ++seed) {
    const r = await client.chat.completions.parse({
      model, messages, response_format: format, max_tokens: 300, temperature: 1, seed,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', c.message.content);
    assert.ok(c.message.parsed, c.message.content);
    assert.ok(validate(JSON.parse(c.message.content)), JSON.stringify(validate.errors));
  }
});

await check('json_schema: ajv validates every seeded sample, streamed and not', async () => {
  const schema = {
    type: 'object',
    properties: {
      id: { type: 'integer', minimum: 1, maximum: 999 },
      tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 2 },
      owner: { $ref: '#/$defs/person' },
      score: { anyOf: [{ type: 'number' }, { type: 'null' }] },
    },
    required: ['id', 'tags', 'owner', 'score'],
    additionalProperties: false,
    $defs: {
      person: {
        type: 'object',
        properties: { name: { type: 'string', maxLength: 8 }, admin: { type: 'boolean' } },
        required: ['name', 'admin'],
        additionalProperties: false,
      },
    },
  };
  const validate = ajv.compile(schema);
  const response_format = { type: 'json_schema', json_schema: { name: 'rec', schema, strict: true } };
  for (let seed = 0; seed < 6; ++seed) {
    const stream = seed % 2 === 1;
    const args = { model, messages, response_format, max_tokens: 300, temperature: 1, seed };
    let text = '';
    if (stream) {
      for await (const chunk of await client.chat.completions.create({ ...args, stream }))
        for (const c of chunk.choices) text += c.delta?.content ?? '';
    } else {
      text = (await client.chat.completions.create(args)).choices[0].message.content;
    }
    assert.ok(validate(JSON.parse(text)), `${text}: ${JSON.stringify(validate.errors)}`);
  }
});

await check('a schema keyword outside the subset is a 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model, messages, max_tokens: 8,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { not: {} } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && /'not'/.test(e.message),
  );
});

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
        required: ['city', 'days'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'send_mail',
      parameters: {
        type: 'object',
        properties: { to: { type: 'string', maxLength: 10 }, urgent: { type: 'boolean' } },
        required: ['to', 'urgent'],
        additionalProperties: false,
      },
    },
  },
];
const validators = Object.fromEntries(
  tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

function checkCall(call, name) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  if (name) assert.equal(call.function.name, name);
  const v = validators[call.function.name];
  assert.ok(v, `undeclared function ${call.function.name}`);
  assert.ok(v(JSON.parse(call.function.arguments)), JSON.stringify(v.errors));
}

await check('forced named tool call, not streamed', async () => {
  for (let seed = 0; seed < 4; ++seed) {
    const r = await client.chat.completions.create({
      model, messages, tools, max_tokens: 200, temperature: 1, seed,
      tool_choice: { type: 'function', function: { name: 'send_mail' } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    checkCall(c.message.tool_calls[0], 'send_mail');
  }
});

// Accumulates a streamed response's tool-call deltas by index.
async function streamedCalls(args) {
  const calls = [];
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...args, stream: true })) {
    for (const c of chunk.choices) {
      if (c.finish_reason) finish = c.finish_reason;
      for (const d of c.delta?.tool_calls ?? []) {
        calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
        if (d.id) calls[d.index].id = d.id;
        if (d.function?.name) calls[d.index].function.name = d.function.name;
        calls[d.index].function.arguments += d.function?.arguments ?? '';
      }
    }
  }
  return { calls, finish };
}

await check('forced tool calls, streamed: named and required', async () => {
  for (let seed = 0; seed < 4; ++seed) {
    const base = { model, messages, tools, max_tokens: 800, temperature: 1, seed };
    const named = await streamedCalls({
      ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
    assert.equal(named.finish, 'tool_calls');
    assert.equal(named.calls.length, 1);
    checkCall(named.calls[0], 'get_weather');
    const required = await streamedCalls({ ...base, tool_choice: 'required' });
    assert.equal(required.finish, 'tool_calls');
    assert.ok(required.calls.length >= 1 && required.calls.length <= 8);
    for (const call of required.calls) checkCall(call);
  }
});

await check('tool_choice required, not streamed; parallel_tool_calls false makes one call', async () => {
  for (let seed = 0; seed < 4; ++seed) {
    const r = await client.chat.completions.create({
      model, messages, tools, tool_choice: 'required', parallel_tool_calls: false,
      max_tokens: 300, temperature: 1, seed,
    });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    checkCall(r.choices[0].message.tool_calls[0]);
  }
});

await check('the tool-result round trip', async () => {
  const first = await client.chat.completions.create({
    model, messages, tools, max_tokens: 200, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const call = first.choices[0].message.tool_calls[0];
  const second = await client.chat.completions.create({
    model, tools, max_tokens: 16, temperature: 0,
    messages: [
      ...messages,
      first.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
    ],
  });
  assert.equal(second.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(second.choices[0].finish_reason));
});

await check('logit_bias +100 forces a token; -100 bans the greedy one', async () => {
  const { tokens } = await post('/tokenize', { prompt: ' return', add_special_tokens: false });
  assert.equal(tokens.length, 1);
  const forced = await client.completions.create({
    model, prompt: 'def f(x):', max_tokens: 3, temperature: 0,
    logit_bias: { [tokens[0]]: 100 },
  });
  assert.equal(forced.choices[0].text, ' return return return');
  const plain = await client.completions.create({ model, prompt: 'def f(x):', max_tokens: 1, temperature: 0 });
  const { tokens: greedy } = await post('/tokenize', { prompt: plain.choices[0].text, add_special_tokens: false });
  const banned = await client.completions.create({
    model, prompt: 'def f(x):', max_tokens: 1, temperature: 0, logit_bias: { [greedy[0]]: -100 },
  });
  assert.notEqual(banned.choices[0].text, plain.choices[0].text);
});

await check('/tokenize, /detokenize and models.retrieve', async () => {
  const t = await post('/tokenize', { messages, return_token_strs: true });
  assert.equal(t.count, t.tokens.length);
  assert.equal(t.token_strs.length, t.tokens.length);
  assert.ok(t.max_model_len > 0);
  const d = await post('/detokenize', { tokens: t.tokens });
  assert.ok(d.prompt.includes('Describe the weather as JSON.'));
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError);
});

console.log('all agent SDK checks passed');
