// The panel's UI: key entry, the batches list, uploads and the batch page.
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

// ---- routing: #/ is the list, #/batches/<id> a batch ----

let view = null; // the current view's {stop}

function route() {
  view?.stop();
  view = null;
  const signedIn = hasKey();
  $('#nav').hidden = !signedIn;
  $('#login').hidden = signedIn;
  $('#list-view').hidden = true;
  $('#batch-view').hidden = true;
  if (!signedIn) return;
  const m = /^#\/batches\/([^/]+)$/.exec(location.hash);
  view = m ? batchView(decodeURIComponent(m[1])) : listView();
}

function signOut() {
  clearKey();
  rows.clear();
  $('#batches tbody').replaceChildren();
  $('#uploads').replaceChildren();
  $('#batch-view').replaceChildren();
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

// loadModels offers the configured models for CSV files, the first one
// preselected; without them the field stays free text.
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

async function uploadOne(file, opts) {
  const state = h('span', { class: 'state' }, 'starting');
  const bar = h('progress', { 'aria-label': `Uploading ${file.name}` });
  const li = h('li', { 'data-state': 'uploading' }, h('span', { class: 'name' }, file.name), state, bar);
  $('#uploads').prepend(li);
  try {
    const kind = /\.csv$/i.test(file.name) ? 'csv' : /\.jsonl$/i.test(file.name) ? 'jsonl' : '';
    if (!kind) throw new Error('only .csv and .jsonl files can be uploaded');
    if (kind === 'csv' && !opts.model) throw new Error('a CSV file needs a model');
    const f = await uploadFile(file, (s) => { state.textContent = s; });
    state.textContent = 'creating batch';
    const body = {
      input_file_id: f.id,
      endpoint: kind === 'csv' ? '/v1/chat/completions' : opts.endpoint,
      completion_window: '24h',
    };
    if (kind === 'csv') body.model = opts.model;
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
    times: section('Timestamps'), meta: section('Metadata'), hooks: section('Webhook deliveries'),
    invalid: section('Validation errors'), dead: section('Dead-letter rows'),
    lines: section(`First error lines (up to ${ERROR_LINES})`),
  };
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
      ['Dead letters', b.dead_letter_count], ['Webhook URL', b.webhook_url],
    ];
    s.summary.set(JSON.stringify(summary), () => dl(summary));
    const u = b.usage || {};
    const isTemplate = b.status === 'scheduled' || Boolean(b.schedule);
    s.template.set(isTemplate ? b.status : '', () => (isTemplate ? templateInfo(b) : null));
    // A template has no rows of its own: its runs do.
    s.counts.set(isTemplate ? '' : JSON.stringify([c, u]), () => (isTemplate ? null : [
      progress(c),
      dl([['Total rows', c.total], ['Completed', c.completed], ['Failed', c.failed],
        ['Input tokens', u.input_tokens], ['Output tokens', u.output_tokens], ['Total tokens', u.total_tokens]]),
    ]));
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
    const hasDead = b.dead_letter_count > 0 || (b.dead_letter_count == null && TERMINAL.has(b.status));
    s.dead.set(hasDead ? `${b.status}:${b.dead_letter_count}` : '', () => (hasDead ? deadLetters(id) : null));
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

async function deadLetters(id) {
  const page = await request(`v1/batches/${enc(id)}/dead_letters`);
  if (!page.data.length) return null;
  return [
    table('Dead-letter rows', ['custom_id', 'Error', 'Attempts', 'Last status'],
      page.data.map((d) => [d.custom_id, errorText(d.error), d.attempts, d.last_status])),
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
