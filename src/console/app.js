// idem console: a static, dependency-free front-end for the idem HTTP API.
//
// Signs in with a tenant API key (kept in sessionStorage only, sent as a Bearer token to
// same-origin /v1/... paths), then shows decisions, deliveries, endpoints and sources behind hash
// routes. Every 2 s it refreshes the header figures and the current view's data region.
// It runs under a strict CSP: the DOM is built with createElement/textContent (never
// HTML strings), styling is only by classes from app.css, and nothing is evaluated.

const KEY = 'idem.key';
const REFRESH_MS = 2000;
const TIMEOUT_MS = 10000;
const BULK_TIMEOUT_MS = 600000;
const PAGE = 50;
const STATUSES = ['queued', 'delivered', 'failed', 'dead', 'dropped'];
const REFUSED = 'The key was refused; sign in again.';

const state = {
  key: null,          // the API key while signed in
  route: null,        // parsed hash route
  gen: 0,             // bumped on route change and sign-out; stale refresh results are dropped
  pages: 1,           // pages of the current list shown ("Load more" adds one)
  rendered: null,     // JSON of the data last rendered, to skip identical re-renders
  running: false,     // a refresh is in flight
  again: false,       // another refresh was asked for while one was in flight
  timer: 0,
  busy: new Set(),    // delivery ids (or 'bulk') with a redeliver request in flight
  subject: '',        // the subject searched for: kept here, never in the URL or history
  bulkKey: null,      // the Idempotency-Key of a bulk redelivery until it is answered
};

const $ = (sel) => document.querySelector(sel);

/** An API failure; status 0 means idem did not answer. */
class ApiError extends Error {
  constructor(status, message, problem = {}) {
    super(message);
    this.status = status;
    this.problem = problem;
  }
}

// ---------------------------------------------------------------- DOM helpers

/** Creates an element: props are attributes, plus class, text, and on<event> listeners. */
function el(tag, props = {}, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v == null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid != null && kid !== false) node.append(kid instanceof Node ? kid : String(kid));
  }
  return node;
}

const code = (text) => el('code', { text });
const muted = (text) => el('span', { class: 'muted', text });

/** A number for display; at or above the server's counting cap it reads "10,000+". */
function count(n, cap) {
  if (cap != null && n >= cap) return `${cap.toLocaleString()}+`;
  return (n ?? 0).toLocaleString();
}

/** A short local time; the date is added when it is not today. */
function shortTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const now = new Date();
  const opts = { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' };
  if (d.toDateString() !== now.toDateString()) Object.assign(opts, { month: 'short', day: 'numeric' });
  if (d.getFullYear() !== now.getFullYear()) opts.year = 'numeric';
  return d.toLocaleString([], opts);
}

/** A <time> in local time with the full ISO string as its title, or a dash. */
function timeEl(iso) {
  if (!iso) return muted('—');
  return el('time', { datetime: iso, title: iso, text: shortTime(iso) });
}

const statusBadge = (status, title) =>
  el('span', { class: `badge status status-${status}`, title, text: status });
const verdictBadge = (verdict) =>
  el('span', { class: `badge verdict verdict-${verdict}`, text: verdict });
const stateBadge = (s) => el('span', { class: `badge state state-${s}`, text: s });
const sourceText = (source) => (source == null ? muted('API') : el('span', { text: source }));
const canRedeliver = (status) => status === 'failed' || status === 'dead';
const decisionHref = (id) => `#/decisions/${encodeURIComponent(id)}`;

/** The outcome of one attempt: its status code (2xx green, else red) or its error. */
function outcome(attempt) {
  if (!attempt) return muted('—');
  const c = attempt.status_code;
  const ok = c != null && c >= 200 && c < 300;
  const text = c != null ? String(c) : attempt.error || 'no answer';
  return el('span', { class: `outcome ${ok ? 'ok' : 'bad'}`, title: attempt.error || null, text });
}

/** A table with a header row; a heading starting with '.' is for screen readers only. */
function table(id, heads, rows) {
  return el('div', { class: 'table-wrap' },
    el('table', { id, class: 'grid' },
      el('thead', {}, el('tr', {}, heads.map((h) => el('th', { scope: 'col' },
        h.startsWith('.') ? el('span', { class: 'visually-hidden', text: h.slice(1) }) : h)))),
      el('tbody', {}, rows)));
}

/** A definition list of [label, value] pairs; null values are left out. */
function fields(pairs) {
  return el('dl', { class: 'fields' },
    pairs.filter(([, v]) => v != null).map(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
}

/** The "Load more" button, when the list has a next page. */
function loadMore(next) {
  if (!next) return null;
  return el('p', { class: 'more' }, el('button', {
    type: 'button', 'data-key': 'more', text: 'Load more',
    onclick: (e) => { e.currentTarget.disabled = true; state.pages += 1; state.rendered = null; refresh(); },
  }));
}

function showError(message) {
  const box = $('#error');
  box.textContent = message || '';
  box.hidden = !message;
}

function showNotice(message, bad = false) {
  const box = $('#notice');
  box.textContent = message || '';
  box.classList.toggle('bad', bad);
  box.hidden = !message;
}

function showSigninError(message) {
  const box = $('#signin-error');
  box.replaceChildren(...[message || []].flat());
  box.hidden = !box.textContent;
}

// ---------------------------------------------------------------- API

/** Fetches a same-origin API path as JSON; throws ApiError with a message saying what to do. */
async function api(path, { method = 'GET', body, headers = {}, key = state.key, timeout = TIMEOUT_MS } = {}) {
  let res;
  try {
    res = await fetch(path, {
      method, body, cache: 'no-store', credentials: 'omit',
      signal: AbortSignal.timeout(timeout),
      headers: { Accept: 'application/json', Authorization: `Bearer ${key}`, ...headers },
    });
  } catch (e) {
    const why = e.name === 'TimeoutError' ? `no answer within ${timeout / 1000} s` : e.message;
    throw new ApiError(0, `idem does not answer (${why}): is it running?`);
  }
  if (res.ok) {
    if (res.status === 204) return null;
    try { return await res.json(); } catch {
      throw new ApiError(res.status, 'idem sent a response that is not JSON: is this address an idem?');
    }
  }
  let problem = {};
  try { problem = await res.json(); } catch { /* not problem+json */ }
  let message = problem.detail || problem.title || res.statusText || `HTTP ${res.status}`;
  if (res.status >= 500) message += ' Retry in a moment.';
  throw new ApiError(res.status, message, problem);
}

/** Fetches state.pages pages of a list, following next_after cursors. */
async function loadPages(base) {
  const rows = [];
  let after = null;
  for (let i = 0; i < state.pages; i += 1) {
    const page = await api(after ? `${base}&after=${encodeURIComponent(after)}` : base);
    rows.push(...page.data);
    after = page.next_after;
    if (!after) break;
  }
  return { rows, next: after };
}

/** A v4 UUID; crypto.randomUUID is missing outside secure contexts (plain http). */
function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// ---------------------------------------------------------------- actions

/** Reports a failed action in #notice, or signs out on 401. */
function actionFailed(e) {
  if (e.status === 401) signOut(REFUSED);
  else showNotice(e.message, true);
}

function redeliverButton(id) {
  return el('button', {
    type: 'button', class: 'redeliver', 'data-key': `redeliver:${id}`, text: 'Redeliver',
    disabled: state.busy.has(id), onclick: (e) => redeliver(id, e.currentTarget),
  });
}

/** Starts a new delivery of one failed or dead callback. */
async function redeliver(id, button) {
  state.busy.add(id);
  button.disabled = true;
  try {
    await api(`/v1/deliveries/${encodeURIComponent(id)}/redeliver`, { method: 'POST' });
    showNotice(`Redelivery started for ${id}`);
  } catch (e) {
    actionFailed(e);
  } finally {
    state.busy.delete(id);
    state.rendered = null;
    refresh();
  }
}

/** Redelivers every dead callback of the tenant. A press after a failed one sends the same
 *  Idempotency-Key, so what the first got through is not redelivered twice; an answered
 *  press ends the key. Many deliveries take a while: the request may run for minutes. */
async function redeliverDead(button) {
  state.busy.add('bulk');
  button.disabled = true;
  state.bulkKey ??= uuid();
  try {
    const res = await api('/v1/deliveries/redeliver', {
      method: 'POST',
      body: JSON.stringify({ status: 'dead' }),
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': state.bulkKey },
      timeout: BULK_TIMEOUT_MS,
    });
    state.bulkKey = null;
    const n = res?.redelivered ?? 0;
    showNotice(n ? `${n.toLocaleString()} dead ${n === 1 ? 'delivery' : 'deliveries'} redelivered`
      : 'No dead delivery to redeliver.');
  } catch (e) {
    actionFailed(e);
  } finally {
    state.busy.delete('bulk');
    state.rendered = null;
    refresh();
  }
}

// ---------------------------------------------------------------- views
// Each view: build(route) returns the static part (forms, tabs) and the #data region;
// load(route) fetches its data; render(route, data) returns the nodes of #data;
// sync(route, data), if any, updates static controls on every refresh.

const dataRegion = () => el('div', { id: 'data', class: 'data' }, el('p', { class: 'loading', text: 'Loading…' }));

const NO_DECISIONS = ['No decisions yet. Post a signal to ', code('POST /v1/signals'),
  ', or point a source at ', code('POST /v1/sources/<tenant>/<source>'), ', and it appears here.'];
const NO_MATCH = 'No decision about this subject (within decisions.retention). '
  + 'Check the identifier: it must be exactly the subject the signal carried.';

/** One row of the decisions table; a click anywhere on it opens the decision. */
function decisionRow(d) {
  const href = decisionHref(d.decision_id);
  return el('tr', {
    'data-id': d.decision_id, class: 'clickable',
    onclick: (e) => {
      if (e.target.closest('a, button') || String(getSelection())) return;
      location.hash = href;
    },
  },
  el('td', { class: 'nowrap' }, timeEl(d.created_at)),
  el('td', { text: d.type }),
  el('td', {}, verdictBadge(d.decision)),
  el('td', {}, sourceText(d.source)),
  el('td', { class: 'mono', title: d.subject_hash, text: `${d.subject_hash.slice(0, 12)}…` }),
  el('td', { class: 'badges' }, d.actions.length ? d.actions.map((a) => statusBadge(a.status, a.name)) : muted('none')),
  el('td', {}, el('a', { href, class: 'mono', 'data-key': `open:${d.decision_id}`, text: d.decision_id })));
}

const decisionsView = {
  build(r) {
    const input = el('input', {
      id: 'subject', type: 'search', placeholder: 'Subject (phone number, account id)',
      autocomplete: 'off', spellcheck: 'false',
    });
    input.value = state.subject;
    const search = (s) => { state.subject = s; route(); };
    const form = el('form', { id: 'search', class: 'search', role: 'search', onsubmit: (e) => {
      e.preventDefault();
      search(input.value.trim());
    } },
    el('label', { for: 'subject', class: 'visually-hidden', text: 'Subject' }),
    input,
    el('button', { type: 'submit', class: 'primary', text: 'Search' }),
    state.subject ? el('button', { type: 'button', class: 'clear', text: 'Clear', onclick: () => search('') }) : null);
    return [el('div', { class: 'toolbar' }, el('h1', { text: 'Decisions' }), form), dataRegion()];
  },
  load() {
    const subject = state.subject ? `&subject=${encodeURIComponent(state.subject)}` : '';
    return loadPages(`/v1/decisions?limit=${PAGE}${subject}`);
  },
  render(r, { rows, next }) {
    if (!rows.length) return [el('p', { id: 'empty', class: 'empty' }, state.subject ? NO_MATCH : NO_DECISIONS)];
    return [table('decisions', ['Time', 'Type', 'Verdict', 'Source', 'Subject', 'Actions', 'Decision'],
      rows.map(decisionRow)), loadMore(next)];
  },
};

/** Why a delivery is dead, in words. */
const DEAD_REASONS = {
  attempts_exhausted: 'every attempt failed',
  endpoint_open: 'its endpoint stayed open past max_hold',
};

/** One action of a decision, with its delivery and the timeline of its attempts. */
function actionSection(action, res) {
  const v = res.value;
  const status = v?.status ?? action.status;
  const attempts = v?.attempts ?? [];
  return el('section', { class: 'action card', 'data-delivery': action.delivery_id },
    el('div', { class: 'action-head' },
      el('h3', { text: action.name }), statusBadge(status),
      canRedeliver(status) ? redeliverButton(action.delivery_id) : null),
    fields([
      ['Delivery', el('span', { class: 'mono', text: action.delivery_id })],
      action.stream_id
        ? ['Stream', el('span', { class: 'mono', text: action.stream_id })]
        : ['URL', v ? el('span', { class: 'mono break', text: v.url }) : null],
      ['Attempts', v ? v.attempts_total.toLocaleString() : null],
      ['Next attempt', v && status === 'queued' && v.next_attempt_at ? timeEl(v.next_attempt_at) : null],
      ['Dead because', v && v.dead_reason ? DEAD_REASONS[v.dead_reason] ?? v.dead_reason : null],
    ]),
    res.error ? el('p', { class: 'inline-error', text: `Delivery details unavailable: ${res.error}` }) : null,
    v && !attempts.length ? el('p', { class: 'muted', text: 'No attempt yet.' }) : null,
    attempts.length ? el('ol', { class: 'attempts' }, attempts.map((a) => el('li', {},
      el('span', { class: 'attempt-n', text: `#${a.attempt}` }), timeEl(a.at), outcome(a),
      el('span', { class: 'latency', text: a.latency_ms == null ? '' : `${a.latency_ms.toLocaleString()} ms` }),
      a.status_code != null && a.error ? el('span', { class: 'muted', text: a.error }) : null))) : null,
    v && v.attempts_total > attempts.length
      ? el('p', { class: 'muted', text: `Showing ${attempts.length} of ${v.attempts_total.toLocaleString()} attempts.` }) : null);
}

const decisionView = {
  build() {
    return [el('p', { class: 'back' }, el('a', { href: '#/decisions', text: '← Decisions' })), dataRegion()];
  },
  async load(r) {
    let d;
    try {
      d = await api(`/v1/decisions/${encodeURIComponent(r.id)}`);
    } catch (e) {
      if (e.status === 404) e.message = 'No such decision for this tenant (or it is past decisions.retention).';
      throw e;
    }
    const settled = await Promise.allSettled(
      d.actions.map((a) => api(`/v1/deliveries/${encodeURIComponent(a.delivery_id)}`)));
    const refused = settled.find((s) => s.status === 'rejected' && s.reason.status === 401);
    if (refused) throw refused.reason;
    return { d, deliveries: settled.map((s) => (s.status === 'fulfilled' ? { value: s.value } : { error: s.reason.message })) };
  },
  render(r, { d, deliveries }) {
    return [
      el('section', { id: 'decision', class: 'card' },
        el('h1', { text: 'Decision' }),
        fields([
          ['ID', el('span', { class: 'mono', text: d.decision_id })],
          ['Type', d.type],
          ['Verdict', verdictBadge(d.decision)],
          // The playbook's rule that decided, or its own decision.
          ['Rule', d.rule == null ? muted('the playbook\'s own decision')
            : el('span', { id: 'rule', class: 'mono', text: d.rule })],
          ['Rule errors', !(d.rule_errors && d.rule_errors.length) ? null
            : el('ul', { id: 'rule-errors' },
              ...d.rule_errors.map((e) => el('li', {}, code(e.rule), ' ', e.message)))],
          ['Source', sourceText(d.source)],
          ['Subject hash', el('span', { class: 'mono break', text: d.subject_hash })],
          ['Created', timeEl(d.created_at)],
          // Where tracing is on: the trace its callbacks' attempts belong to, to look up in
          // the tracing backend.
          ['Trace', d.trace_id == null ? null
            : el('span', { id: 'trace-id', class: 'mono break', title: 'W3C trace id', text: d.trace_id })],
        ])),
      el('h2', { text: 'Actions' }),
      d.actions.length ? d.actions.map((a, i) => actionSection(a, deliveries[i]))
        : el('p', { class: 'empty', text: 'This playbook has no actions: a decision without callbacks.' }),
    ];
  },
};

const NO_DELIVERIES = {
  queued: 'Nothing is waiting: every callback was answered.',
  delivered: 'No delivered callbacks yet.',
  failed: 'No failed callbacks: none was refused by its receiver (4xx).',
  dead: 'No dead callbacks: none ran out of retries.',
  dropped: 'Nothing dropped: no Security Event Token found its stream disabled.',
};

/** Where a delivery goes: a callback's URL, or the stream a Security Event Token goes to. */
function destination(url) {
  return url.startsWith('ssf:') ? `stream ${url.slice(4)}` : url;
}

/** One row of the deliveries table; columns depend on the tab. */
function deliveryRow(d, tab) {
  return el('tr', { 'data-id': d.id },
    el('td', { class: 'nowrap' }, timeEl(d.created_at)),
    el('td', { title: d.id, text: d.action }),
    el('td', { class: 'mono url', title: d.url, text: destination(d.url) }),
    el('td', {}, statusBadge(d.status)),
    el('td', { class: 'numeric', text: d.attempts_total.toLocaleString() }),
    el('td', {}, outcome((d.attempts ?? []).at(-1))),
    tab === 'queued' ? el('td', { class: 'nowrap' }, timeEl(d.next_attempt_at)) : null,
    el('td', {}, el('a', { href: decisionHref(d.decision_id), class: 'mono', text: d.decision_id })),
    canRedeliver(tab) ? el('td', {}, canRedeliver(d.status) ? redeliverButton(d.id) : null) : null);
}

const deliveriesView = {
  build(r) {
    const tabs = el('nav', { class: 'tabs', 'aria-label': 'Delivery status' }, STATUSES.map((s) => el('a', {
      class: s === r.status ? 'tab current' : 'tab', 'data-status': s, href: `#/deliveries?status=${s}`,
      'aria-current': s === r.status ? 'page' : null, text: s,
    })));
    const bulk = r.status === 'dead' ? el('button', {
      id: 'redeliver-dead', type: 'button', disabled: true, text: 'Redeliver all dead',
      onclick: (e) => redeliverDead(e.currentTarget),
    }) : null;
    return [el('div', { class: 'toolbar' }, el('h1', { text: 'Deliveries' }), tabs, bulk), dataRegion()];
  },
  load: (r) => loadPages(`/v1/deliveries?status=${r.status}&limit=${PAGE}`),
  sync(r, { rows }) {
    const bulk = $('#redeliver-dead');
    if (bulk) bulk.disabled = !rows.length || state.busy.has('bulk');
  },
  render(r, { rows, next }) {
    if (!rows.length) return [el('p', { id: 'empty', class: 'empty', text: NO_DELIVERIES[r.status] })];
    const heads = ['Created', 'Action', 'Destination', 'Status', 'Attempts', 'Last outcome'];
    if (r.status === 'queued') heads.push('Next attempt');
    heads.push('Decision');
    if (canRedeliver(r.status)) heads.push('.Redeliver');
    return [table('deliveries', heads, rows.map((d) => deliveryRow(d, r.status))), loadMore(next)];
  },
};

const endpointsView = {
  build() {
    return [
      el('div', { class: 'toolbar' }, el('h1', { text: 'Endpoints' })),
      el('p', { class: 'hint' }, 'An endpoint opens after ', code('delivery.breaker_threshold'),
        ' failures in a row; attempts resume after ', code('delivery.breaker_cooldown'), '.'),
      dataRegion(),
    ];
  },
  load: async () => (await api('/v1/endpoints')).data,
  render(r, rows) {
    if (!rows.length) return [el('p', { id: 'empty', class: 'empty', text: "No endpoints: the tenant's playbooks have no actions." })];
    return [table('endpoints', ['URL', 'State', 'Consecutive failures', 'Last success', 'Last failure', 'Queued'],
      rows.map((e) => el('tr', { 'data-url': e.url },
        el('td', { class: 'mono url', title: e.url, text: e.url }),
        el('td', {}, stateBadge(e.state)),
        el('td', { class: 'numeric', text: e.consecutive_failures.toLocaleString() }),
        el('td', { class: 'nowrap' }, timeEl(e.last_success_at)),
        el('td', { class: 'nowrap' }, timeEl(e.last_failure_at)),
        el('td', { class: 'numeric', text: e.queued.toLocaleString() }))))];
  },
};

/** What an SSF transmitter last announced, and how polling goes, in a few words. */
function transmitterCell(st) {
  const parts = [];
  const sub = st.subscription;
  if (sub) {
    parts.push(el('span', { class: `badge subscription stream-${sub.status || 'unknown'}`, title: 'the stream idem made at its transmitter',
      text: sub.stream_id ? `${sub.stream_id} ${sub.status || '?'}` : 'no stream yet' }));
    parts.push(sub.verified_at
      ? el('span', { class: 'badge verified', title: `verified ${sub.verified_at}`, text: 'verified' })
      : el('span', { class: 'badge unverified', text: 'not verified' }));
    if (sub.last_error) parts.push(el('span', { class: 'badge status-failed', title: sub.last_error, text: 'subscription failing' }));
  } else if (st.verification) {
    parts.push(el('span', { class: 'badge', title: `verified ${st.verification.at}`, text: 'verified' }));
  }
  if (st.stream) parts.push(el('span', { class: `badge stream stream-${st.stream.status || 'unknown'}`, title: st.stream.reason || '', text: `stream ${st.stream.status || '?'}` }));
  if (st.poll) {
    parts.push(st.poll.last_error
      ? el('span', { class: 'badge status-failed', title: st.poll.last_error, text: 'poll failing' })
      : el('span', { class: 'badge status-delivered', text: `polled, ${st.poll.acked.toLocaleString()} acked` }));
  }
  return el('td', { class: 'badges' }, ...parts);
}

const sourcesView = {
  build() {
    return [
      el('div', { class: 'toolbar' }, el('h1', { text: 'Sources' })),
      el('p', { class: 'hint' }, 'What became of each source\'s events, as this node counted them since it started; senders post to ',
        code('/v1/sources/<tenant>/<source>'), '.'),
      dataRegion(),
    ];
  },
  load: async () => (await api('/v1/sources')).data,
  render(r, rows) {
    if (!rows.length) return [el('p', { id: 'empty', class: 'empty', text: 'No sources: the tenant has no [tenants.<t>.sources] tables.' })];
    return [table('sources', ['Source', 'Kind', 'Accepted', 'Duplicates', 'Ignored', 'Refused', 'Last event', 'Transmitter'],
      rows.map(({ name, status: st }) => el('tr', { 'data-source': name },
        el('td', { class: 'mono', text: name }),
        el('td', {}, el('span', { class: 'badge', text: st.kind })),
        el('td', { class: 'numeric accepted', text: st.accepted.toLocaleString() }),
        el('td', { class: 'numeric duplicates', text: st.duplicates.toLocaleString() }),
        el('td', { class: 'numeric ignored', text: st.ignored.toLocaleString() }),
        el('td', { class: 'numeric refused', text: st.refused.toLocaleString() }),
        el('td', { class: 'nowrap' }, timeEl(st.last_event_at)),
        transmitterCell(st))))];
  },
};

const VIEWS = { decisions: decisionsView, decision: decisionView, deliveries: deliveriesView, endpoints: endpointsView, sources: sourcesView };

// ---------------------------------------------------------------- routing

/** Parses location.hash; null for an unknown route. */
function parseRoute() {
  const [path, query = ''] = location.hash.replace(/^#/, '').split('?');
  const q = new URLSearchParams(query);
  if (path === '' || path === '/' || path === '/decisions') return { view: 'decisions' };
  if (path === '/deliveries') {
    const s = q.get('status');
    return { view: 'deliveries', status: STATUSES.includes(s) ? s : 'dead' };
  }
  if (path === '/endpoints') return { view: 'endpoints' };
  if (path === '/sources') return { view: 'sources' };
  const m = path.match(/^\/decisions\/([^/]+)$/);
  if (!m) return null;
  try { return { view: 'decision', id: decodeURIComponent(m[1]) }; } catch { return null; }
}

/** Marks the nav link of the current view. */
function markNav(r) {
  const current = r.view === 'decision' ? 'decisions' : r.view;
  for (const a of document.querySelectorAll('#nav a')) {
    const on = a.dataset.view === current;
    a.classList.toggle('current', on);
    if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
}

/** Builds the view of the current hash and refreshes it at once. */
function route() {
  if (!state.key) return;
  let r = parseRoute();
  if (!r) {
    history.replaceState(null, '', '#/decisions');
    r = { view: 'decisions' };
  }
  const searching = document.activeElement?.id === 'subject';
  Object.assign(state, { route: r, gen: state.gen + 1, pages: 1, rendered: null });
  markNav(r);
  showError('');
  showNotice('');
  $('#view').replaceChildren(...VIEWS[r.view].build(r).flat().filter(Boolean));
  if (searching) $('#subject')?.focus();
  scrollTo(0, 0);
  refresh();
}

// ---------------------------------------------------------------- refresh

function renderFigures(s) {
  $('#tenant').textContent = s.tenant;
  document.title = `${s.tenant} · idem`;
  const set = (name, n, cap) => { $(`#fig-${name} .num`).textContent = count(n, cap); };
  set('signals', s.signals);
  set('decisions', s.decisions);
  set('queued', s.queued, s.counted_to);
  set('dead', s.dead, s.counted_to);
  $('#fig-dead').classList.toggle('alarm', s.dead > 0);
  for (const c of document.querySelectorAll('#figures .caption')) {
    c.textContent = `since ${shortTime(s.since)}`;
    c.title = s.since;
  }
}

/** Replaces the #data region, unless the data is unchanged; keeps scroll and focus. */
function renderData(r, data) {
  const view = VIEWS[r.view];
  view.sync?.(r, data);
  const sig = JSON.stringify(data);
  const region = $('#data');
  if (!region || sig === state.rendered) return;
  state.rendered = sig;
  const active = document.activeElement;
  const key = region.contains(active) ? active.closest('[data-key]')?.dataset.key : null;
  const y = scrollY;
  region.replaceChildren(...view.render(r, data).flat().filter(Boolean));
  if (scrollY !== y) scrollTo(0, y);
  if (key) region.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
}

/** One pass: the figures and the current view's data, fetched in parallel. */
async function refreshOnce() {
  const gen = state.gen;
  const r = state.route;
  const [stats, view] = await Promise.allSettled([api('/v1/stats'), VIEWS[r.view].load(r)]);
  if (!state.key || gen !== state.gen) return; // signed out or route changed: results are stale
  const failure = view.reason ?? stats.reason;
  if (stats.reason?.status === 401 || view.reason?.status === 401) { signOut(REFUSED); return; }
  if (stats.status === 'fulfilled') renderFigures(stats.value);
  if (view.status === 'fulfilled') renderData(r, view.value);
  else if (state.rendered === null) $('#data')?.replaceChildren();
  const updated = $('#updated');
  updated.classList.toggle('stale', Boolean(failure));
  if (failure) {
    showError(failure.message);
  } else {
    showError('');
    const now = new Date();
    updated.textContent = `updated ${now.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' })}`;
    updated.title = now.toISOString();
  }
}

/** Refreshes now; never two at once (a request made meanwhile runs right after). */
async function refresh() {
  if (!state.key) return;
  if (state.running) { state.again = true; return; }
  state.running = true;
  clearTimeout(state.timer);
  try {
    do {
      state.again = false;
      await refreshOnce();
    } while (state.again && state.key);
  } catch (e) {
    console.error(e);
    showError(`The console failed to show this view (${e.message}). Reload the page.`);
  } finally {
    state.running = false;
    schedule();
  }
}

/** Plans the next refresh, unless signed out or the tab is hidden. */
function schedule() {
  clearTimeout(state.timer);
  if (state.key && !document.hidden) state.timer = setTimeout(refresh, REFRESH_MS);
}

// ---------------------------------------------------------------- sign-in

function enterApp(key, stats) {
  state.key = key;
  $('#signin-screen').hidden = true;
  $('#app').hidden = false;
  if (stats) renderFigures(stats);
  route();
}

/** Forgets the key, stops refreshing and shows the (cleared) sign-in form. */
function signOut(message = '') {
  sessionStorage.removeItem(KEY);
  Object.assign(state, { key: null, gen: state.gen + 1, rendered: null, subject: '', bulkKey: null });
  state.busy.clear();
  clearTimeout(state.timer);
  $('#app').hidden = true;
  $('#view').replaceChildren();
  $('#tenant').textContent = '';
  $('#updated').textContent = '';
  for (const n of document.querySelectorAll('#figures .num')) n.textContent = '–';
  for (const c of document.querySelectorAll('#figures .caption')) c.textContent = '';
  $('#fig-dead').classList.remove('alarm');
  showError('');
  showNotice('');
  document.title = 'idem console';
  $('#signin').reset();
  showSigninError(message);
  $('#signin-screen').hidden = false;
  $('#key').focus();
}

/** Checks the key against GET /v1/stats; keeps it in sessionStorage if accepted. */
async function signIn(e) {
  e.preventDefault();
  const key = $('#key').value.trim();
  if (!key) { showSigninError("Enter the tenant's API key."); return; }
  const button = $('#signin button[type=submit]');
  button.disabled = true;
  showSigninError('');
  try {
    const stats = await api('/v1/stats', { key });
    sessionStorage.setItem(KEY, key);
    enterApp(key, stats);
  } catch (err) {
    if (err.status === 401) showSigninError(err.problem.detail || "That key was refused: check the tenant's api_key");
    else if (err.status === 0) showSigninError(['idem does not answer: is ', code('idem serve'), ' running?']);
    else showSigninError(err.message);
  } finally {
    button.disabled = false;
  }
}

function init() {
  $('#signin').addEventListener('submit', signIn);
  $('#signout').addEventListener('click', () => signOut());
  addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', () => {
    if (document.hidden) clearTimeout(state.timer);
    else refresh();
  });
  const key = sessionStorage.getItem(KEY);
  if (key) {
    enterApp(key);
  } else {
    $('#signin-screen').hidden = false;
    $('#key').focus();
  }
}

init();
