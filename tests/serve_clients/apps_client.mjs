// Two app frameworks against `moex serve`'s chat completions, on a model whose chat template
// renders tools: the Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`) and LangChain JS
// (`@langchain/openai`). Each runs a tool-call loop (a forced call whose input matches the
// schema, the tool's result sent back, a text answer), streams a call, and asks for an
// object matching a JSON schema. Run by tests/serve_clients_test.cc:
//   node apps_client.mjs --port PORT --api-key K
// Exits 0 when every check passes.
import assert from "node:assert/strict";
import { args, check, cities, schema } from "./tool_model.mjs";
import { generateObject, generateText, jsonSchema, streamText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { HumanMessage, ToolMessage } from "@langchain/core/messages";

const baseURL = `http://127.0.0.1:${args.port}/v1`;

// The Vercel AI SDK.
const provider = createOpenAICompatible({
  name: "moex", baseURL, apiKey: args["api-key"], supportsStructuredOutputs: true,
});
const model = provider.chatModel("tools");
const weather = tool({
  
  inputSchema: jsonSchema(schema),
  execute: async ({ city }) => `sunny in ${city}`,
});

await check("ai sdk: a forced tool call is executed, its result answered", async () => {
  const first = await generateText({
    model, tools: { get_weather: weather }, toolChoice: { type: "tool", toolName: "get_weather" },
    prompt: "Weather in Oslo?", maxOutputTokens: 100, temperature: 0.7, maxRetries: 0,
  });
  assert.equal(first.finishReason, "tool-calls");
  assert.equal(first.toolCalls.length, 1, JSON.stringify(first.toolCalls));
  const call = first.toolCalls[0];
  assert.equal(call.toolName, "get_weather");
  assert.ok(cities.includes(call.input.city), JSON.stringify(call.input));
  assert.equal(first.toolResults[0].output, `sunny in ${call.input.city}`);
  const second = await generateText({
    model, tools: { get_weather: weather }, toolChoice: "none", maxOutputTokens: 6, maxRetries: 0,
    messages: [{ role: "user", content: "Weather in Oslo?" }, ...first.response.messages],
  });
  assert.equal(typeof second.text, "string");
  assert.ok(["stop", "length"].includes(second.finishReason), second.finishReason);
  // The SDK sent the call and its result back as an assistant and a tool message.
  assert.deepEqual(first.response.messages.map((m) => m.role), ["assistant", "tool"]);
  assert.ok(second.usage.inputTokens > 0);
});

await check("ai sdk: a streamed tool call", async () => {
  const result = streamText({
    model, tools: { get_weather: weather }, toolChoice: "required",
    prompt: "Weather?", maxOutputTokens: 100, temperature: 0.7, maxRetries: 0,
  });
  const parts = [];
  for await (const part of result.fullStream) parts.push(part);
  const call = parts.find((p) => p.type === "tool-call");
  assert.ok(call, JSON.stringify(parts.map((p) => p.type)));
  assert.ok(cities.includes(call.input.city), JSON.stringify(call.input));
});

await check("ai sdk: generateObject follows the schema", async () => {
  const { object } = await generateObject({
    model, schema: jsonSchema(schema), prompt: "Which city?", maxOutputTokens: 100, maxRetries: 0,
  });
  assert.ok(cities.includes(object.city), JSON.stringify(object));
});

// LangChain JS.
const llm = new ChatOpenAI({
  model: "tools", apiKey: args["api-key"], configuration: { baseURL },
  temperature: 0.7, maxTokens: 100, maxRetries: 0,
});
const lcTool = {
  type: "function",
  function: { name: "get_weather",  parameters: schema },
};

await check("langchain: bindTools, a forced call, a ToolMessage answered", async () => {
  const question = new HumanMessage("Weather in Oslo?");
  const ai = await llm
    .bindTools([lcTool], { tool_choice: { type: "function", function: { name: "get_weather" } } })
    .invoke([question]);
  assert.equal(ai.tool_calls.length, 1, JSON.stringify(ai));
  const call = ai.tool_calls[0];
  assert.equal(call.name, "get_weather");
  assert.ok(cities.includes(call.args.city), JSON.stringify(call.args));
  const reply = await llm.bindTools([lcTool]).invoke([
    question, ai, new ToolMessage({ content: "sunny", tool_call_id: call.id }),
  ], { tool_choice: "none", max_tokens: 6 });
  assert.equal(typeof reply.content, "string");
  assert.ok(reply.usage_metadata.input_tokens > 0);
});

await check("langchain: a streamed call's chunks add up to the call", async () => {
  const stream = await llm.bindTools([lcTool], { tool_choice: "required" }).stream("Weather?");
  let whole;
  for await (const chunk of stream) whole = whole ? whole.concat(chunk) : chunk;
  assert.equal(whole.tool_calls.length, 1, JSON.stringify(whole));
  assert.ok(cities.includes(whole.tool_calls[0].args.city), JSON.stringify(whole.tool_calls));
});

await check("langchain: withStructuredOutput (json schema)", async () => {
  const structured = llm.withStructuredOutput({ title: "city", ...schema }, {
    method: "jsonSchema", name: "city",
  });
  const object = await structured.invoke("Which city?");
  assert.ok(cities.includes(object.city), JSON.stringify(object));
});

console.log("all checks passed");
