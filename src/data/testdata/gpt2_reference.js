// Encodes documents with a reference GPT-2 encoder, for gpt2_bpe_tokenizer_test.cc.
//   node gpt2_reference.js gpt-3-encoder|tiktoken|gpt-3-encoder-pretokens NODE_MODULES_DIR IN OUT
// IN:  documents, each a little-endian uint32 byte length and the bytes.
// OUT: per document, a little-endian uint32 count and that many int32: the token ids (-1 where the
//      encoder gave no id), or for gpt-3-encoder-pretokens the UTF-8 byte lengths of the pre-tokens
//      that the package's own pattern (taken from its Encoder.js) splits the text into.
// The encoders take strings: bytes become one with WHATWG's UTF-8 decoder (each maximal ill-formed
// subpart becomes U+FFFD), keeping a leading byte-order mark as text (ignoreBOM).
'use strict';
const fs = require('fs');
const path = require('path');

const [impl, nodeModules, inPath, outPath] = process.argv.slice(2);
let encode;
if (impl === 'gpt-3-encoder') {
  encode = require(path.join(nodeModules, 'gpt-3-encoder')).encode;
} else if (impl === 'tiktoken') {
  const enc = require(path.join(nodeModules, 'tiktoken')).get_encoding('gpt2');
  encode = (text) => Array.from(enc.encode_ordinary(text));  // special tokens are plain text
} else if (impl === 'gpt-3-encoder-pretokens') {
  // The pattern is not exported; take its literal from the source, so that it is the package's own.
  const source = fs.readFileSync(path.join(nodeModules, 'gpt-3-encoder', 'Encoder.js'), 'utf8');
  const literal = source.match(/^const pat = (\/.*\/gu)$/m);
  if (!literal) throw new Error('no "const pat = /.../gu" line in gpt-3-encoder/Encoder.js');
  const pat = eval(literal[1]);
  encode = (text) => Array.from(text.matchAll(pat), (m) => Buffer.byteLength(m[0]));
} else {
  throw new Error(`unknown encoder ${impl}`);
}

const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
const input = fs.readFileSync(inPath);
const chunks = [];
for (let pos = 0; pos < input.length;) {
  const len = input.readUInt32LE(pos);
  pos += 4;
  const ids = encode(decoder.decode(input.subarray(pos, pos + len)));
  pos += len;
  const out = Buffer.alloc(4 + 4 * ids.length);
  out.writeUInt32LE(ids.length, 0);
  ids.forEach((id, i) => out.writeInt32LE(Number.isInteger(id) ? id : -1, 4 + 4 * i));
  chunks.push(out);
}
fs.writeFileSync(outPath, Buffer.concat(chunks));
