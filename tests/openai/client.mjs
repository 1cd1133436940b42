// client.mjs - the official openai client (v4) against the server at
// BASE_URL: a completion (its text must equal the file EXPECT, infer's
// greedy text), a streamed chat completion with usage, one with logprobs,
// the bodies editors' and chat front ends send (Continue's 14 stop strings,
// LibreChat's penalties and user without max_tokens), and an error.
// Prints one line per check and exits non-zero if any failed.
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const client = new OpenAI({ baseURL: `${process.env.BASE_URL}/v1`, apiKey: 'unused', maxRetries: 0 });
let failed = 0;
function check(what, good, detail) {
  console.log(`${good ? 'ok  ' : 'FAIL'} ${what}${good ? '' : `: ${detail}`}`);
  if (!good) failed++;
}

const models = await client.models.list();
const model = models.data[0].id;
check('models.list names the model', model === 'shakespeare', JSON.stringify(models.data));

const c = await client.completions.create({ model, prompt: 'ROMEO:', max_tokens: 40, temperature: 0 });
const expect = readFileSync(process.env.EXPECT, 'utf8');
check('completion text equals infer\'s', c.choices[0].text === expect, JSON.stringify(c.choices[0].text));
check('completion usage', c.usage.completion_tokens === 40 && c.choices[0].finish_reason === 'length',
  JSON.stringify(c.usage));

const stream = await client.chat.completions.create({
  model, messages: [{ role: 'system', content: 'Thou art a player.' }, { role: 'user', content: 'Speak.' }],
  max_tokens: 16, seed: 5, stream: true, stream_options: { include_usage: true },
});
let text = '', finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.choices.length) {
    text += chunk.choices[0].delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
check('streamed chat has text', text.length > 0 && chunks > 2, `${chunks} chunks, text ${JSON.stringify(text)}`);
check('streamed chat ends with a reason and usage', finish === 'length' && usage?.completion_tokens === 16,
  `finish ${finish}, usage ${JSON.stringify(usage)}`);

// logprobs and top_logprobs, streamed: each token's log-probability is <= 0,
// its alternatives come most likely first, and each token's bytes spell it
const lps = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Speak.' }], max_tokens: 12, seed: 3, stream: true,
  logprobs: true, top_logprobs: 5,
});
let entries = [], lpText = '';
for await (const chunk of lps) {
  if (!chunk.choices.length) continue;
  lpText += chunk.choices[0].delta.content ?? '';
  entries.push(...(chunk.choices[0].logprobs?.content ?? []));
}
const spelled = Buffer.from(entries.flatMap(e => e.bytes)).toString('utf8');
check('streamed logprobs: one entry a token, each <= 0, alternatives sorted, bytes spell the text',
  entries.length === 12 && spelled === lpText && entries.every(e => e.logprob <= 0 && e.top_logprobs.length === 5 &&
    e.top_logprobs.every((t, i, a) => t.logprob <= 0 && (i === 0 || a[i - 1].logprob >= t.logprob)) &&
    Buffer.from(e.bytes).toString('utf8') === e.token && e.top_logprobs[0].logprob >= e.logprob),
  `${entries.length} entries, text ${JSON.stringify(lpText)}, spelled ${JSON.stringify(spelled)}`);

// Continue's autocomplete: a raw completion with 14 stop strings
const stops = ['\n\n', '\r\n\r\n', '/src/', '#- coding: utf-8', '```', '\nfunction', '\nclass', '\nmodule',
  '\nexport', '\nimport', '\ndef', '\n#', '\n//', '\n}'];
const cont = await client.completions.create({ model, prompt: 'ROMEO:', max_tokens: 40, temperature: 0, stop: stops });
check('a completion with 14 stop strings', cont.choices[0].finish_reason === 'stop' &&
  !stops.some(s => cont.choices[0].text.includes(s)) && expect.startsWith(cont.choices[0].text),
  JSON.stringify(cont.choices[0]));

// LibreChat's body: temperature, top_p, penalties and user; no max_tokens (up to the context)
const lc = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Speak.' }], temperature: 0.8, top_p: 0.9, presence_penalty: 0.5,
  frequency_penalty: 0.5, user: 'someone', seed: 1,
});
check('LibreChat\'s body is answered', lc.choices[0].message.content.length > 0 &&
  ['stop', 'length'].includes(lc.choices[0].finish_reason) && lc.usage.prompt_tokens_details.cached_tokens >= 0,
  JSON.stringify(lc.usage));

try {
  await client.completions.create({ model, prompt: 'ROMEO:', temperature: 5 });
  check('a bad temperature is refused', false, 'it was accepted');
} catch (e) {
  check('a bad temperature is refused with 400 naming the field',
    e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
    `${e.constructor.name} ${e.status} ${e.param} ${e.message}`);
}
process.exit(failed ? 1 : 0);
