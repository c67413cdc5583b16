// Hugging Face's tokenizers as the oracle: reads {"tokenizer": path, "texts": [...], "ids": [[...]]}
// from the file argv[2] and writes {"plain": ids of each text, "special": the same with
// add_special_tokens, "decoded": the text of each id list (special tokens skipped)} to argv[3].
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const request = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const tokenizer = Tokenizer.fromFile(request.tokenizer);
  const plain = [], special = [], decoded = [];
  for (const text of request.texts) {
    plain.push((await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds());
    special.push((await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds());
  }
  for (const ids of request.ids) decoded.push(await tokenizer.decode(ids, true));
  fs.writeFileSync(process.argv[3], JSON.stringify({ plain, special, decoded }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
