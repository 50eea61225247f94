// The fixtures of the hand-written feature templates (feature_sources.mjs) and their contexts.
import { A1, SYS, TOOLS, TOOL_RESULT, U1, U2, UNICODE } from "./conversations.mjs";
import {
  FEATURES_ERRORS,
  FEATURES_EXPRESSIONS,
  FEATURES_FILTERS,
  FEATURES_MACROS,
  FEATURES_STATEMENTS,
  FEATURES_STRINGS,
  FEATURES_TOOL_SCHEMA,
  FEATURES_WHITESPACE,
} from "./feature_sources.mjs";

export function featureTemplates({ fixture }) {
  const people = [{ name: "Zed", age: 40 }];
  const base = {
    messages: [SYS, U1, A1],
    data: { nested: { list: [10, 20, 30], key: "value", "with space": true } },
    config: { temperature: 0.5, name: "t", enabled: true },
    people,
    tools: TOOLS,
  };
  const hand = "hand-written: engine features";
  fixture("features_expressions", hand, FEATURES_EXPRESSIONS, "<s>", "</s>", [["base", base]]);
  fixture("features_statements", hand, FEATURES_STATEMENTS, "<s>", "</s>", [
    ["base", base],
    ["no_system", { ...base, messages: [U1, A1, U2] }],
  ]);
  fixture("features_filters", hand, FEATURES_FILTERS, "<s>", "</s>", [["base", base]]);
  fixture("features_macros", hand, FEATURES_MACROS, "<s>", "</s>", [
    ["base", { people: [{ name: "a", age: 1 }, { name: "b", age: 2 }] }],
  ]);
  fixture("features_strings", hand, FEATURES_STRINGS, "<s>", "</s>", [["base", base], ["unicode", { messages: [UNICODE] }]]);
  fixture("features_whitespace", hand, FEATURES_WHITESPACE, "<s>", "</s>", [["base", {}]]);
  const richTool = {
    type: "function",
    function: {
      name: "plan_trip",
      description: "  Plan a trip.  ",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "Destination" },
          days: { type: "integer" },
          budget: { type: "number", description: "In euros" },
          mode: { type: "string", enum: ["train", "plane"], description: "How" },
          stops: { type: "array", items: { type: "string" } },
          grid: { type: "array", items: { type: "array", items: { type: "integer" } } },
          prefs: { type: "object", additionalProperties: { type: "boolean" } },
          meta: { type: "object" },
          anything: { description: "No type" },
        },
        required: ["city", "stops"],
      },
    },
  };
  const call = {
    role: "assistant",
    content: "",
    tool_calls: [{ type: "function", function: { name: "plan_trip", arguments: { city: "Oslo", stops: ["Bergen"], prefs: { quiet: true } } } }],
  };
  fixture("features_tool_schema", hand, FEATURES_TOOL_SCHEMA, "<s>", "</s>", [
    ["tools", { tools: [richTool, ...TOOLS], messages: [U1, call, TOOL_RESULT] }],
    ["no_tools", { tools: [], messages: [U1] }],
  ]);
  fixture("features_errors", hand, FEATURES_ERRORS, "<s>", "</s>", [
    ["ok", { messages: [SYS, U1] }],
    ["unknown_role", { messages: [U1, { role: "robot", content: "beep" }] }],
  ]);
}
