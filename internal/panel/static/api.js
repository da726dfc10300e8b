// The public API client: every request carries the key in the Authorization
// header and goes to the origin (and API Gateway stage) that served the page.

// This module is <base>/panel/api.js, so the API base is one level up.
const base = new URL('../', import.meta.url);

// The key lives in memory; sessionStorage only if the user asked to be
// remembered for this tab. Never in a URL, never in a cookie.
const STORE = 'relay.key';
let key = sessionStorage.getItem(STORE) || '';

export const hasKey = () => key !== '';

export function setKey(k, remember) {
  key = k;
  if (remember) sessionStorage.setItem(STORE, k);
  else sessionStorage.removeItem(STORE);
}

export function clearKey() {
  key = '';
  sessionStorage.removeItem(STORE);
}

// APIError carries the API's error.message (or a network error's) and status
// (0 for a network error).
export class APIError extends Error {
  constructor(message, status = 0, code = '') {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// request calls the API. path is relative to the API base ("v1/batches").
// With json it sends a JSON body; with raw it returns the Response instead of
// the parsed JSON.
export async function request(path, { method = 'GET', json, body, raw = false, signal } = {}) {
  if (!key) throw new APIError('Signed out: enter an API key.', 401);
  const headers = { Authorization: `Bearer ${key}` };
  if (json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(json);
  }
  let res;
  try {
    res = await fetch(new URL(path, base), { method, headers, body, signal, credentials: 'omit', cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(`Network error: cannot reach the API (${e.message}).`);
  }
  if (!res.ok) throw await errorOf(res);
  if (raw) return res;
  return res.status === 204 ? null : res.json();
}

async function errorOf(res) {
  const text = await res.text().catch(() => '');
  try {
    const { error } = JSON.parse(text);
    if (error?.message) return new APIError(error.message, res.status, error.code || '');
  } catch { /* not the OpenAI error shape */ }
  return new APIError(`${res.status} ${res.statusText || 'error'}${text ? `: ${text.slice(0, 200)}` : ''}`, res.status);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// docs/api.md "Limits": one request carries at most 4 MiB of file data.
export const MULTIPART_LIMIT = 4 * 1024 * 1024;

// uploadFile stores file as a batch input and resolves to the File once it
// is processed. Big files go straight to S3 through a presigned PUT.
export async function uploadFile(file, progress = () => {}) {
  if (file.size <= MULTIPART_LIMIT) {
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', file, file.name);
    progress('uploading');
    return request('v1/files', { method: 'POST', body: form });
  }
  const f = await request('v1/files', {
    method: 'POST', json: { filename: file.name, purpose: 'batch', bytes: file.size },
  });
  progress('uploading to storage');
  let res;
  try {
    // slice() drops the file's type, so fetch adds no Content-Type: the URL is
    // presigned and the PUT carries only the header it signs, which makes S3
    // create the object once and never replace it.
    res = await fetch(f.upload_url, {
      method: 'PUT', body: file.slice(), credentials: 'omit', headers: { 'If-None-Match': '*' },
    });
  } catch (e) {
    throw new APIError(`Upload to storage failed (network or CORS): ${e.message}`);
  }
  if (!res.ok) {
    const xml = await res.text().catch(() => '');
    const msg = /<Message>([^<]*)<\/Message>/.exec(xml)?.[1] || res.statusText;
    throw new APIError(`Upload to storage failed: ${res.status} ${msg}`, res.status);
  }
  // The file settles when it is read after its object landed.
  progress('processing');
  for (let i = 0, wait = 250; i < 40; i++, wait = Math.min(wait * 2, 2000)) {
    const got = await request(`v1/files/${encodeURIComponent(f.id)}`);
    if (got.status === 'processed') return got;
    if (got.status === 'error') throw new APIError(got.status_details || `file ${f.id} failed`);
    await sleep(wait);
  }
  throw new APIError(`file ${f.id} is still not processed; try again later`);
}

// firstLines reads at most n lines of a response body and stops the
// download there, whatever the file's size.
export async function firstLines(res, n) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  const lines = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buf += value;
    const parts = buf.split('\n');
    buf = done ? '' : parts.pop();
    lines.push(...parts.filter((l) => l.trim() !== ''));
    if (lines.length >= n || done) break;
  }
  reader.cancel().catch(() => {});
  return lines.slice(0, n);
}

// download fetches an API path with the key and saves it under filename.
export async function download(apiPath, filename) {
  const res = await request(apiPath, { raw: true });
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
