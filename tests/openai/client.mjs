// client.mjs - the official openai client (v4) against the server at
// BASE_URL: a completion (its text must equal the file EXPECT, infer's
// greedy text), a streamed chat completion with usage, and an error.
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

try {
  await client.completions.create({ model, prompt: 'ROMEO:', temperature: 5 });
  check('a bad temperature is refused', false, 'it was accepted');
} catch (e) {
  check('a bad temperature is refused with 400 naming the field',
    e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
    `${e.constructor.name} ${e.status} ${e.param} ${e.message}`);
}
process.exit(failed ? 1 : 0);
