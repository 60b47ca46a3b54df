// The web page of `moex serve` in headless Chromium: it loads from the binary, shows the
// expert cache, a message typed into the chat box gets a streamed answer, and the
// dashboard then shows the activations that answer caused. Run by
// tests/serve_clients_test.cc:
//   node web_page.mjs --url http://127.0.0.1:PORT/ --chromium /usr/bin/chromium [--api-key K]
import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import puppeteer from "puppeteer-core";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    chromium: { type: "string", default: "/usr/bin/chromium" },
    "api-key": { type: "string", default: "" },
  },
});

const browser = await puppeteer.launch({
  executablePath: args.chromium,
  headless: true,
  // Root in a container has no user namespaces for the sandbox; /dev/shm may be tiny.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
const problems = [];
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(90000);
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  // The 401s before the key is given are expected: the browser logs every failed fetch.
  page.on("console", (m) => {
    if (m.type() === "error" && !/status of 401/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()}`));
  page.on("request", (r) => {
    if (!r.url().startsWith(new URL(args.url).origin)) problems.push(`external request: ${r.url()}`);
  });

  const url = new URL(args.url);
  url.searchParams.set("poll", "250");
  const response = await page.goto(url.href);
  assert.equal(response.status(), 200);
  assert.equal(await page.title(), "moex");

  if (args["api-key"]) {
    // The page cannot read the cache without the key: it asks for it.
    await page.waitForFunction(() => document.getElementById("key-box").style.display === "flex");
    await page.type("#api-key", args["api-key"]);
    await page.click("#save-key");
    console.log("ok: the page asked for the API key");
  }

  const updates = () => page.$eval("#dashboard", (d) => Number(d.dataset.updates));
  const total = () => page.$eval("#activations-total", (e) => Number(e.textContent));
  await page.waitForFunction(() => Number(document.getElementById("dashboard").dataset.updates) >= 2);
  assert.equal(await page.$eval("#status", (e) => e.textContent), "live");
  const layers = await page.$eval("#resident-map", (c) => c.grid.rows);
  assert.ok(layers > 0, "no MoE layers drawn");
  const before = await total();
  const updatesBefore = await updates();
  console.log(`ok: dashboard live (${layers} layers, ${before} activations so far)`);

  await page.type("#prompt", "What is the capital of France?");
  await page.click("#send");
  await page.waitForSelector(".msg.assistant[data-state=done], .msg.error");
  const error = await page.$(".msg.error");
  assert.equal(error, null, error && (await page.evaluate((e) => e.textContent, error)));
  const answer = await page.$eval(".msg.assistant", (e) => e.firstChild.textContent);
  const meta = await page.$eval(".msg.assistant .meta", (e) => e.textContent);
  assert.ok(answer.trim().length > 0, "empty answer");
  assert.match(meta, /^\d+ tokens/);
  assert.equal(await page.$eval(".msg.user", (e) => e.textContent), "What is the capital of France?");
  console.log(`ok: answer ${JSON.stringify(answer.slice(0, 60))} (${meta})`);

  // The dashboard keeps updating and shows what the answer routed.
  await page.waitForFunction((n) => Number(document.getElementById("dashboard").dataset.updates) > n + 2, {}, updatesBefore);
  await page.waitForFunction((n) => Number(document.getElementById("activations-total").textContent) > n, {}, before);
  const after = await total();
  // Painted cells: activation and hit-rate cells differ from the empty background.
  const painted = await page.evaluate(() => {
    const count = (id, background) => {
      const c = document.getElementById(id);
      const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < data.length; i += 4)
        if (data[i] !== background[0] || data[i + 1] !== background[1] || data[i + 2] !== background[2]) ++n;
      return n;
    };
    return {
      activations: count("activation-map", [255, 255, 255]),
      hitRates: count("hit-rate-chart", [236, 236, 236]),
    };
  });
  assert.ok(painted.activations > 0, "the activation heatmap is blank");
  assert.ok(painted.hitRates > 0, "the hit-rate chart is blank");
  const hitRate = await page.$eval("#hit-rate", (e) => e.textContent);
  assert.match(hitRate, /%$/);
  console.log(`ok: dashboard updated (${before} -> ${after} activations, hit rate ${hitRate})`);

  // A second turn carries the conversation.
  await page.type("#prompt", "And of Italy?");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant[data-state=done], .msg.error").length >= 2);
  assert.equal(await page.$(".msg.error"), null);
  console.log("ok: second turn answered");
  assert.deepEqual(problems, []);
} finally {
  await browser.close();
}
console.log("all checks passed");
