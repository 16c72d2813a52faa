// tests/node/openai_client.mjs: the official `openai` npm client against a running mlxcel-server
// (run by tests/cli/server_openai.sh with MLXCEL_URL and MLXCEL_KEY set). Prints PASS/FAIL lines.
import OpenAI from 'openai';

const baseURL = process.env.MLXCEL_URL + '/v1';
const apiKey = process.env.MLXCEL_KEY;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let failed = 0;
const pass = (n) => console.log(`PASS ${n}`);
const fail = (n, why) => { console.log(`FAIL ${n}: ${why}`); failed++; };
async function check(name, fn) {
  try { const r = await fn(); if (r === true) pass(name); else fail(name, String(r)); }
  catch (e) { fail(name, `${e.constructor.name}: ${e.message}`); }
}

const messages = [
  { role: 'system', content: 'You are a fortune cookie.' },
  { role: 'user', content: 'Tell me something.' },
];
let model = '';
let wholeText = '';

await check('openai_models_list', async () => {
  const list = await client.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  model = ids[0];
  return ids.length === 1 && model === 'fortune-6m-mlx-q4' || `ids ${JSON.stringify(ids)}`;
});

await check('openai_chat_whole', async () => {
  const r = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 24 });
  wholeText = r.choices[0].message.content;
  return (r.object === 'chat.completion' && r.choices[0].message.role === 'assistant' && wholeText.length > 0 &&
          ['stop', 'length'].includes(r.choices[0].finish_reason) && r.usage.completion_tokens > 0 &&
          r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens) || JSON.stringify(r);
});

await check('openai_chat_stream', async () => {
  const stream = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 24, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    if (ch.choices.length) { text += ch.choices[0].delta.content ?? ''; finish = ch.choices[0].finish_reason ?? finish; }
  }
  return (text === wholeText && chunks > 2 && ['stop', 'length'].includes(finish) && usage && usage.completion_tokens > 0) ||
         `text ${JSON.stringify(text)} vs ${JSON.stringify(wholeText)}, finish ${finish}, usage ${JSON.stringify(usage)}`;
});

await check('openai_chat_stop_and_logprobs', async () => {
  const r = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 24, logprobs: true,
                                                   top_logprobs: 2, stop: [wholeText.slice(3, 6)] });
  const c = r.choices[0];
  return (c.message.content === wholeText.slice(0, wholeText.indexOf(wholeText.slice(3, 6))) && c.finish_reason === 'stop' &&
          c.logprobs.content.length > 0 && c.logprobs.content[0].top_logprobs.length === 2) || JSON.stringify(r).slice(0, 400);
});

await check('openai_completions', async () => {
  const a = await client.completions.create({ model, prompt: 'A wise man once said', temperature: 0, max_tokens: 16 });
  const s = await client.completions.create({ model, prompt: 'A wise man once said', temperature: 0, max_tokens: 16, stream: true });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.text ?? '';
  return (a.object === 'text_completion' && a.choices[0].text.startsWith(' the company is') && text === a.choices[0].text) ||
         `${JSON.stringify(a.choices[0].text)} vs stream ${JSON.stringify(text)}`;
});

await check('openai_error_400', async () => {
  try { await client.chat.completions.create({ model, messages: [], max_tokens: 4 }); return 'no error'; }
  catch (e) {
    return (e instanceof OpenAI.BadRequestError && e.status === 400 && e.error?.type === 'invalid_request_error' &&
            e.message.includes('messages')) || `${e.constructor.name} ${e.status} ${e.message}`;
  }
});

await check('openai_error_context', async () => {
  try {
    await client.completions.create({ model, prompt: 'fortune cookie wisdom '.repeat(800), max_tokens: 4 });
    return 'no error';
  } catch (e) {
    return (e instanceof OpenAI.BadRequestError && e.error?.type === 'exceed_context_size_error') || `${e.constructor.name} ${e.message}`;
  }
});

await check('openai_error_404', async () => {
  try { await client.models.retrieve('no-such-model'); return 'no error'; }
  catch (e) { return (e instanceof OpenAI.NotFoundError && e.status === 404 && e.error?.type === 'not_found_error') || `${e.constructor.name} ${e.status}`; }
});

await check('openai_error_401', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  try { await bad.chat.completions.create({ model, messages, max_tokens: 2 }); return 'no error'; }
  catch (e) { return (e instanceof OpenAI.AuthenticationError && e.status === 401) || `${e.constructor.name} ${e.status}`; }
});

await check('openai_abort_stream', async () => {
  const stream = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 900, stream: true,
                                                        ignore_eos: true });
  let n = 0;
  for await (const ch of stream) { if (++n >= 3) { stream.controller.abort(); break; } }
  // the server carries on serving
  const r = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 24 });
  return r.choices[0].message.content === wholeText || 'different text after abort';
});

process.exit(failed ? 1 : 0);
