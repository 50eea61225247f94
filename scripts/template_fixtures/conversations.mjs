// The conversations and tools the fixtures' cases are built from, and the basic cases every
// template gets (each conversation with and without the generation prompt).

export const SYS = { role: "system", content: "You are a helpful assistant." };
export const U1 = { role: "user", content: "Hello! What's the capital of France?" };
export const A1 = { role: "assistant", content: "The capital of France is Paris." };
export const U2 = { role: "user", content: "And the capital of Germany?" };
export const A2 = { role: "assistant", content: "Berlin." };
export const U3 = { role: "user", content: "Thanks. Which one is bigger?" };
export const UNICODE = { role: "user", content: "Grüße aus Köln — 日本語のテキスト, emoji 🎉🚀, Ελληνικά, русский, עברית." };
export const JINJA_LIKE = {
  role: "user",
  content: "Render literally: {{ messages }} {% if x %}y{% endif %} {# c #} {%- raw -%} it's \"quoted\" \\n",
};
export const PADDED = { role: "user", content: "  padded with spaces\n\n" };
export const MULTILINE = { role: "user", content: "line one\nline two\n\n  indented line" };

export const chat = {
  system_user: [SYS, U1],
  user_only: [U1],
  multi_turn: [U1, A1, U2],
  system_multi_turn: [SYS, U1, A1, U2, A2, U3],
  ends_with_assistant: [U1, A1],
  unicode: [SYS, UNICODE],
  jinja_like_content: [JINJA_LIKE],
  padded_content: [PADDED, A1, MULTILINE],
  wrong_alternation: [U1, U2],
  assistant_first: [A1, U1],
  empty_content: [{ role: "user", content: "" }],
};

export const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "City name, e.g. Paris" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "search",
      description: "Search the web — returns snippets",
      parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
    },
  },
];
export const U_WEATHER = { role: "user", content: "What's the weather in Paris?" };
export const toolCall = (args, id) => ({
  ...(id ? { id } : {}),
  type: "function",
  function: { name: "get_weather", arguments: args },
});
export const TOOL_RESULT = { role: "tool", content: '{"temperature": 18, "unit": "celsius"}' };
export const A_WEATHER = { role: "assistant", content: "It is 18 °C in Paris." };

// Conversations every template gets, with and without the generation prompt.
export function basicCases() {
  const cases = [];
  for (const [name, messages] of Object.entries(chat)) {
    cases.push([`${name}/gen`, { messages, add_generation_prompt: true }]);
    if (["system_user", "multi_turn", "ends_with_assistant", "system_multi_turn"].includes(name)) {
      cases.push([`${name}/no_gen`, { messages, add_generation_prompt: false }]);
    }
  }
  cases.push(["multi_turn/agp_absent", { messages: chat.multi_turn }]);
  return cases;
}
