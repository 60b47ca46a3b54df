// Anthropic's official SDK (@anthropic-ai/sdk) on POST /v1/messages and the official `openai`
// client's Responses API on POST /v1/responses, against `moex serve` on a model whose chat
// template renders tools: each runs a tool-call loop (a forced call, its result sent back,
// a text answer), streaming and not, and a JSON-schema reply (output_config.format,
// text.format). Run by
// tests/serve_clients_test.cc:
//   node dialects_client.mjs --port PORT --api-key K
// Exits 0 when every check passes.
import assert from "node:assert/strict";
import { args, check, cities, schema } from "./tool_model.mjs";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const base = `http://127.0.0.1:${args.port}`;
const anthropic = new Anthropic({ baseURL: base, apiKey: args["api-key"], maxRetries: 0, timeout: 120000 });
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: args["api-key"], maxRetries: 0, timeout: 120000 });

await check("messages: a forced tool call, then its result answered", async () => {
  const question = { role: "user", content: "Weather in Oslo?" };
  const tools = [{ name: "get_weather", input_schema: schema }];
  const first = await anthropic.messages.create({
    model: "tools", max_tokens: 100, temperature: 0.7, tools,
    tool_choice: { type: "tool", name: "get_weather" }, messages: [question],
  });
  assert.equal(first.type, "message");
  assert.equal(first.stop_reason, "tool_use");
  const use = first.content.find((b) => b.type === "tool_use");
  assert.ok(use, JSON.stringify(first));
  assert.equal(use.name, "get_weather");
  assert.ok(cities.includes(use.input.city), JSON.stringify(use.input));
  assert.ok(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);
  const second = await anthropic.messages.create({
    model: "tools", max_tokens: 6, tools, messages: [
      question,
      { role: "assistant", content: first.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny" }] },
    ],
  });
  assert.ok(["end_turn", "max_tokens"].includes(second.stop_reason), second.stop_reason);
  assert.equal(second.content[0].type, "text");
});

await check("messages: the stream helper assembles the same kind of call", async () => {
  const stream = anthropic.messages.stream({
    model: "tools", max_tokens: 100, temperature: 0.7,
    tools: [{ name: "get_weather", input_schema: schema }],
    tool_choice: { type: "any" }, messages: [{ role: "user", content: "Weather?" }],
  });
  const events = [];
  stream.on("streamEvent", (e) => events.push(e.type));
  const message = await stream.finalMessage();
  assert.equal(events[0], "message_start");
  assert.equal(events.at(-1), "message_stop");
  const use = message.content.find((b) => b.type === "tool_use");
  assert.ok(use && cities.includes(use.input.city), JSON.stringify(message));
});

await check("messages: output_config.format gives a reply that follows the schema", async () => {
  const message = await anthropic.messages.create({
    model: "tools", max_tokens: 100, messages: [{ role: "user", content: "Which city?" }],
    output_config: { format: { type: "json_schema", schema } },
  });
  assert.equal(message.content[0].type, "text");
  assert.ok(cities.includes(JSON.parse(message.content[0].text).city), message.content[0].text);
});

await check("messages: a wrong model is NotFoundError", async () => {
  await assert.rejects(
    anthropic.messages.create({ model: "nope", max_tokens: 4, messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof Anthropic.NotFoundError && e.status === 404);
});

await check("responses: a required tool call, then its output answered", async () => {
  const tools = [{ type: "function", name: "get_weather", parameters: schema, strict: true }];
  const first = await openai.responses.create({
    model: "tools", input: "Weather in Oslo?", tools, tool_choice: "required",
    max_output_tokens: 100, temperature: 0.7,
  });
  assert.equal(first.object, "response");
  assert.equal(first.status, "completed");
  const call = first.output.find((o) => o.type === "function_call");
  assert.ok(call, JSON.stringify(first));
  assert.ok(cities.includes(JSON.parse(call.arguments).city), call.arguments);
  const second = await openai.responses.create({
    model: "tools", tools, max_output_tokens: 6,
    input: [
      { role: "user", content: "Weather in Oslo?" },
      call,
      { type: "function_call_output", call_id: call.call_id, output: "sunny" },
    ],
  });
  assert.equal(typeof second.output_text, "string");
  assert.ok(second.usage.input_tokens > first.usage.input_tokens);
});

await check("responses: a JSON-schema reply parses, whole and streamed", async () => {
  const request = {
    model: "tools", input: "Which city?", max_output_tokens: 100,
    text: { format: { type: "json_schema", name: "city", schema, strict: true } },
  };
  const whole = await openai.responses.create(request);
  assert.ok(cities.includes(JSON.parse(whole.output_text).city), whole.output_text);
  const stream = openai.responses.stream(request);
  let deltas = "";
  stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
  const final = await stream.finalResponse();
  assert.equal(deltas, final.output_text);
  assert.ok(cities.includes(JSON.parse(final.output_text).city), final.output_text);
});

await check("responses: previous_response_id is a BadRequestError", async () => {
  await assert.rejects(
    openai.responses.create({ model: "tools", input: "x", previous_response_id: "resp_1" }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

console.log("all checks passed");
