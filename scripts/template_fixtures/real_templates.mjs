// Real chat templates, taken from the tokenizer_config.json of the @lenml/tokenizer-* packages
// installed beside @huggingface/jinja.
import fs from "node:fs";
import path from "node:path";

import { A1, A_WEATHER, SYS, TOOLS, TOOL_RESULT, U1, U2, U_WEATHER, basicCases, toolCall } from "./conversations.mjs";

const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));

function lenmlTemplate(modulesDir, pkg) {
  const dir = path.join(modulesDir, "node_modules/@lenml", pkg);
  const version = readJson(path.join(dir, "package.json")).version;
  const cfg = readJson(path.join(dir, "models/tokenizer_config.json"));
  const tok = (t) => (t == null ? "" : typeof t === "string" ? t : t.content);
  if (typeof cfg.chat_template !== "string") throw new Error(`${pkg} has no chat_template string`);
  return {
    source: `@lenml/${pkg}@${version} models/tokenizer_config.json`,
    template: cfg.chat_template,
    bos: tok(cfg.bos_token),
    eos: tok(cfg.eos_token),
  };
}

export function realTemplates({ fixture, modulesDir }) {
  const lenml = (pkg) => lenmlTemplate(modulesDir, pkg);
  const qwenToolChat = (args) => [
    SYS,
    U_WEATHER,
    { role: "assistant", content: "", tool_calls: [toolCall(args)] },
    TOOL_RESULT,
    { role: "tool", content: "second result" },
    A_WEATHER,
  ];
  {
    const t = lenml("tokenizer-qwen2_5");
    fixture("qwen2_5", t.source, t.template, t.bos, t.eos, [
      ...basicCases(),
      ["tools/no_system", { messages: [U_WEATHER], tools: TOOLS, add_generation_prompt: true }],
      ["tools/system", { messages: [SYS, U_WEATHER], tools: TOOLS, add_generation_prompt: true }],
      ["tool_calls", { messages: qwenToolChat({ city: "Paris", unit: "celsius" }), tools: TOOLS, add_generation_prompt: true }],
      [
        "tool_call_with_content",
        {
          messages: [U_WEATHER, { role: "assistant", content: "Let me check.", tool_calls: [toolCall({ city: "Paris" })] }],
          add_generation_prompt: false,
        },
      ],
    ]);
  }
  {
    const t = lenml("tokenizer-qwen3");
    const think = (body, answer) => ({ role: "assistant", content: `<think>\n${body}\n</think>\n\n${answer}` });
    fixture("qwen3", t.source, t.template, t.bos, t.eos, [
      ...basicCases(),
      ["enable_thinking_false", { messages: [U1], add_generation_prompt: true, enable_thinking: false }],
      ["enable_thinking_true", { messages: [U1], add_generation_prompt: true, enable_thinking: true }],
      ["think_in_history", { messages: [U1, think("The user asks about France.", "Paris."), U2], add_generation_prompt: true }],
      ["think_last_turn", { messages: [U1, think("Short thought.", "Paris.")], add_generation_prompt: false }],
      [
        "reasoning_content_field",
        {
          messages: [U1, { role: "assistant", content: "Paris.", reasoning_content: "\nFrance -> Paris.\n" }],
          add_generation_prompt: false,
        },
      ],
      ["tools/system", { messages: [SYS, U_WEATHER], tools: TOOLS, add_generation_prompt: true }],
      ["tool_calls/object_args", { messages: qwenToolChat({ city: "Paris", unit: "celsius" }), tools: TOOLS, add_generation_prompt: true }],
      ["tool_calls/string_args", { messages: qwenToolChat('{"city": "Paris"}'), tools: TOOLS, add_generation_prompt: true }],
      [
        "multi_step_tool_with_think",
        {
          messages: [
            U_WEATHER,
            { role: "assistant", content: "<think>\nNeed the tool.\n</think>\n\nChecking.", tool_calls: [toolCall({ city: "Paris" })] },
            TOOL_RESULT,
            think("Got 18.", "It is 18 °C."),
          ],
          tools: TOOLS,
          add_generation_prompt: false,
        },
      ],
      [
        "tool_response_lookalike_user",
        { messages: [U1, A1, { role: "user", content: "<tool_response>\nfake\n</tool_response>" }], add_generation_prompt: true },
      ],
    ]);
  }
  {
    const t = lenml("tokenizer-llama3");
    fixture("llama3", t.source, t.template, t.bos, t.eos, basicCases());
  }
  {
    const t = lenml("tokenizer-llama3_1");
    fixture("llama3_1_lenml", t.source, t.template, t.bos, t.eos, basicCases());
  }
  {
    const t = lenml("tokenizer-gemma3");
    fixture("gemma3", t.source, t.template, t.bos, t.eos, [
      ...basicCases(),
      [
        "content_parts",
        {
          messages: [
            { role: "system", content: [{ type: "text", text: "Be brief." }] },
            { role: "user", content: [{ type: "image" }, { type: "text", text: "  Describe this image.  " }] },
          ],
          add_generation_prompt: true,
        },
      ],
      ["system_then_assistant", { messages: [SYS, A1], add_generation_prompt: true }],
    ]);
  }
  {
    const t = lenml("tokenizer-deepseek_v3");
    const call = { type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } };
    fixture("deepseek_v3", t.source, t.template, t.bos, t.eos, [
      ...basicCases(),
      ["two_system_messages", { messages: [SYS, { role: "system", content: "Answer in French." }, U1], add_generation_prompt: true }],
      [
        "tool_calls",
        {
          messages: [U_WEATHER, { role: "assistant", content: null, tool_calls: [call, call] }, TOOL_RESULT, TOOL_RESULT, A_WEATHER],
          add_generation_prompt: true,
        },
      ],
      ["tool_output_last", { messages: [U_WEATHER, { role: "assistant", content: null, tool_calls: [call] }, TOOL_RESULT], add_generation_prompt: true }],
    ]);
  }
}
