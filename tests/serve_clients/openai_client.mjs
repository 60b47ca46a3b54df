// The official `openai` npm client against `moex serve`: chat and text completions,
// streaming and not, usage and finish reasons, and OpenAI's error classes for moex's errors.
// Run by tests/serve_clients_test.cc:
//   node openai_client.mjs --base-url http://127.0.0.1:PORT/v1 --kind text|ids [--api-key K]
// `text`: a model with a tokenizer (the demo model); `ids`: a random model without one
// (token-id prompts on /v1/completions only). Exits 0 when every check passes.
import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import OpenAI from "openai";

const { values: args } = parseArgs({
  options: {
    "base-url": { type: "string" },
    kind: { type: "string", default: "text" },
    "api-key": { type: "string", default: "none" },
  },
});
const client = new OpenAI({ baseURL: args["base-url"], apiKey: args["api-key"], maxRetries: 0, timeout: 120000 });

async function check(name, fn) {
  await fn();
  console.log(`ok: ${name}`);
}

async function expectError(name, ErrorClass, status, fn) {
  await check(name, async () => {
    let caught = null;
    try {
      await fn();
    } catch (e) {
      caught = e;
    }
    assert.ok(caught, "no error was raised");
    assert.ok(caught instanceof ErrorClass, `${caught?.constructor?.name}: ${caught?.message}`);
    assert.equal(caught.status, status);
    assert.equal(typeof caught.error?.message, "string");
  });
}

// Consumes a stream: the text (chat deltas or completion text), finish reason, usage, ids.
// Usage of two runs of the same request: equal, but for how much of the prompt the
// prefix cache supplied (the first run fills it).
function sameUsage(got, want) {
  const { prompt_tokens_details: gotDetails, ...gotRest } = got;
  const { prompt_tokens_details: wantDetails, ...wantRest } = want;
  assert.deepEqual(gotRest, wantRest);
  for (const d of [gotDetails, wantDetails])
    assert.ok(d.cached_tokens >= 0 && d.cached_tokens < got.prompt_tokens);
}

async function drain(stream, chat) {
  let text = "", finish = null, usage = null, chunks = 0;
  const ids = [];
  for await (const chunk of stream) {
    ++chunks;
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    text += (chat ? choice.delta?.content : choice.text) ?? "";
    if (choice.token_ids) ids.push(...choice.token_ids);
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { text, finish, usage, ids, chunks };
}

const models = await client.models.list();
const model = models.data[0].id;
await check("models.list", async () => {
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, "model");
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
});
await expectError("unknown model id is NotFoundError", OpenAI.NotFoundError, 404, () =>
  client.models.retrieve("no-such-model"));
await expectError("a request for another model is NotFoundError", OpenAI.NotFoundError, 404, () =>
  client.chat.completions.create({ model: "gpt-4", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }));

if (args.kind === "text") {
  const messages = [{ role: "user", content: "What is the capital of France?" }];
  let whole;
  await check("chat.completions.create", async () => {
    whole = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
    assert.equal(whole.object, "chat.completion");
    const choice = whole.choices[0];
    assert.equal(choice.message.role, "assistant");
    assert.equal(typeof choice.message.content, "string");
    assert.ok(choice.message.content.length > 0);
    assert.ok(["stop", "length"].includes(choice.finish_reason));
    assert.ok(whole.usage.completion_tokens > 0 && whole.usage.completion_tokens <= 16);
    assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);
  });
  await check("chat.completions.create stream", async () => {
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    const got = await drain(stream, true);
    assert.equal(got.text, whole.choices[0].message.content);  // Greedy: the same text.
    assert.equal(got.finish, whole.choices[0].finish_reason);
    sameUsage(got.usage, whole.usage);
    // The same prompt again: its prefix came from the prefix cache.
    assert.equal(whole.usage.prompt_tokens_details.cached_tokens, 0);
    assert.ok(got.usage.prompt_tokens_details.cached_tokens > 0);
  });
  await check("chat response_format json_schema", async () => {
    const schema = {
      type: "object",
      properties: {
        city: { type: "string", maxLength: 12 },
        population: { type: "integer", minimum: 0, maximum: 99999999 },
        capital: { type: "boolean" },
      },
      required: ["city", "population", "capital"],
      additionalProperties: false,
    };
    const r = await client.chat.completions.create({
      model, messages, max_tokens: 120, temperature: 0.8, seed: 3,
      response_format: { type: "json_schema", json_schema: { name: "city", strict: true, schema } },
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    const v = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(Object.keys(v), ["city", "population", "capital"]);
    assert.equal(typeof v.city, "string");
    assert.ok(Number.isInteger(v.population) && v.population >= 0);
    assert.equal(typeof v.capital, "boolean");
  });
  await check("chat n = 2 with a seed", async () => {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0.9, seed: 5, n: 2 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    const lone = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0.9, seed: 6 });
    assert.equal(r.choices[1].message.content, lone.choices[0].message.content);
  });
  await check("chat logprobs with top_logprobs", async () => {
    const r = await client.chat.completions.create({
      model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2,
    });
    const content = r.choices[0].logprobs.content;
    assert.ok(content.length > 0);
    assert.equal(content.map((e) => e.token).join(""), r.choices[0].message.content);
    for (const e of content) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 2);
      assert.equal(e.top_logprobs[0].token, e.token);
    }
  });
  await expectError("an unsupported schema keyword is BadRequestError", OpenAI.BadRequestError, 400, () =>
    client.chat.completions.create({
      model, messages, max_tokens: 8,
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { not: {} } } },
    }));
  await check("chat stop sequence", async () => {
    const text = whole.choices[0].message.content;
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2);
    if (stop.trim().length === 0) return;
    const cut = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stop: [stop] });
    assert.equal(cut.choices[0].message.content, text.slice(0, text.indexOf(stop)));
    assert.equal(cut.choices[0].finish_reason, "stop");
  });

  const prompt = "The history of the city";
  let completion;
  await check("completions.create", async () => {
    completion = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, seed: 1 });
    assert.equal(completion.object, "text_completion");
    assert.ok(completion.choices[0].text.length > 0);
    assert.ok(completion.usage.completion_tokens > 0 && completion.usage.completion_tokens <= 12);
  });
  await check("completions.create stream", async () => {
    const stream = await client.completions.create({
      model, prompt, max_tokens: 12, temperature: 0, seed: 1, stream: true, stream_options: { include_usage: true },
    });
    const got = await drain(stream, false);
    assert.equal(got.text, completion.choices[0].text);
    assert.equal(got.finish, completion.choices[0].finish_reason);
    sameUsage(got.usage, completion.usage);
  });
  await check("seeded sampling repeats", async () => {
    const request = { model, prompt, max_tokens: 12, temperature: 0.9, top_p: 0.95, seed: 42 };
    const a = await client.completions.create(request);
    const b = await client.completions.create(request);
    assert.equal(a.choices[0].text, b.choices[0].text);
  });
  await expectError("empty messages is BadRequestError", OpenAI.BadRequestError, 400, () =>
    client.chat.completions.create({ model, messages: [] }));
} else {
  const prompt = [1, 2, 3, 4, 5];
  let whole;
  await check("completions.create on token ids", async () => {
    // ignore_eos (moex's extension, as vLLM's): a random model may draw EOS at any time.
    whole = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    assert.equal(whole.choices[0].token_ids.length, 8);
    assert.equal(whole.choices[0].finish_reason, "length");
    assert.equal(whole.usage.prompt_tokens, 5);
    assert.equal(whole.usage.completion_tokens, 8);
  });
  await check("completions.create stream on token ids", async () => {
    const stream = await client.completions.create({
      model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true },
    });
    const got = await drain(stream, false);
    assert.deepEqual(got.ids, whole.choices[0].token_ids);
    assert.equal(got.finish, "length");
    sameUsage(got.usage, whole.usage);
  });
  await expectError("chat without a tokenizer is BadRequestError", OpenAI.BadRequestError, 400, () =>
    client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 }));
  await expectError("streamed chat without a tokenizer is BadRequestError", OpenAI.BadRequestError, 400, () =>
    client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, stream: true }));
}

await expectError("max_tokens -1 is BadRequestError", OpenAI.BadRequestError, 400, () =>
  client.completions.create({ model, prompt: [1], max_tokens: -1 }));
await expectError("n = 0 is BadRequestError", OpenAI.BadRequestError, 400, () =>
  client.completions.create({ model, prompt: [1], max_tokens: 2, n: 0 }));
if (args["api-key"] !== "none") {
  const wrong = new OpenAI({ baseURL: args["base-url"], apiKey: "wrong", maxRetries: 0 });
  await expectError("a wrong key is AuthenticationError", OpenAI.AuthenticationError, 401, () => wrong.models.list());
}
console.log("all checks passed");
