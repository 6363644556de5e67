// Encode throughput of the npm package tiktoken (Rust compiled to WebAssembly), encoding "gpt2", on the
// same text as bench/tokenizer_bench.cc. Usage: node tokenizer_bench_tiktoken.js NODE_MODULES TEXT [RUNS]
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, textPath, runsArg] = process.argv.slice(2);
const t0 = process.hrtime.bigint();
const enc = require(path.join(nodeModules, 'tiktoken')).get_encoding('gpt2');
const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
const bytes = fs.readFileSync(textPath);
const text = bytes.toString('utf8');  // decoding is outside the timing, as the C++ bench reads bytes
const runs = Number(runsArg || 3);

let first = 0, best = Infinity, tokens = 0;
for (let r = 0; r < runs; r++) {
  const start = process.hrtime.bigint();
  tokens = enc.encode_ordinary(text).length;  // plain text: <|endoftext|> is not special
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  if (r === 0) first = s;
  best = Math.min(best, s);
}
enc.free();
const mbps = (s) => (bytes.length / s / 1e6).toFixed(2);
console.log(`impl=tiktoken bytes=${bytes.length} tokens=${tokens} load_s=${loadS.toFixed(3)} ` +
            `first_mbps=${mbps(first)} best_mbps=${mbps(best)}`);
