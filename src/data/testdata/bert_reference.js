// Encodes documents with Hugging Face's tokenizers (npm `tokenizers`, the Rust code of BertTokenizerFast),
// for bert_wordpiece_tokenizer_test.cc.
//   node bert_reference.js encode NODE_MODULES_DIR VOCAB_TXT lower|cased IN OUT
//   node bert_reference.js train NODE_MODULES_DIR CORPUS_TXT lower|cased VOCAB_OUT
// encode: the tokenizer BertTokenizerFast builds from a vocab.txt (BertNormalizer, BertPreTokenizer,
//   WordPiece with [UNK], max 100 characters a word; [PAD] [UNK] [CLS] [SEP] [MASK] added as special
//   tokens), without [CLS] ... [SEP] around the text.
//   IN: documents, each a little-endian uint32 byte length and the bytes. OUT: per document, a
//   little-endian uint32 count and that many int32 ids. Bytes become a string with WHATWG's UTF-8
//   decoder (each maximal ill-formed subpart becomes U+FFFD).
// train: the package's WordPiece trainer with its defaults (vocabulary 30000, no minimum frequency,
//   "##" continuation), on the same normaliser and pre-tokeniser; writes the pieces in id order.
'use strict';
const fs = require('fs');
const path = require('path');

const [mode, nodeModules, ...rest] = process.argv.slice(2);
const tk = require(path.join(nodeModules, 'tokenizers'));

function bert(model, lower) {
  const tokenizer = new tk.Tokenizer(model);
  tokenizer.setNormalizer(tk.bertNormalizer({ cleanText: true, handleChineseChars: true, lowercase: lower }));
  tokenizer.setPreTokenizer(tk.bertPreTokenizer());
  return tokenizer;
}

async function encode(vocabPath, casing, inPath, outPath) {
  const model = await tk.WordPiece.fromFile(vocabPath, { unkToken: '[UNK]', maxInputCharsPerWord: 100 });
  const tokenizer = bert(model, casing === 'lower');
  tokenizer.addSpecialTokens(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']);
  const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  const input = fs.readFileSync(inPath);
  const texts = [];
  for (let pos = 0; pos < input.length;) {
    const len = input.readUInt32LE(pos);
    pos += 4;
    texts.push(decoder.decode(input.subarray(pos, pos + len)));
    pos += len;
  }
  const chunks = [];
  for (let i = 0; i < texts.length; i += 256) {
    const encodings = await tokenizer.encodeBatch(texts.slice(i, i + 256), { addSpecialTokens: false });
    for (const e of encodings) {
      const ids = e.getIds();
      const out = Buffer.alloc(4 + 4 * ids.length);
      out.writeUInt32LE(ids.length, 0);
      ids.forEach((id, k) => out.writeInt32LE(id, 4 + 4 * k));
      chunks.push(out);
    }
  }
  fs.writeFileSync(outPath, Buffer.concat(chunks));
}

function train(corpusPath, casing, vocabOut) {
  const tokenizer = bert(tk.WordPiece.empty(), casing === 'lower');
  tokenizer.train([corpusPath]);
  const vocab = tokenizer.getVocab(false);
  const pieces = [];
  for (const [piece, id] of Object.entries(vocab)) pieces[id] = piece;
  fs.writeFileSync(vocabOut, pieces.map((p) => p + '\n').join(''));
}

if (mode === 'encode') {
  encode(...rest).catch((e) => { console.error(e); process.exit(1); });
} else if (mode === 'train') {
  train(...rest);
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
