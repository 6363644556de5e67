// Drives tessera serve with the official OpenAI Node client (npm `openai`), for
// tests/serve_openai_node_cli.sh: usage: node serve_openai_node_client.mjs OPENAI_MODULE_DIR BASE_URL
// GENERATE_OUTPUT PROMPT N, GENERATE_OUTPUT the file `tessera generate --prompt PROMPT --tokens-to-generate
// N --temperature 0` printed (the prompt, the N greedy tokens' text, a newline). Each check compares the client's view of an answer against something the
// client did not produce: `tessera generate`'s greedy text, the server's /tokenize counts, the same
// request without streaming. Prints "FAIL: ..." per failed check and exits 1 if any failed.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [moduleDir, baseURL, generateOutput, prompt, tokens] = process.argv.slice(2);
const printed = fs.readFileSync(generateOutput, "utf8");
const generated = printed.slice(prompt.length, -1);
const maxTokens = Number(tokens);
const require = createRequire(path.join(moduleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30000 });

let failures = 0;
let passed = 0;
function check(what, ok, detail = "") {
  if (ok) passed++;
  else { failures++; console.log(`FAIL: ${what}${detail ? ": " + detail : ""}`); }
}
const show = (x) => JSON.stringify(x);

async function tokenize(text) {  // the server's own count, through plain fetch (not the client)
  const r = await fetch(`${baseURL}/tokenize`, { method: "POST", body: JSON.stringify({ prompt: text }) });
  return (await r.json()).tokens;
}

const promptIds = await tokenize(prompt);
if (!printed.startsWith(prompt) || !printed.endsWith("\n") || !generated) {
  console.log(`FAIL: tessera generate printed ${JSON.stringify(printed)}, not the prompt, text and a newline`);
  process.exit(1);
}

// The model list names the served model.
const models = [];
for await (const m of client.models.list()) models.push(m.id);
check("models.list() names the served model", show(models) === show(["tiny"]), show(models));

// Completions, prompt as a string: the greedy text is tessera generate's.
const text = await client.completions.create({ model: "tiny", prompt, max_tokens: maxTokens, temperature: 0 });
check("completions.create(string) greedy text equals tessera generate's", text.choices[0].text === generated,
      `${show(text.choices[0].text)} vs ${show(generated)}`);
check("completions usage counts the /tokenize tokens",
      text.usage.prompt_tokens === promptIds.length && text.usage.completion_tokens === maxTokens &&
      text.usage.total_tokens === promptIds.length + maxTokens, show(text.usage));
check("completions object and model", text.object === "text_completion" && text.model === "tiny", show(text));

// The same prompt as token ids gives the same text.
const ids = await client.completions.create({ model: "tiny", prompt: promptIds, max_tokens: maxTokens, temperature: 0 });
check("completions.create(token ids) equals the string prompt's text", ids.choices[0].text === generated,
      show(ids.choices[0].text));

// logprobs + echo: one entry per prompt and generated token, the first null, the greedy token on top.
const lp = await client.completions.create({ model: "tiny", prompt: promptIds, max_tokens: maxTokens,
                                             temperature: 0, logprobs: 2, echo: true });
const l = lp.choices[0].logprobs;
check("echo returns the prompt then the generated text", lp.choices[0].text === prompt + generated,
      show(lp.choices[0].text));
check("logprobs has one token per prompt and generated token",
      l.tokens.length === promptIds.length + maxTokens && l.token_logprobs.length === l.tokens.length &&
      l.top_logprobs.length === l.tokens.length, show(l.tokens));
check("the first token's log-prob is null", l.token_logprobs[0] === null, show(l.token_logprobs[0]));
check("tokens join to the echoed text", l.tokens.join("") === prompt + generated, show(l.tokens));
let greedyOnTop = true;
for (let i = promptIds.length; i < l.tokens.length; i++) {
  const top = l.top_logprobs[i];
  const best = Math.max(...Object.values(top));
  if (Object.keys(top).length !== 2 || l.token_logprobs[i] !== best || !(best <= 0)) greedyOnTop = false;
}
check("each generated token is the most likely of its top_logprobs (2 given)", greedyOnTop, show(l.top_logprobs));

// stop: the text ends before the stop string, finish_reason "stop".
const stopAt = generated.trim().split(/\s+/)[1];
if (stopAt) {
  const cut = generated.slice(0, generated.indexOf(stopAt));
  const st = await client.completions.create({ model: "tiny", prompt, max_tokens: maxTokens, temperature: 0,
                                               stop: [stopAt] });
  check("stop ends the text before the stop string", st.choices[0].text === cut && st.choices[0].finish_reason === "stop",
        `${show(st.choices[0])} vs ${show(cut)}`);
}

// Two prompts in one request: one choice each, in order.
const two = await client.completions.create({ model: "tiny", prompt: [prompt, prompt], max_tokens: maxTokens,
                                             temperature: 0 });
check("a list of prompts gives one choice each", two.choices.length === 2 &&
      two.choices.every((c, i) => c.index === i && c.text === generated), show(two.choices));

// Streamed completions add up to the text.
let streamed = "";
for await (const chunk of await client.completions.create({ model: "tiny", prompt, max_tokens: maxTokens,
                                                            temperature: 0, stream: true })) {
  for (const c of chunk.choices) streamed += c.text;
}
check("streamed completions join to the greedy text", streamed === generated, show(streamed));

// Chat, not streamed, then streamed with include_usage: the deltas join to the same reply.
const messages = [{ role: "user", content: prompt }];
const chat = await client.chat.completions.create({ model: "tiny", messages, max_tokens: maxTokens, temperature: 0 });
const reply = chat.choices[0].message.content;
check("chat.completions.create answers an assistant message", chat.object === "chat.completion" &&
      chat.choices[0].message.role === "assistant" && typeof reply === "string", show(chat));
// The plain template's prompt (docs/serving.md): the reply is completions' greedy text on it, up to the
// end of the turn, and the prompt tokens are /tokenize's count of it.
const templated = `user: ${prompt}\nassistant:`;
const templatedIds = await tokenize(templated);
const asText = await client.completions.create({ model: "tiny", prompt: templated, max_tokens: maxTokens,
                                                temperature: 0, stop: ["\nuser:"] });
check("the chat reply equals completions' greedy text on the templated prompt", reply === asText.choices[0].text,
      `${show(reply)} vs ${show(asText.choices[0].text)}`);
check("chat usage counts the templated prompt's /tokenize tokens and the reply's",
      chat.usage.prompt_tokens === templatedIds.length &&
      chat.usage.completion_tokens === asText.usage.completion_tokens &&
      chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, show(chat.usage));

const stream = await client.chat.completions.create({ model: "tiny", messages, max_tokens: maxTokens, temperature: 0,
                                                      stream: true, stream_options: { include_usage: true } });
let joined = "";
let role = null;
let usage = null;
let finish = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  check("every chunk is a chat.completion.chunk", chunk.object === "chat.completion.chunk", show(chunk));
  for (const c of chunk.choices) {
    if (c.delta.role) role = c.delta.role;
    if (c.delta.content) joined += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
check("the streamed deltas join to the non-streamed reply", joined === reply, `${show(joined)} vs ${show(reply)}`);
check("the stream names the assistant role and a finish reason", role === "assistant" &&
      finish === chat.choices[0].finish_reason, `${role} ${finish}`);
check("include_usage: the last chunk's usage equals the non-streamed usage", show(usage) === show(chat.usage),
      `${show(usage)} vs ${show(chat.usage)}`);
check("more than one chunk came", chunks > 2, String(chunks));

// The chat helper that accumulates a stream (the client's own joining) agrees too.
const helper = client.chat.completions.stream({ model: "tiny", messages, max_tokens: maxTokens, temperature: 0 });
const final = await helper.finalChatCompletion();
check("the client's stream helper builds the same reply", final.choices[0].message.content === reply,
      show(final.choices[0].message));

// Errors surface as the client's APIError subclasses with OpenAI's status and fields.
async function expectError(what, request, status, param) {
  try {
    await request();
    check(`${what}: expected HTTP ${status}`, false, "it succeeded");
  } catch (e) {
    check(`${what}: an OpenAI.APIError with status ${status}`, e instanceof OpenAI.APIError && e.status === status,
          `${e?.constructor?.name} ${e?.status} ${e?.message}`);
    if (status === 400) {
      check(`${what}: a BadRequestError`, e instanceof OpenAI.BadRequestError, e?.constructor?.name);
      check(`${what}: error.param is ${param}`, e.param === param && e.type === "invalid_request_error",
            `${e.param} ${e.type} ${e.message}`);
    }
  }
}
await expectError("a prompt longer than the model", () =>
  client.completions.create({ model: "tiny", prompt: Array(5000).fill(promptIds[0]), max_tokens: 1 }), 400, "prompt");
await expectError("a negative max_tokens", () =>
  client.completions.create({ model: "tiny", prompt, max_tokens: -3 }), 400, "max_tokens");
await expectError("an unknown field", () =>
  client.completions.create({ model: "tiny", prompt, max_tokens: 1, suffix: "x" }), 400, "suffix");
await expectError("a chat message without content", () =>
  client.chat.completions.create({ model: "tiny", messages: [{ role: "user" }], max_tokens: 1 }), 400, "messages");
// And the server keeps serving.
const again = await client.completions.create({ model: "tiny", prompt, max_tokens: maxTokens, temperature: 0 });
check("after the errors the server still answers the same text", again.choices[0].text === generated,
      show(again.choices[0].text));

console.log(`serve_openai_node_client: ${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
