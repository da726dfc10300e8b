// The panel's UI: key entry, the batches list, uploads, the batch page,
// the usage page and the Operations page (admin keys).
// Views are built with DOM calls (h below), never by parsing HTML, so nothing
// the API returns (file names, metadata, error messages) becomes markup.
import { APIError, clearKey, download, firstLines, hasKey, request, setKey, uploadFile } from './api.js';

const $ = (sel) => document.querySelector(sel);
const enc = encodeURIComponent;

const ACTIVE = new Set(['validating', 'in_progress', 'finalizing', 'cancelling']);
const TERMINAL = new Set(['completed', 'failed', 'expired', 'cancelled']);
const POLL_MS = 2000;
const ERROR_LINES = 50;

// h builds an element; null, false and undefined attributes and children
// are skipped, so optional parts read as `cond && node`.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v != null && v !== false) el.setAttribute(k, v === true ? '' : v);
  }
  el.append(...children.flat().filter((c) => c != null && c !== false));
  return el;
}

const batchLink = (id) => h('a', { href: `#/batches/${enc(id)}` }, id);
const badge = (status) => h('span', { class: 'badge', 'data-status': status }, (status || 'unknown').replace('_', ' '));

function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts * 1000);
  return h('time', { datetime: d.toISOString() }, d.toLocaleString());
}

function progress(c = {}) {
  const total = c.total || 0;
  const done = (c.completed || 0) + (c.failed || 0);
  return h('span', { class: 'progress' },
    h('progress', { max: total || 1, value: done, 'aria-label': `${done} of ${total} rows done` }),
    h('span', {}, `${done}/${total}`, c.failed ? ` (${c.failed} failed)` : ''));
}

// dl renders [label, value] pairs; values may be nodes.
const dl = (pairs) => h('dl', { class: 'pairs' }, pairs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));

// table renders rows of cells under headings; it scrolls sideways on a
// narrow screen and can be scrolled with the keyboard.
function table(label, headings, rows) {
  return h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': label },
    h('table', {},
      h('thead', {}, h('tr', {}, headings.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((c) => h('td', {}, c ?? '—')))))));
}

const text = (v) => (v == null ? '—' : typeof v === 'object' ? JSON.stringify(v) : String(v));

// ---- messages ----

function showError(err) {
  if (err?.name === 'AbortError') return;
  if (err instanceof APIError && err.status === 401) {
    if (!hasKey()) return; // a request that outlived sign-out
    signOut();
  }
  $('#error').textContent = err?.message || String(err);
  $('#error-close').hidden = false;
}

function clearError() {
  $('#error').textContent = '';
  $('#error-close').hidden = true;
}

// notice says something went well; it fades after a while.
let noticeTimer = 0;
function notice(msg) {
  clearTimeout(noticeTimer);
  $('#notice').textContent = msg;
  if (msg) noticeTimer = setTimeout(() => notice(''), 8000);
}

// busy runs an action of button, reporting its error. aria-disabled rather
// than disabled: disabling the focused button would drop keyboard focus.
async function busy(button, action) {
  if (button.getAttribute('aria-disabled') === 'true') return;
  button.setAttribute('aria-disabled', 'true');
  try {
    clearError();
    await action();
  } catch (e) {
    showError(e);
  } finally {
    button.removeAttribute('aria-disabled');
  }
}

// ---- routing: #/ is the list, #/batches/<id> a batch, #/usage the usage
// page, #/operations the Operations page ----

let view = null; // the current view's {stop}

function route() {
  view?.stop();
  view = null;
  const signedIn = hasKey();
  $('#nav').hidden = !signedIn;
  $('#login').hidden = signedIn;
  $('#list-view').hidden = true;
  $('#batch-view').hidden = true;
  $('#usage-view').hidden = true;
  $('#ops-view').hidden = true;
  const usage = location.hash === '#/usage';
  const operations = location.hash === '#/operations';
  const current = usage || operations ? location.hash : '#/';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!signedIn) return;
  const m = /^#\/batches\/([^/]+)$/.exec(location.hash);
  view = m ? batchView(decodeURIComponent(m[1])) : usage ? usageView() : operations ? opsView() : listView();
}

function signOut() {
  clearKey();
  rows.clear();
  $('#batches tbody').replaceChildren();
  $('#uploads').replaceChildren();
  $('#batch-view').replaceChildren();
  $('#usage-view').replaceChildren();
  $('#ops-view').replaceChildren();
  notice('');
  route();
}

// poller calls tick now and again every POLL_MS while tick returns true;
// stop() ends it and aborts the request in flight. A run() during a tick
// runs one more tick after it: ticks never overlap, so the answer to an
// older request never overwrites a newer one (a status going backwards).
function poller(tick) {
  const ctl = new AbortController();
  let timer = 0;
  let running = false;
  let queued = false;
  const run = async () => {
    clearTimeout(timer);
    if (running) {
      queued = true;
      return;
    }
    running = true;
    let again = false;
    try {
      again = await tick(ctl.signal);
    } catch (e) {
      showError(e); // stop polling; Refresh starts again
    }
    running = false;
    if (ctl.signal.aborted) return;
    if (queued) {
      queued = false;
      run();
    } else if (again) timer = setTimeout(run, POLL_MS);
  };
  run();
  return { run, stop() { ctl.abort(); clearTimeout(timer); } };
}

// ---- batches list ----

const rows = new Map(); // batch id → {tr, batch, json}
let after = ''; // the last listed id, for "load more"
let listPoll = null;

// loadModels offers the configured models for CSV files and JSONL files of
// simple rows, the first one preselected; without them the field stays
// free text.
async function loadModels() {
  try {
    const { data } = await request('v1/models');
    const ids = data.map((m) => m.id);
    $('#models').replaceChildren(...ids.map((id) => h('option', { value: id })));
    if (!ids.includes($('#model').value)) $('#model').value = ids[0] || '';
  } catch {
    // Not worth an error: the model can still be typed.
  }
}

function listView() {
  $('#list-view').hidden = false;
  loadModels();
  rows.clear();
  $('#batches tbody').replaceChildren();
  after = '';
  listPoll = poller(async (signal) => {
    const page = await request('v1/batches?limit=100', { signal });
    merge(page, true);
    return [...rows.values()].some((r) => ACTIVE.has(r.batch.status));
  });
  return { stop() { listPoll.stop(); listPoll = null; } };
}

// merge shows a page of batches: known rows are updated in place (so focus
// and scroll survive polling), new ones of the first page go on top and
// those of later pages at the bottom.
function merge(page, first) {
  const tbody = $('#batches tbody');
  const fresh = [];
  for (const b of page.data) {
    const r = rows.get(b.id);
    if (r) {
      update(r, b);
      continue;
    }
    const tr = h('tr', { 'data-batch-id': b.id },
      h('th', { scope: 'row', 'data-label': 'ID' }, batchLink(b.id)),
      ['Status', 'Created', 'Model', 'Progress', 'Priority'].map((l) => h('td', { 'data-label': l })));
    const nr = { tr, batch: null, json: '' };
    rows.set(b.id, nr);
    update(nr, b);
    fresh.push(tr);
  }
  if (first && tbody.firstChild) tbody.prepend(...fresh);
  else tbody.append(...fresh);
  if (!first || !after) {
    after = page.data.at(-1)?.id || after;
    $('#load-more').hidden = !page.has_more;
  }
  $('#empty').hidden = rows.size > 0;
}

function update(r, b) {
  const json = JSON.stringify(b);
  if (json === r.json) return;
  Object.assign(r, { batch: b, json });
  r.tr.dataset.status = b.status;
  const [, status, created, model, prog, priority] = r.tr.children;
  status.replaceChildren(badge(b.status));
  created.replaceChildren(when(b.created_at));
  model.textContent = b.model || '—';
  prog.replaceChildren(b.status === 'scheduled' ? `template: ${b.schedule || ''}` : progress(b.request_counts));
  priority.textContent = b.priority ?? 0;
}

// ---- uploads: one batch per file ----

async function uploadAll(e) {
  e.preventDefault();
  const input = $('#files');
  const files = [...input.files];
  if (files.length === 0) {
    showError(new Error('Choose one or more .csv or .jsonl files first.'));
    return;
  }
  clearError();
  const opts = {
    model: $('#model').value.trim(),
    endpoint: $('#endpoint').value,
    priority: $('#priority').value,
    webhook: $('#webhook').value.trim(),
  };
  input.value = '';
  await Promise.all(files.map((f) => uploadOne(f, opts)));
}

// simpleJSONL reports whether a JSONL file holds simple rows, {messages}
// or {prompt} lines (docs/api.md "Files"): its first row, in the file's
// first 64 KiB, has no body. Such a file, as a CSV one, is a chat
// completions batch for the form's model.
async function simpleJSONL(file) {
  const head = await file.slice(0, 64 * 1024).text();
  const line = head.split('\n').map((l) => l.trim()).find((l) => l !== '');
  try {
    const row = JSON.parse(line);
    return row !== null && typeof row === 'object' && !('body' in row) && ('messages' in row || 'prompt' in row);
  } catch {
    return false; // the service says what is wrong with it
  }
}

async function uploadOne(file, opts) {
  const state = h('span', { class: 'state' }, 'starting');
  const bar = h('progress', { 'aria-label': `Uploading ${file.name}` });
  const li = h('li', { 'data-state': 'uploading' }, h('span', { class: 'name' }, file.name), state, bar);
  $('#uploads').prepend(li);
  try {
    const kind = /\.csv$/i.test(file.name) ? 'csv' : /\.jsonl$/i.test(file.name) ? 'jsonl' : '';
    if (!kind) throw new Error('only .csv and .jsonl files can be uploaded');
    // One model for the file's rows: a CSV's, or a JSONL of simple rows.
    const chat = kind === 'csv' || await simpleJSONL(file);
    if (chat && !opts.model) {
      throw new Error(kind === 'csv' ? 'a CSV file needs a model' : 'a JSONL file of messages or prompt lines needs a model');
    }
    const f = await uploadFile(file, (s) => { state.textContent = s; });
    state.textContent = 'creating batch';
    const body = {
      input_file_id: f.id,
      endpoint: chat ? '/v1/chat/completions' : opts.endpoint,
      completion_window: '24h',
    };
    if (chat) body.model = opts.model;
    if (opts.priority !== '') body.priority = Number(opts.priority);
    if (opts.webhook) body.webhook_url = opts.webhook;
    const b = await request('v1/batches', { method: 'POST', json: body });
    li.dataset.state = 'done';
    li.dataset.batchId = b.id;
    state.replaceChildren('batch ', batchLink(b.id));
    listPoll?.run();
  } catch (err) {
    li.dataset.state = 'error';
    state.textContent = err.message;
    showError(new APIError(`${file.name}: ${err.message}`, err.status));
  } finally {
    bar.remove();
  }
}

// ---- batch page ----

// section is a titled part of the batch page that rebuilds its body only
// when its key changes; build returns nodes, or null to hide the section,
// and may be async (it then loads from the API).
function section(title) {
  const body = h('div');
  const el = h('section', { class: 'card', hidden: true }, h('h3', {}, title), body);
  let last;
  const set = async (key, build) => {
    if (key === last) return;
    last = key;
    try {
      const c = await build();
      if (key !== last) return; // a newer update won
      el.hidden = c == null;
      body.replaceChildren(...[c ?? []].flat().filter((x) => x != null && x !== false));
    } catch (e) {
      last = undefined;
      showError(e);
    }
  };
  return { el, set };
}

function batchView(id) {
  const root = $('#batch-view');
  root.hidden = false;
  const heading = h('h2', { id: 'batch-title', tabindex: -1 }, 'Batch ', h('code', {}, id));
  const status = h('span');
  const btn = (bid, label, action) => {
    const b = h('button', { type: 'button', id: bid, hidden: true }, label);
    b.addEventListener('click', () => busy(b, action));
    return b;
  };
  let batch = null;
  const save = (fileID, suffix) => download(`v1/files/${enc(fileID)}/content`, `${id}-${suffix}.jsonl`);
  const buttons = {
    cancel: btn('cancel', 'Cancel batch', async () => {
      show(await request(`v1/batches/${enc(id)}/cancel`, { method: 'POST' }));
      poll.run();
    }),
    retry: btn('retry', 'Retry failed rows', async () => {
      const nb = await request(`v1/batches/${enc(id)}/retry`, { method: 'POST' });
      notice(`Retry batch ${nb.id} created.`);
      location.hash = `#/batches/${enc(nb.id)}`;
    }),
    output: btn('download-output', 'Download output', () => save(batch.output_file_id, 'output')),
    errors: btn('download-errors', 'Download errors', () => save(batch.error_file_id, 'errors')),
    results: btn('download-results', 'Download results',
      () => download(`v1/batches/${enc(id)}/results`, `${id}-results.jsonl`)),
  };
  const refresh = h('button', { type: 'button', id: 'refresh-batch' }, 'Refresh');
  refresh.addEventListener('click', () => { route(); $('#refresh-batch')?.focus(); });

  const s = {
    summary: section('Summary'), template: section('Template'), counts: section('Progress and usage'),
    chart: section('Progress over time'), times: section('Timestamps'), meta: section('Metadata'), hooks: section('Webhook deliveries'),
    invalid: section('Validation errors'), rows: section('Rows'), dead: section('Dead-letter rows'),
    lines: section(`First error lines (up to ${ERROR_LINES})`),
  };
  // What the page's polls read of a running batch: the chart's points.
  const seen = [];
  const article = h('article', { id: 'batch', 'aria-labelledby': 'batch-title' },
    h('p', {}, h('a', { href: '#/' }, '← All batches')),
    h('div', { class: 'title' }, heading, status),
    h('div', { class: 'actions' }, refresh, Object.values(buttons)),
    Object.values(s).map((x) => x.el));
  root.replaceChildren(article);

  function show(b) {
    batch = b;
    const hadFocus = article.contains(document.activeElement);
    const c = b.request_counts || {};
    article.dataset.status = b.status;
    status.replaceChildren(badge(b.status));
    buttons.cancel.hidden = !(b.status === 'scheduled' || (ACTIVE.has(b.status) && b.status !== 'cancelling'));
    buttons.cancel.textContent = b.status === 'scheduled' ? 'Cancel template' : 'Cancel batch';
    buttons.retry.hidden = !(TERMINAL.has(b.status) && c.failed > 0);
    buttons.output.hidden = !b.output_file_id;
    buttons.errors.hidden = !b.error_file_id;
    buttons.results.hidden = !TERMINAL.has(b.status);

    const summary = [
      ['Status', b.status], ['Endpoint', b.endpoint], ['Model', b.model], ['Priority', b.priority ?? 0],
      ['Execution', b.execution],
      ['Completion window', b.completion_window], ['Input file', b.input_file_id],
      ['Output file', b.output_file_id], ['Error file', b.error_file_id],
      ['Retry of', b.retry_of && batchLink(b.retry_of)], ['Template', b.template_id && batchLink(b.template_id)],
      ['Rows of dead chunks', b.dead_letter_count], ['Webhook URL', b.webhook_url],
    ];
    s.summary.set(JSON.stringify(summary), () => dl(summary));
    const u = b.usage || {};
    const isTemplate = b.status === 'scheduled' || Boolean(b.schedule);
    s.template.set(isTemplate ? b.status : '', () => (isTemplate ? templateInfo(b) : null));
    // A template has no rows of its own: its runs do.
    s.counts.set(isTemplate ? '' : JSON.stringify([c, u, b.cost]), () => (isTemplate ? null : [
      progress(c),
      dl([['Total rows', c.total], ['Completed', c.completed], ['Failed', c.failed],
        ['Input tokens', u.input_tokens], ['Output tokens', u.output_tokens], ['Total tokens', u.total_tokens],
        ['Cost', b.cost != null ? usd(b.cost) : null]]),
    ]));
    if (ACTIVE.has(b.status)) {
      seen.push({ at: Date.now() / 1000, done: (c.completed || 0) + (c.failed || 0), eta: b.estimated_completion_at });
    }
    s.chart.set(String(seen.length), () => progressChart(seen, c.total));
    const stamps = ['created_at', 'in_progress_at', 'finalizing_at', 'completed_at', 'failed_at',
      'expired_at', 'cancelling_at', 'cancelled_at', 'expires_at'];
    const label = (k) => k[0].toUpperCase() + k.slice(1, -3).replace('_', ' '); // in_progress_at → In progress
    s.times.set(stamps.map((k) => b[k]).join(), () => dl(stamps.map((k) => [label(k), when(b[k])])));
    const meta = Object.entries(b.metadata || {});
    s.meta.set(JSON.stringify(meta), () => (meta.length ? dl(meta) : null));
    s.hooks.set(JSON.stringify(b.webhook_deliveries ?? null), () => generic(b.webhook_deliveries));

    const invalid = b.errors?.data || [];
    s.invalid.set(JSON.stringify(invalid), () => (invalid.length ? table('Validation errors',
      ['Line', 'Code', 'Param', 'Message'], invalid.map((e) => [e.line, e.code, e.param, e.message])) : null));
    // Rows appear as their chunks commit: read again as the counts move.
    const done = (c.completed || 0) + (c.failed || 0);
    s.rows.set(isTemplate || !done ? '' : `${b.status}:${done}`, () => (isTemplate || !done ? null : rowList(id)));
    // Every failed row is a dead letter (docs/api.md "Dead letters"), listed as its chunk commits.
    const hasDead = !isTemplate && c.failed > 0;
    s.dead.set(hasDead ? `${b.status}:${c.failed}` : '', () => (hasDead ? deadLetters(id) : null));
    s.lines.set(b.error_file_id || '', () => (b.error_file_id ? errorLines(b.error_file_id) : null));

    // A button that just hid itself (Cancel) must not strand keyboard focus.
    const active = document.activeElement;
    if (hadFocus && (!article.contains(active) || active.closest('[hidden]'))) heading.focus();
  }

  const poll = poller(async (signal) => {
    const b = await request(`v1/batches/${enc(id)}`, { signal });
    show(b);
    return ACTIVE.has(b.status);
  });
  return { stop: poll.stop };
}

async function templateInfo(b) {
  const runs = await request(`v1/batches?template_id=${enc(b.id)}&limit=100`);
  return [
    dl([['Schedule', h('code', {}, b.schedule || '—')], ['Time zone', b.schedule_timezone || 'UTC']]),
    h('h4', {}, 'Runs'),
    runs.data.length
      ? table('Runs', ['ID', 'Status', 'Created', 'Progress'],
        runs.data.map((r) => [batchLink(r.id), badge(r.status), when(r.created_at), progress(r.request_counts)]))
      : h('p', { class: 'help' }, 'No runs yet.'),
  ];
}

// rowList lists a batch's committed rows (GET v1/batches/{id}/rows, its
// first page); a row's custom_id opens its generation in the row drawer.
async function rowList(id) {
  const page = await request(`v1/batches/${enc(id)}/rows?limit=100`);
  if (!page.data.length) return null;
  const open = (r) => {
    const b = h('button', { type: 'button', class: 'link', 'data-custom-id': r.custom_id }, r.custom_id);
    b.addEventListener('click', () => rowDrawer(r, b));
    return b;
  };
  return [
    table('Rows', ['custom_id', 'Status', 'Model', 'Fallback', 'Attempts', 'Total tokens'],
      page.data.map((r) => [open(r), badge(r.status), r.model, r.fallback ? 'yes' : 'no', r.attempts, tokens(r.total_tokens ?? 0)])),
    page.has_more && h('p', { class: 'help' }, 'More rows exist: ', h('code', {}, `relay batch rows ${id}`), ' lists them all.'),
  ];
}

// rowDrawer shows row r's generation (docs/api.md "Rows") in a modal
// drawer; closing it gives focus back to opener.
function rowDrawer(r, opener) {
  $('#row-drawer')?.remove();
  const close = h('button', { type: 'button', id: 'row-drawer-close' }, 'Close');
  const gen = [
    ['Status', badge(r.status)], ['Model', r.model], ['Fallback used', r.fallback ? 'yes' : 'no'],
    ['Attempts', r.attempts], ['Last upstream status', r.last_status], ['Input tokens', r.input_tokens],
    ['Output tokens', r.output_tokens], ['Total tokens', r.total_tokens], ['Submitted by key', r.key_id],
    ['Row', r.row], ['Committed', when(r.at)], ['Error', r.error && errorText(r.error)],
  ];
  const d = h('dialog', { id: 'row-drawer', class: 'drawer', 'aria-labelledby': 'row-drawer-title', 'data-custom-id': r.custom_id },
    h('div', { class: 'bar' }, h('h3', { id: 'row-drawer-title' }, 'Row ', h('code', {}, r.custom_id)), close),
    h('dl', { id: 'row-generation', class: 'pairs' }, gen.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')])));
  close.addEventListener('click', () => d.close());
  d.addEventListener('close', () => { d.remove(); opener.focus(); });
  document.body.append(d);
  d.showModal();
  close.focus();
}

async function deadLetters(id) {
  const page = await request(`v1/batches/${enc(id)}/dead_letters`);
  if (!page.data.length) return null;
  return [
    table('Dead-letter rows', ['Row', 'custom_id', 'Reason', 'Error', 'Attempts', 'Last status', 'Model'],
      page.data.map((d) => [d.row, d.custom_id, d.reason, errorText(d.error), d.attempts, d.last_status ?? '—',
        d.fallback ? `${d.model} (fallback)` : d.model])),
    page.has_more && h('p', { class: 'help' }, 'More rows exist: the error file has them all.'),
  ];
}

const errorText = (e) => (e && typeof e === 'object' ? [e.code, e.message].filter(Boolean).join(': ') || text(e) : text(e));

// errorLines shows the start of the error file: output lines (docs/api.md "Output and error files"),
// either an upstream non-2xx response or an error without response.
async function errorLines(fileID) {
  const res = await request(`v1/files/${enc(fileID)}/content`, { raw: true });
  const lines = await firstLines(res, ERROR_LINES);
  if (!lines.length) return h('p', { class: 'help' }, 'The error file is empty.');
  return table('Error lines', ['#', 'custom_id', 'Status or code', 'Message'], lines.map((line, i) => {
    try {
      const l = JSON.parse(line);
      const r = l.response;
      return [i + 1, l.custom_id, r?.status_code ?? l.error?.code,
        l.error?.message ?? r?.body?.error?.message ?? text(r?.body)];
    } catch {
      return [i + 1, '—', '—', line.slice(0, 500)];
    }
  }));
}

// generic renders a value whose shape the panel does not fix: a list of
// objects as a table, an object as pairs, anything else as text.
function generic(v) {
  if (v == null || (Array.isArray(v) && v.length === 0)) return null;
  if (Array.isArray(v) && v.every((x) => x && typeof x === 'object')) {
    const keys = [...new Set(v.flatMap(Object.keys))];
    return table('Webhook deliveries', keys, v.map((x) => keys.map((k) => (/_at$/.test(k) ? when(x[k]) : text(x[k])))));
  }
  if (typeof v === 'object' && !Array.isArray(v)) {
    return dl(Object.entries(v).map(([k, x]) => [k, /_at$/.test(k) ? when(x) : text(x)]));
  }
  return h('p', {}, text(v));
}

// ETAS is how many of the batch's last estimated_completion_at readings
// its ETA band spans.
const ETAS = 5;

// progressChart draws a running batch's rows done over time, as the page
// polled them, and the ETA band: from the last point to the earliest and
// latest of the recent estimated_completion_at readings (docs/api.md
// "Extensions"). Null before two points.
function progressChart(points, total) {
  if (points.length < 2 || !total) return null;
  const W = 600, H = 160, m = { l: 48, r: 12, t: 10, b: 10 };
  const last = points[points.length - 1];
  const etas = points.slice(-ETAS).map((p) => p.eta).filter((e) => e != null);
  const t0 = points[0].at, t1 = Math.max(last.at, ...etas);
  const x = (t) => m.l + ((t - t0) / Math.max(t1 - t0, 1)) * (W - m.l - m.r);
  const y = (n) => H - m.b - (n / total) * (H - m.t - m.b);
  const at = (t, n) => `${x(t)},${y(n)}`;
  let label = `${last.done} of ${total} rows done`;
  let band = null;
  if (etas.length) {
    const lo = Math.min(...etas), hi = Math.max(...etas);
    const clock = (t) => new Date(t * 1000).toLocaleTimeString();
    label += `; ends between ${clock(lo)} and ${clock(hi)}`;
    band = [
      svg('polygon', { class: 'eta-band', 'data-from': lo, 'data-to': hi,
        points: `${at(last.at, last.done)} ${at(lo, total)} ${at(hi, total)}` }, svg('title', {}, label)),
      svg('line', { class: 'eta', x1: x(last.at), y1: y(last.done), x2: x(etas[etas.length - 1]), y2: y(total) }),
    ];
  }
  const grid = [0, total].map((v) => svg('g', { class: 'tick' },
    svg('line', { class: 'grid', x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }),
    svg('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, String(v))));
  return svg('svg', { id: 'progress-chart', class: 'chart', role: 'img', 'aria-label': label, width: W, height: H, viewBox: `0 0 ${W} ${H}` },
    svg('g', { class: 'axis' }, grid), band,
    svg('polyline', { class: 'done', 'data-points': points.length, points: points.map((p) => at(p.at, p.done)).join(' ') }));
}

// ---- usage page: this month's spend against the tenant's budget ----

const SVG = 'http://www.w3.org/2000/svg';
const MODEL_COLORS = 6; // app.css colours models .m0 to .m5

// svg builds an SVG element as h builds an HTML one: geometry goes in
// attributes, colours in classes (the CSP forbids inline styles).
function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v != null && v !== false) el.setAttribute(k, v);
  }
  el.append(...children.flat().filter((c) => c != null && c !== false));
  return el;
}

const tokens = (n) => Number(n).toLocaleString('en-US');
const usd = (n) => `$${Number(n).toLocaleString('en-US', {
  minimumFractionDigits: 2, maximumFractionDigits: n > 0 && n < 1 ? 6 : 2,
})}`;
const monthOf = (d) => d.toISOString().slice(0, 7); // YYYY-MM, UTC
const daysIn = (month) => new Date(Date.UTC(+month.slice(0, 4), +month.slice(5, 7), 0)).getUTCDate();
const pct = (used, limit) => (limit > 0 ? Math.round((used / limit) * 100) : 0);

// niceCeil rounds n up to 1, 2 or 5 times a power of ten, for the axis.
function niceCeil(n) {
  const p = 10 ** Math.floor(Math.log10(Math.max(n, 1)));
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= n);
}

function usageView() {
  const root = $('#usage-view');
  root.hidden = false;
  const ctl = new AbortController();
  const heading = h('h2', { id: 'usage-title', tabindex: -1 }, 'Usage this month');
  const refresh = h('button', { type: 'button', id: 'refresh-usage' }, 'Refresh');
  const body = h('div', { id: 'usage-body' }, h('p', { class: 'help' }, 'Loading…'));
  root.replaceChildren(h('article', { id: 'usage', 'aria-labelledby': 'usage-title' },
    h('div', { class: 'bar' }, heading, refresh), body));

  let answer = null;
  let byKey = null;
  let byBatch = null;
  let drawnAt = 0;
  const draw = () => {
    drawnAt = body.clientWidth;
    body.replaceChildren(...usageContent(answer, drawnAt), usageBy('key', byKey), usageBy('batch', byBatch));
  };
  // docs/api.md "Usage": the days from start_time to now; the budget is
  // the current month's (UTC), so the page asks from the month's first day.
  const load = async () => {
    const now = new Date();
    const start = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) / 1000;
    const ask = (q) => request(`v1/usage?source=batch&start_time=${start}${q}`, { signal: ctl.signal });
    [answer, byKey, byBatch] = await Promise.all([ask(''), ask('&group_by=key_id'), ask('&group_by=key_id,batch_id')]);
    draw();
  };
  refresh.addEventListener('click', () => busy(refresh, load));
  load().catch(showError);
  // The chart is drawn for the width it has, so its text keeps its size:
  // it is drawn again when that width changes (a rotated phone).
  const resized = new ResizeObserver(() => {
    if (answer && body.clientWidth > 0 && body.clientWidth !== drawnAt) draw();
  });
  resized.observe(body);
  return { stop() { ctl.abort(); resized.disconnect(); } };
}

// usageContent is the page for a GET v1/usage answer u, width px wide.
function usageContent(u, width) {
  const b = u.budget || null;
  const month = b?.month || monthOf(new Date());
  const rows = (u.data || []).filter((r) => r.date.startsWith(month))
    .sort((x, y) => x.date.localeCompare(y.date) || x.model.localeCompare(y.model));
  const models = [...new Set(rows.map((r) => r.model))].sort();
  const byModel = new Map(models.map((m) => [m, 0]));
  for (const r of rows) byModel.set(r.model, byModel.get(r.model) + r.total_tokens);
  const color = (m) => `m${models.indexOf(m) % MODEL_COLORS}`;
  const inner = Math.max(width - 34, 260); // the card's padding and border

  return [
    budgetCard(b, month, byModel, color, inner),
    h('section', { class: 'card', 'aria-labelledby': 'usage-chart-title' },
      h('h3', { id: 'usage-chart-title' }, `Tokens per day, ${month}`),
      rows.length === 0 && h('p', { class: 'help' }, 'No batch usage this month yet.'),
      dailyChart(rows, month, b, color, inner),
      legend(models, byModel, color, b),
      rows.length > 0 && [
        h('h4', {}, 'Figures'),
        table('Tokens per day and model', ['Date', 'Model', 'Requests', 'Input tokens', 'Output tokens', 'Total tokens'],
          rows.map((r) => [r.date, r.model, tokens(r.requests), tokens(r.input_tokens), tokens(r.output_tokens), tokens(r.total_tokens)])),
      ]),
  ];
}

// usageBy is the month's usage per key or per batch (GET v1/usage with
// group_by=key_id, or key_id,batch_id), most tokens first.
function usageBy(what, u) {
  const rows = [...(u?.data || [])].sort((x, y) => y.total_tokens - x.total_tokens ||
    (x.batch_id || x.key_id).localeCompare(y.batch_id || y.key_id));
  const id = `usage-by-${what}`;
  const cost = (r) => (r.cost_usd == null ? '—' : usd(r.cost_usd));
  const figures = (r) => [tokens(r.requests), tokens(r.input_tokens), tokens(r.output_tokens), tokens(r.total_tokens), cost(r)];
  const heads = ['Requests', 'Input tokens', 'Output tokens', 'Total tokens', 'Cost'];
  return h('section', { class: 'card', id, 'aria-labelledby': `${id}-title` },
    h('h3', { id: `${id}-title` }, what === 'key' ? 'By API key' : 'By batch'),
    rows.length === 0 ? h('p', { class: 'help' }, 'No batch usage this month yet.')
      : what === 'key'
        ? table('Usage by key', ['Key', ...heads], rows.map((r) => [h('code', {}, r.key_id || '—'), ...figures(r)]))
        : table('Usage by batch', ['Batch', 'Key', ...heads], rows.map((r) => [batchLink(r.batch_id), h('code', {}, r.key_id || '—'), ...figures(r)])));
}

// budgetCard shows the month's budget, used and remaining (the API's
// figures, each in data-value), and a meter per limit.
function budgetCard(b, month, byModel, color, width) {
  const title = h('h3', { id: 'usage-budget-title' }, `Budget for ${month}`);
  if (!b) {
    const used = [...byModel.values()].reduce((a, n) => a + n, 0);
    return h('section', { class: 'card', 'aria-labelledby': 'usage-budget-title' }, title,
      h('p', { class: 'help' }, 'No budget is set for this tenant (',
        h('code', {}, 'relay tenants budget set --tenant NAME --monthly-tokens N'), ' sets one). ',
        `${tokens(used)} tokens used this month.`));
  }
  const figure = (label, field, fmt) => [h('dt', {}, label),
    h('dd', { 'data-field': field, 'data-value': b[field] ?? '' }, b[field] == null ? 'no limit' : fmt(b[field]))];
  const pairs = [
    figure('Budget (tokens)', 'monthly_tokens', tokens), figure('Used (tokens)', 'used_tokens', tokens),
    figure('Remaining (tokens)', 'remaining_tokens', tokens),
  ];
  if (b.monthly_usd != null) {
    pairs.push(figure('Budget (USD)', 'monthly_usd', usd), figure('Used (USD)', 'used_usd', usd),
      figure('Remaining (USD)', 'remaining_usd', usd));
  }
  return h('section', { class: 'card', 'aria-labelledby': 'usage-budget-title' }, title,
    h('dl', { id: 'usage-budget', class: 'pairs' }, pairs.flat()),
    b.monthly_tokens != null && meter({
      id: 'budget-meter', unit: 'tokens', fmt: (n) => `${tokens(n)} tokens`, width,
      used: b.used_tokens, limit: b.monthly_tokens, left: b.remaining_tokens,
      parts: [...byModel].map(([m, n]) => ({ name: m, value: n, cls: color(m) })),
    }),
    b.monthly_usd != null && meter({
      id: 'budget-meter-usd', unit: 'usd', fmt: usd, width,
      used: b.used_usd, limit: b.monthly_usd, left: b.remaining_usd,
      parts: [{ name: 'priced models', value: b.used_usd, cls: 'used' }],
    }),
    b.monthly_usd != null && h('p', { class: 'help' }, 'USD count only the models with a price in relay.yaml.'));
}

// meter is a horizontal bar: what each part used, then what is left of
// limit; past the limit, the limit is a mark on the bar.
function meter({ id, unit, fmt, width, used, limit, left, parts }) {
  const H = 22;
  const scale = Math.max(limit, used, 1);
  const x = (v) => (v / scale) * width;
  let at = 0;
  const segs = parts.filter((p) => p.value > 0).map((p) => {
    const w = x(p.value);
    const r = svg('rect', { class: `seg ${p.cls}`, x: at, y: 0, width: w, height: H, 'data-name': p.name, [`data-${unit}`]: p.value },
      svg('title', {}, `${p.name}: ${fmt(p.value)}`));
    at += w;
    return r;
  });
  const label = `${fmt(used)} of ${fmt(limit)} used (${pct(used, limit)}%), ${fmt(left)} left`;
  return h('figure', { class: 'meter' },
    svg('svg', { id, role: 'img', 'aria-label': `Budget: ${label}`, width, height: H, viewBox: `0 0 ${width} ${H}` },
      svg('rect', { class: 'remaining', x: x(Math.min(used, limit)), y: 0, width: x(left), height: H, [`data-${unit}`]: left },
        svg('title', {}, `left: ${fmt(left)}`)),
      segs,
      used > limit && svg('line', { class: 'limit', x1: x(limit), x2: x(limit), y1: 0, y2: H })),
    h('figcaption', { class: 'help' }, label));
}

// dailyChart draws a column per day of month, stacked by model, with the
// day's share of the monthly token budget as a dashed line. Each bar
// carries its figures in data attributes and a title.
function dailyChart(rows, month, b, color, width) {
  const days = daysIn(month);
  const H = 220;
  const m = { l: 56, r: 8, t: 12, b: 28 };
  const pw = width - m.l - m.r;
  const ph = H - m.t - m.b;
  const byDay = new Map();
  for (const r of rows) byDay.set(r.date, [...(byDay.get(r.date) || []), r]);
  const allowance = b?.monthly_tokens != null ? Math.floor(b.monthly_tokens / days) : null;
  const top = niceCeil(Math.max(...[...byDay.values()].map((rs) => rs.reduce((a, r) => a + r.total_tokens, 0)), allowance || 0, 1));
  const y = (v) => m.t + ph - (v / top) * ph;
  const slot = pw / days;
  const bw = Math.max(slot * 0.7, 1);
  const step = [1, 2, 5, 7, 10, 15].find((s) => s * slot >= 28) || days;

  const grid = [0, top / 2, top].map((v) => svg('g', { class: 'tick' },
    svg('line', { class: 'grid', x1: m.l, x2: width - m.r, y1: y(v), y2: y(v) }),
    svg('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, tokens(v))));
  const xLabels = [];
  for (let d = 1; d <= days; d += step) {
    xLabels.push(svg('text', { x: m.l + (d - 0.5) * slot, y: H - 8, 'text-anchor': 'middle' }, String(d)));
  }
  const bars = [];
  for (const [date, rs] of byDay) {
    const x = m.l + (Number(date.slice(8, 10)) - 1) * slot + (slot - bw) / 2;
    let base = 0;
    for (const r of rs) {
      const hgt = Math.max(y(base) - y(base + r.total_tokens), r.total_tokens > 0 ? 1 : 0);
      bars.push(svg('rect', {
        class: `bar ${color(r.model)}`, x, y: y(base) - hgt, width: bw, height: hgt,
        'data-date': date, 'data-model': r.model, 'data-tokens': r.total_tokens,
        'data-input-tokens': r.input_tokens, 'data-output-tokens': r.output_tokens, 'data-requests': r.requests,
      }, svg('title', {}, `${date} · ${r.model}: ${tokens(r.total_tokens)} tokens (${tokens(r.input_tokens)} in, ${tokens(r.output_tokens)} out; ${tokens(r.requests)} requests)`)));
      base += r.total_tokens;
    }
  }
  const share = allowance != null && svg('line', {
    class: 'allowance', x1: m.l, x2: width - m.r, y1: y(allowance), y2: y(allowance), 'data-tokens': allowance,
  }, svg('title', {}, `Daily share of the budget: ${tokens(allowance)} tokens (${tokens(b.monthly_tokens)} over ${days} days)`));
  const label = `Tokens per day and model in ${month}, ${rows.length} figures` +
    (allowance != null ? `; the daily share of the budget is ${tokens(allowance)} tokens` : '') + '; the table below lists them';
  return svg('svg', { id: 'usage-chart', class: 'chart', role: 'img', 'aria-label': label, width, height: H, viewBox: `0 0 ${width} ${H}` },
    svg('g', { class: 'axis' }, grid, xLabels), bars, share);
}

function legend(models, byModel, color, b) {
  return h('ul', { class: 'legend', 'aria-label': 'Legend' },
    models.map((m) => h('li', {}, h('span', { class: `swatch ${color(m)}` }), `${m}: ${tokens(byModel.get(m))} tokens`)),
    b?.monthly_tokens != null && h('li', {}, h('span', { class: 'swatch allowance' }), 'daily share of the budget'));
}

// ---- Operations page: GET v1/admin/operations, an admin key's ----

// opsView shows what relay admin models, batch inspect and dlq list read
// (internal/ops), polled while open.
function opsView() {
  const root = $('#ops-view');
  root.hidden = false;
  const heading = h('h2', { id: 'ops-title', tabindex: -1 }, 'Operations');
  const refresh = h('button', { type: 'button', id: 'refresh-ops' }, 'Refresh');
  const body = h('div', { id: 'ops-body' }, h('p', { class: 'help' }, 'Loading…'));
  root.replaceChildren(h('article', { id: 'ops', 'aria-labelledby': 'ops-title' },
    h('div', { class: 'bar' }, heading, refresh), body));
  const poll = poller(async (signal) => {
    try {
      body.replaceChildren(...opsContent(await request('v1/admin/operations', { signal })));
    } catch (e) {
      if (!(e instanceof APIError) || e.status !== 403) throw e;
      body.replaceChildren(h('p', { id: 'ops-forbidden' }, 'The Operations page needs an admin key: ',
        h('code', {}, 'relay keys create --tenant NAME --scopes admin'), '.'));
      return false;
    }
    return true;
  });
  refresh.addEventListener('click', () => poll.run());
  return poll;
}

// opsContent is the page for a GET v1/admin/operations answer o.
function opsContent(o) {
  const card = (id, title, ...children) => h('section', { class: 'card', 'aria-labelledby': id }, h('h3', { id }, title), ...children);
  const none = (what) => h('p', { class: 'help' }, what);
  const dlqs = Object.entries(o.dead_letter_queues || {});
  const mins = Math.round((o.upstream?.window_seconds || 0) / 60);
  return [
    card('ops-models-title', 'Models',
      table('Capacity per model', ['Model', 'In flight', 'Capacity', 'Waiting batches', 'Over quota'],
        o.models.map((m) => [m.model, String(m.in_flight), String(m.max_concurrency),
          m.waiting.length ? m.waiting.map((w) => w.Batch).join(', ') : '0',
          m.over_quota?.length ? `shards ${m.over_quota.join(', ')}` : 'no'])),
      table('Keys per model', ['Model', 'Key', 'State', 'Concurrency limit', 'RPM in use', 'TPM in use', '429s per minute', 'Circuit'],
        o.models.flatMap((m) => (m.keys || []).map((k) => [m.model, k.key_env,
          k.state === 'dropped' ? `dropped (${k.dropped_status})` : k.state, String(k.concurrency_limit),
          k.rpm ? `${tokens(k.rpm_in_use)} of ${tokens(k.rpm)}` : '—', k.tpm ? `${tokens(k.tpm_in_use)} of ${tokens(k.tpm)}` : '—',
          String(k.rate_limited_per_minute), k.circuit])))),
    card('ops-upstream-title', `Upstream answers, last ${mins} minutes`,
      o.upstream.models.length === 0 ? none('No rows committed in this process yet (in a deployment: the dashboard).')
        : table('Upstream answers per model', ['Model', 'Completed', 'Failed', '4xx', '429', '5xx', 'No answer'],
          o.upstream.models.map((a) => [a.model, tokens(a.completed), tokens(a.failed), tokens(a.upstream_4xx),
            tokens(a.upstream_429), tokens(a.upstream_5xx), tokens(a.no_answer)]))),
    card('ops-dlq-title', 'Dead-letter queues',
      table('Dead-letter queue depths', ['Queue', 'Messages'], dlqs.map(([q, n]) => [`${q}-dlq`, String(n)])),
      dlqs.some(([, n]) => n > 0) && h('p', { class: 'help' }, 'Inspect and redrive: ', h('code', {}, 'relay admin dlq list QUEUE'), '.')),
    card('ops-stuck-title', 'Stuck chunks',
      o.stuck_chunks.length === 0 ? none('None: every claimed chunk holds its lease.')
        : table('Chunks whose lease ended', ['Batch', 'Chunk', 'Model', 'Run', 'Attempts', 'Lease ended'],
          o.stuck_chunks.map((c) => [batchLink(c.batch_id), String(c.chunk), c.model, c.run, String(c.attempts),
            new Date(c.lease_until).toLocaleString()])),
      o.stuck_chunks.length > 0 && h('p', { class: 'help' }, 'The tick takes them over: ', h('code', {}, 'relay admin tick'), '.')),
  ];
}

// ---- wiring ----

$('#key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const k = $('#key').value.trim();
  if (!k) return;
  setKey(k, $('#remember').checked);
  $('#key').value = '';
  clearError();
  route();
  $('#main').focus();
});
$('#sign-out').addEventListener('click', () => {
  clearError();
  signOut();
  $('#key').focus();
});
$('#error-close').addEventListener('click', clearError);
$('#upload-form').addEventListener('submit', uploadAll);
$('#refresh').addEventListener('click', () => listPoll?.run());
$('#load-more').addEventListener('click', (e) => busy(e.currentTarget, async () => {
  merge(await request(`v1/batches?limit=100&after=${enc(after)}`), false);
}));

// Dropping files on the zone puts them in the file input, as if chosen.
const drop = $('#drop');
drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  $('#files').files = e.dataTransfer.files;
  notice(`${e.dataTransfer.files.length} file(s) selected.`);
});
// A file dropped elsewhere must not make the browser navigate away.
window.addEventListener('dragover', (e) => e.preventDefault());
window.addEventListener('drop', (e) => e.preventDefault());

window.addEventListener('hashchange', () => {
  clearError(); // an error belongs to the page it happened on
  route();
  $('#main').focus();
});
route();
