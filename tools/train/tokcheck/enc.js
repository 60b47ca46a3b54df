const { Tokenizer } = require("@anush008/tokenizers");
const fs = require("fs");
(async () => {
  const tk = Tokenizer.fromFile(process.argv[2]);
  const texts = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
  const out = [];
  for (const t of texts) {
    const e = await tk.encode(t, null, { addSpecialTokens: false });
    out.push(Array.from(e.getIds()));
  }
  fs.writeFileSync(process.argv[4], JSON.stringify(out));
})();
