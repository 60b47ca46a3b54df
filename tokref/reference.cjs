// Reference tokenization for moex's tests. Reads a job file (JSON) and writes a result file:
//   job:    {"tokenizers": [{"name", "kind": "hf"|"spm", "tokenizer", "config"?}],
//            "texts": [...],
//            "templates": [{"template", "messages", "add_generation_prompt", "bos_token",
//                           "eos_token"}]}
//   result: {"<name>": [[ids of text 0], ...], "templates": ["rendered", ...]}
// hf: @huggingface/tokenizers (the tokenizers of transformers.js) on tokenizer.json;
// spm: @agnai/sentencepiece-js (SentencePiece compiled to WebAssembly) on tokenizer.model;
// templates: @huggingface/jinja, the Jinja implementation transformers.js renders chat
// templates with. Special tokens are not added (the C++ side passes add_bos=false).
"use strict";
const fs = require("fs");

async function main() {
  const [jobPath, outPath] = process.argv.slice(2);
  const job = JSON.parse(fs.readFileSync(jobPath, "utf8"));
  const result = {};
  for (const t of job.tokenizers || []) {
    const ids = [];
    if (t.kind === "hf") {
      const { Tokenizer } = require("@huggingface/tokenizers");
      const config = t.config ? JSON.parse(fs.readFileSync(t.config, "utf8")) : {};
      const tok = new Tokenizer(JSON.parse(fs.readFileSync(t.tokenizer, "utf8")), config);
      for (const text of job.texts) ids.push(tok.encode(text, { add_special_tokens: false }).ids);
    } else if (t.kind === "spm") {
      const { SentencePieceProcessor } = require("@agnai/sentencepiece-js");
      const spp = new SentencePieceProcessor();
      await spp.load(t.tokenizer);
      for (const text of job.texts) ids.push(Array.from(spp.encodeIds(text)));
    } else {
      throw new Error("unknown reference kind " + t.kind);
    }
    result[t.name] = ids;
  }
  if (job.templates) {
    const { Template } = require("@huggingface/jinja");
    result.templates = job.templates.map((t) => {
      try {
        return new Template(t.template).render({
          messages: t.messages,
          add_generation_prompt: t.add_generation_prompt,
          bos_token: t.bos_token,
          eos_token: t.eos_token,
        });
      } catch (e) {
        return { error: String(e) };
      }
    });
  }
  fs.writeFileSync(outPath, JSON.stringify(result));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
