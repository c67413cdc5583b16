// Two chat completions through the official OpenAI client (one whole, one streamed) with the same
// messages and seed, for tests/text/test_chat_model.py: prints {"whole", "streamed", "finish"}.
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const body = JSON.parse(process.env.BODY);
const whole = await client.chat.completions.create(body);
let streamed = '';
let finish = null;
const s = await client.chat.completions.create({ ...body, stream: true });
for await (const chunk of s) {
  if (chunk.choices.length && chunk.choices[0].delta.content) streamed += chunk.choices[0].delta.content;
  if (chunk.choices.length && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
console.log(JSON.stringify({ whole: whole.choices[0].message.content, streamed, finish }));
