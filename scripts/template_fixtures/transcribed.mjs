// The fixtures of the transcribed templates (transcribed_sources.mjs): where each comes from and
// its cases.
import { A1, A_WEATHER, PADDED, SYS, TOOLS, U1, U_WEATHER, basicCases, toolCall } from "./conversations.mjs";
import { CHATML, GEMMA, LLAMA2, LLAMA31, MISTRAL_V01, MISTRAL_V02, MISTRAL_V03_TOOLS, PHI3, QWEN2, ZEPHYR } from "./transcribed_sources.mjs";

export function transcribedTemplates({ fixture }) {
  const from = (model) => `transcribed from ${model} tokenizer_config.json (not byte-verified against the hub)`;
  fixture("llama2", from("meta-llama/Llama-2-7b-chat-hf"), LLAMA2, "<s>", "</s>", [
    ...basicCases(),
    ["system_with_padding", { messages: [{ role: "system", content: " Be terse. " }, PADDED], add_generation_prompt: true }],
  ]);
  fixture("mistral_v0_1", from("mistralai/Mistral-7B-Instruct-v0.1"), MISTRAL_V01, "<s>", "</s>", basicCases());
  fixture("mistral_v0_2", from("mistralai/Mistral-7B-Instruct-v0.2"), MISTRAL_V02, "<s>", "</s>", [
    ...basicCases(),
    ["tool_role", { messages: [U1, { role: "tool", content: "x" }] }],
  ]);
  const id9 = "abcDEF123";
  fixture("mistral_v0_3_tools", from("mistralai/Mistral-7B-Instruct-v0.3"), MISTRAL_V03_TOOLS, "<s>", "</s>", [
    ...basicCases(),
    ["tools", { messages: [SYS, U1, A1, U_WEATHER], tools: TOOLS }],
    [
      "tool_calls",
      {
        messages: [
          U_WEATHER,
          { role: "assistant", tool_calls: [toolCall({ city: "Paris" }, id9)] },
          { role: "tool", content: "18 C", tool_call_id: id9 },
          A_WEATHER,
        ],
        tools: TOOLS,
      },
    ],
    ["bad_tool_call_id", { messages: [U_WEATHER, { role: "assistant", tool_calls: [toolCall({ city: "Paris" }, "short")] }], tools: TOOLS }],
  ]);
  fixture("zephyr", from("HuggingFaceH4/zephyr-7b-beta"), ZEPHYR, "<s>", "</s>", basicCases());
  fixture("phi3", from("microsoft/Phi-3-mini-4k-instruct"), PHI3, "<s>", "<|endoftext|>", basicCases());
  fixture("gemma", from("google/gemma-7b-it"), GEMMA, "<bos>", "<eos>", basicCases());
  fixture("qwen2", from("Qwen/Qwen2-7B-Instruct"), QWEN2, "", "<|im_end|>", basicCases());
  fixture("chatml_fallback", "transformers' default ChatML template (Tandem's fallback)", CHATML, "", "", basicCases());
  const llamaTools = (extra) => ({ tools: TOOLS, date_string: "22 Nov 2026", add_generation_prompt: true, ...extra });
  fixture("llama3_1_tools", from("meta-llama/Llama-3.1-8B-Instruct"), LLAMA31, "<|begin_of_text|>", "<|eot_id|>", [
    ...basicCases().map(([n, c]) => [n, { date_string: "22 Nov 2026", ...c }]),
    ["tools_in_user_message", llamaTools({ messages: [SYS, U_WEATHER] })],
    ["tools_in_system", llamaTools({ messages: [SYS, U_WEATHER], tools_in_user_message: false })],
    [
      "tool_call_and_result",
      llamaTools({
        messages: [
          SYS,
          U_WEATHER,
          { role: "assistant", content: "", tool_calls: [toolCall({ city: "Paris", unit: "celsius" })] },
          { role: "tool", content: "18 C" },
          { role: "ipython", content: { temperature: 18 } },
        ],
      }),
    ],
    ["two_tool_calls", llamaTools({ messages: [U_WEATHER, { role: "assistant", tool_calls: [toolCall({ city: "A" }), toolCall({ city: "B" })] }] })],
    ["tools_without_user", llamaTools({ messages: [SYS] })],
  ]);
}
