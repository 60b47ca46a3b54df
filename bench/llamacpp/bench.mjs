// llama.cpp side of bench/llamacpp/compare.sh: prefill and decode tokens/s for a GGUF model
// through node-llama-cpp, on the CPU, measured the way `moex bench` measures them.
//
//   node bench.mjs MODEL.gguf [PROMPT_TOKENS] [GEN_TOKENS] [THREADS]
//
// The prompt is a fixed sequence of token ids (no text, no tokenizer). Prefill is the time
// from submitting the prompt to the first generated token (as in moex, the first token comes
// from the prefill pass); decode is the remaining GEN_TOKENS - 1 greedy tokens. A warm-up
// prompt in a separate sequence runs first so first-touch page faults of the mmapped
// weights are not timed. Prints one JSON object on stdout; llama.cpp's log lines that tell
// the thread count and the tensor types go to stderr (and are summarised in the JSON).
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, promptArg = "128", genArg = "32", threadsArg = "2"] = process.argv.slice(2);
if (!modelPath) {
  console.error("usage: node bench.mjs MODEL.gguf [PROMPT_TOKENS] [GEN_TOKENS] [THREADS]");
  process.exit(2);
}
const promptTokens = Number(promptArg);
const genTokens = Number(genArg);
const threads = Number(threadsArg);

const logLines = [];
const llama = await getLlama({
  gpu: false,
  build: "never",
  maxThreads: threads,
  logLevel: LlamaLogLevel.debug,
  logger: (level, message) => {
    logLines.push(message.endsWith("\n") ? message : message + "\n");
    process.stderr.write(`[llama.cpp ${level}] ${message}${message.endsWith("\n") ? "" : "\n"}`);
  },
});

const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const context = await model.createContext({
  contextSize: promptTokens + genTokens + 16,
  batchSize: Math.max(promptTokens, 1),
  sequences: 2,
  threads: { ideal: threads, min: threads },
  flashAttention: false,
});

// Fixed prompt: a deterministic walk over the vocabulary that avoids the first ids
// (control/special tokens in most vocabularies).
const vocab = model.tokens.vocabSize ?? 50000;
const prompt = [];
for (let i = 0; i < promptTokens; ++i) prompt.push(1000 + ((i * 7919) % (vocab - 1000)));

// Warm-up in another sequence, then drop it: a full-length prompt of other ids, so that every
// expert's mmapped pages are faulted in before timing (moex reads all weights at load).
{
  const warm = context.getSequence();
  await warm.evaluateWithoutGeneratingNewTokens(prompt.map((t) => 1000 + ((t + 1) % (vocab - 1000))));
  warm.dispose();
}

const sequence = context.getSequence();
const cpu0 = process.cpuUsage();
let cpuFirst = null;
const t0 = performance.now();
let tFirst = 0;
let produced = 0;
const generated = [];
for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
  if (produced === 0) {
    tFirst = performance.now();
    cpuFirst = process.cpuUsage();
  }
  generated.push(token);
  if (++produced >= genTokens) break;
}
const tEnd = performance.now();
const cpuEnd = process.cpuUsage();
// CPU seconds per wall second of this process: about the number of busy compute threads.
const busy = (a, b, ms) => (b.user + b.system - a.user - a.system) / 1000 / ms;

const prefillMs = tFirst - t0;
const decodeMs = tEnd - tFirst;
const log = logLines.join("");
const pick = (re) => {
  const m = log.match(re);
  return m ? m[1].trim() : null;
};
const typeCounts = [...log.matchAll(/llama_model_loader: - type\s+(\S+):\s+(\d+) tensors/g)].map(
  (m) => `${m[1]}:${m[2]}`,
);

console.log(
  JSON.stringify({
    engine: "llama.cpp (node-llama-cpp)",
    model: modelPath,
    prompt_tokens: promptTokens,
    gen_tokens: genTokens,
    prefill_ms: prefillMs,
    prefill_tokens_per_s: (1000 * promptTokens) / prefillMs,
    decode_ms: decodeMs,
    decode_tokens_per_s: produced > 1 ? (1000 * (produced - 1)) / decodeMs : 0,
    prefill_cpu_per_wall: busy(cpu0, cpuFirst, prefillMs),
    decode_cpu_per_wall: busy(cpuFirst, cpuEnd, decodeMs),
    threads_requested: threads,
    context_threads: context.currentThreads,
    llama_max_threads: llama.maxThreads,
    gpu: llama.gpu,
    use_mmap: model.useMmap,
    file_type: pick(/print_info: file type\s*=\s*([^\n]*)/),
    tensor_types: typeCounts,
    n_threads_log: pick(/n_threads\s*=\s*([^\n]*)/),
    first_tokens: generated.slice(0, 8),
  }),
);

await context.dispose();
await model.dispose();
await llama.dispose();
