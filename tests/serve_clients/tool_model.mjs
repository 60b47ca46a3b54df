// Shared by the client scripts that run against the tool-calling tiny model
// (tests/serve_clients_test.cc's RunToolModelScript): their arguments, a named check that
// logs "ok: NAME", and the function schema every tool call and structured reply follows.
import { parseArgs } from "node:util";

export const { values: args } = parseArgs({
  options: { port: { type: "string" }, "api-key": { type: "string", default: "none" } },
});

export async function check(name, fn) {
  await fn();
  console.log(`ok: ${name}`);
}

export const cities = ["Oslo", "Paris"];
export const schema = {
  type: "object",
  properties: { city: { type: "string", enum: cities } },
  required: ["city"],
  additionalProperties: false,
};
