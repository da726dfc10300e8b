// The official Node SDKs (openai, @anthropic-ai/sdk, pinned in package.json)
// against a local runtime: every call goes through the SDKs, as a user's
// would. TestNodeSDKs (localstack/node_sdk_test.go) runs it with
// RELAY_BASE_URL (the runtime's root) and RELAY_API_KEY; it exits non-zero
// naming the first step that broke. docs/api.md is the contract checked.
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.RELAY_BASE_URL;
const apiKey = process.env.RELAY_API_KEY;
if (!base || !apiKey) {
  console.error('set RELAY_BASE_URL and RELAY_API_KEY');
  process.exit(2);
}
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey, maxRetries: 0 });

let step = '';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// until polls get every half second until done says so, for at most 60 s.
async function until(what, get, done) {
  for (const end = Date.now() + 60_000; ; await sleep(500)) {
    const v = await get();
    if (done(v)) return v;
    if (Date.now() > end) throw new Error(`${what}: still ${JSON.stringify(v)} after 60 s`);
  }
}

const chatRow = (id, text) => JSON.stringify({
  custom_id: id, method: 'POST', url: '/v1/chat/completions',
  body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: text }] },
});
const jsonl = (rows) => rows.join('\n') + '\n';

async function files() {
  step = 'files.create';
  const content = jsonl([chatRow('a', 'hello a'), chatRow('b', 'hello b')]);
  const f = await openai.files.create({ file: await toFile(Buffer.from(content), 'in.jsonl'), purpose: 'batch' });
  assert.equal(f.object, 'file');
  assert.equal(f.bytes, Buffer.byteLength(content));
  assert.equal(f.status, 'processed');
  assert.ok(f._request_id, 'files.create: no _request_id');

  step = 'files.retrieve';
  const { data: got, request_id } = await openai.files.retrieve(f.id).withResponse();
  assert.equal(got.id, f.id);
  assert.equal(got.filename, 'in.jsonl');
  assert.ok(request_id, 'files.retrieve withResponse(): no request_id');

  step = 'files.list';
  const listed = [];
  for await (const x of openai.files.list({ purpose: 'batch' })) listed.push(x.id);
  assert.ok(listed.includes(f.id), `files.list lacks ${f.id}: ${listed}`);

  step = 'files.content';
  assert.equal(await (await openai.files.content(f.id)).text(), content);

  step = 'files.delete';
  const del = await openai.files.delete(f.id);
  assert.deepEqual([del.id, del.deleted], [f.id, true]);
  await assert.rejects(openai.files.retrieve(f.id), (e) => e instanceof OpenAI.NotFoundError);
}

// uploads sends a file in parts, as a file over 4 MiB must be (README).
async function uploads() {
  step = 'uploads.create';
  const content = Buffer.from(jsonl([chatRow('u1', 'first part'), chatRow('u2', 'second part')]));
  const cut = content.indexOf('\n') + 1;
  const u = await openai.uploads.create({ bytes: content.length, filename: 'parts.jsonl', mime_type: 'application/jsonl', purpose: 'batch' });
  assert.equal(u.status, 'pending');

  step = 'uploads.parts.create';
  const ids = [];
  for (const [i, chunk] of [content.subarray(0, cut), content.subarray(cut)].entries()) {
    const p = await openai.uploads.parts.create(u.id, { data: await toFile(chunk, `part${i}`) });
    assert.equal(p.upload_id, u.id);
    ids.push(p.id);
  }

  step = 'uploads.complete';
  const done = await openai.uploads.complete(u.id, { part_ids: ids });
  assert.equal(done.status, 'completed');
  assert.equal(done.file.bytes, content.length);
  assert.equal(await (await openai.files.content(done.file.id)).text(), content.toString());

  step = 'uploads: a part after complete';
  await assert.rejects(openai.uploads.parts.create(u.id, { data: await toFile(Buffer.from('x'), 'late') }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'upload_not_pending');
  return done.file.id;
}

async function batches(inputID) {
  step = 'batches.create';
  const b = await openai.batches.create({ input_file_id: inputID, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'node' } });
  assert.equal(b.status, 'validating');
  assert.ok(b._request_id, 'batches.create: no _request_id');

  step = 'batches.retrieve until completed';
  const done = await until('batch', () => openai.batches.retrieve(b.id), (x) => ['completed', 'failed', 'expired', 'cancelled'].includes(x.status));
  assert.equal(done.status, 'completed', JSON.stringify(done.errors));
  assert.deepEqual(done.request_counts, { total: 2, completed: 2, failed: 0 });

  step = 'batch usage details';
  const u = done.usage;
  assert.ok(u.input_tokens > 0 && u.total_tokens === u.input_tokens + u.output_tokens, JSON.stringify(u));
  assert.equal(typeof u.input_tokens_details?.cached_tokens, 'number', `no usage.input_tokens_details.cached_tokens: ${JSON.stringify(u)}`);
  assert.equal(typeof u.output_tokens_details?.reasoning_tokens, 'number', `no usage.output_tokens_details.reasoning_tokens: ${JSON.stringify(u)}`);
  assert.ok(u.input_tokens_details.cached_tokens > 0 && u.input_tokens_details.cached_tokens <= u.input_tokens, JSON.stringify(u));

  step = 'batches.cancel';
  const slow = await openai.files.create({ file: await toFile(Buffer.from(jsonl([chatRow('s', '[[mock:sleep=3s]] slow')])), 'slow.jsonl'), purpose: 'batch' });
  const c = await openai.batches.create({ input_file_id: slow.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const cancelling = await openai.batches.cancel(c.id);
  assert.equal(cancelling.status, 'cancelling');

  step = 'batches.list, auto-paginated';
  const extra = await openai.batches.create({ input_file_id: inputID, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const listed = [];
  for await (const x of openai.batches.list({ limit: 1 })) listed.push(x.id);
  for (const id of [b.id, c.id, extra.id]) assert.ok(listed.includes(id), `batches.list lacks ${id}: ${listed}`);
  assert.equal(new Set(listed).size, listed.length, `batches.list repeats: ${listed}`);

  step = 'batches.create refused';
  await assert.rejects(openai.batches.create({ input_file_id: inputID, endpoint: '/v1/images', completion_window: '24h' }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'invalid_endpoint' && e.param === 'endpoint');
  await assert.rejects(openai.batches.cancel(b.id), (e) => e instanceof OpenAI.ConflictError && e.headers.get('x-should-retry') === 'false');

  step = 'a failed batch\'s errors';
  const empty = await openai.files.create({ file: await toFile(Buffer.from('\n'), 'empty.jsonl'), purpose: 'batch' });
  const fb = await openai.batches.create({ input_file_id: empty.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const f = await until('failed batch', () => openai.batches.retrieve(fb.id), (x) => x.status !== 'validating');
  assert.equal(f.status, 'failed');
  assert.deepEqual([f.errors.data[0].code, f.errors.data[0].line, f.errors.data[0].param], ['empty_file', null, null]);
}

async function models() {
  step = 'models.list';
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert.ok(ids.includes('gpt-4o-mini'), `OpenAI models: ${ids}`);
  const aids = [];
  for await (const m of anthropic.models.list()) aids.push(m.id);
  assert.deepEqual(aids, ids);

  step = 'models.retrieve';
  const m = await openai.models.retrieve('gpt-4o-mini');
  assert.deepEqual([m.id, m.object], ['gpt-4o-mini', 'model']);
  await assert.rejects(openai.models.retrieve('gpt-nope'),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  const am = await anthropic.models.retrieve('claude-haiku-4-5');
  assert.deepEqual([am.id, am.type], ['claude-haiku-4-5', 'model']);
  await assert.rejects(anthropic.models.retrieve('claude-nope'),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
}

const msgRequest = (id, text) => ({
  custom_id: id,
  params: { model: 'claude-haiku-4-5', max_tokens: 64, messages: [{ role: 'user', content: text }] },
});

async function messageBatches() {
  step = 'messages.batches.create';
  const b = await anthropic.messages.batches.create({ requests: [msgRequest('m1', 'hello one'), msgRequest('m2', 'hello two')] });
  assert.equal(b.type, 'message_batch');
  assert.equal(b.processing_status, 'in_progress');
  assert.ok(b._request_id, 'messages.batches.create: no _request_id');

  step = 'messages.batches.retrieve until ended';
  const done = await until('message batch', () => anthropic.messages.batches.retrieve(b.id), (x) => x.processing_status === 'ended');
  assert.equal(done.request_counts.succeeded, 2);
  assert.ok(done.results_url, 'no results_url');

  step = 'messages.batches.results';
  const results = {};
  for await (const r of await anthropic.messages.batches.results(b.id)) results[r.custom_id] = r.result;
  assert.equal(results.m1?.type, 'succeeded', JSON.stringify(results));
  assert.equal(results.m2.message.content[0].text, 'echo: hello two');

  step = 'messages.batches.cancel';
  const slow = await anthropic.messages.batches.create({ requests: [msgRequest('s1', '[[mock:sleep=3s]] slow')] });
  const canceling = await anthropic.messages.batches.cancel(slow.id);
  assert.equal(canceling.processing_status, 'canceling');

  step = 'messages.batches.list, auto-paginated';
  const listed = [];
  for await (const x of anthropic.messages.batches.list({ limit: 1 })) listed.push(x.id);
  for (const id of [b.id, slow.id]) assert.ok(listed.includes(id), `messages.batches.list lacks ${id}: ${listed}`);

  step = 'messages.batches.delete';
  await until('cancelled message batch', () => anthropic.messages.batches.retrieve(slow.id), (x) => x.processing_status === 'ended');
  for (const id of [b.id, slow.id]) {
    const del = await anthropic.messages.batches.delete(id);
    assert.deepEqual([del.id, del.type], [id, 'message_batch_deleted']);
  }

  step = 'anthropic request id of an error';
  await assert.rejects(anthropic.messages.batches.retrieve(b.id),
    (e) => e instanceof Anthropic.NotFoundError && typeof e.requestID === 'string' && e.requestID !== '');
}

// roundThree: what an SDK user met before issue 28 (docs/api.md "Files",
// "Output and error files", "Anthropic Message Batches").
async function roundThree() {
  step = 'an input deleted right after the create';
  const rows = jsonl([chatRow('d1', '[[mock:sleep=1s]] one'), chatRow('d2', '[[mock:sleep=1s]] two')]);
  const f = await openai.files.create({ file: await toFile(Buffer.from(rows), 'del.jsonl'), purpose: 'batch' });
  const b = await openai.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h',
    output_expires_after: { anchor: 'created_at', seconds: 3600 } });
  assert.equal((await openai.files.delete(f.id)).deleted, true);
  await assert.rejects(openai.files.retrieve(f.id), (e) => e instanceof OpenAI.NotFoundError);
  const done = await until('batch of a deleted input', () => openai.batches.retrieve(b.id), (x) => ['completed', 'failed', 'expired', 'cancelled'].includes(x.status));
  assert.equal(done.status, 'completed', JSON.stringify(done.errors));
  assert.deepEqual(done.request_counts, { total: 2, completed: 2, failed: 0 });

  step = 'output_expires_after from the output file\'s creation';
  const out = await openai.files.retrieve(done.output_file_id);
  assert.equal(out.expires_at, out.created_at + 3600);

  step = 'message batch counts while it runs, with betas';
  // Rows of a second, several chunks of them: some done while the rest run.
  const slow = Array.from({ length: 24 }, (_, i) => msgRequest(`c${i}`, `[[mock:sleep=1s]] counted ${i}`));
  const mb = await anthropic.beta.messages.batches.create({ requests: slow, betas: ['context-1m-2025-08-07'] });
  await until('a row done', () => openai.batches.retrieve(mb.id), (x) => x.request_counts.completed > 0);
  const running = await anthropic.messages.batches.retrieve(mb.id);
  assert.equal(running.processing_status, 'in_progress');
  assert.deepEqual(running.request_counts, { processing: 24, succeeded: 0, errored: 0, canceled: 0, expired: 0 });
  await until('message batch', () => anthropic.messages.batches.retrieve(mb.id), (x) => x.processing_status === 'ended');

  step = 'message results after a files cleanup';
  for await (const x of openai.files.list()) await openai.files.delete(x.id);
  const results = [];
  for await (const r of await anthropic.messages.batches.results(mb.id)) results.push(r.result.type);
  assert.deepEqual(results, Array(24).fill('succeeded'));
}

try {
  await files();
  const input = await uploads();
  await batches(input);
  await models();
  await messageBatches();
  await roundThree();
  console.log('ok');
} catch (e) {
  console.error(`step "${step}" failed:`, e?.stack ?? e);
  process.exit(1);
}
