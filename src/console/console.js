// The operator console: plain DOM, no framework, nothing loaded from elsewhere. Every API call
// carries the key typed once (kept in sessionStorage: this tab only, never a URL or a cookie).
// Views follow the hash: #/messages, #/message/<id>, #/dlq, #/routes.

const KEY_STORE = 'mailroute.apiKey';
const PAGE = 25;
const STATES = ['accepted', 'queued', 'parsed', 'routed', 'delivered', 'failed', 'retried', 'dlq'];

const $ = (selector) => document.querySelector(selector);
const view = $('#view');

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.error;
  }
}

function key() {
  return sessionStorage.getItem(KEY_STORE) ?? '';
}

async function api(method, path, body, keyOverride) {
  const headers = {};
  const k = keyOverride ?? key();
  if (k) headers['x-api-key'] = k;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const type = response.headers.get('content-type') ?? '';
  const parsed = type.startsWith('application/json') && text ? JSON.parse(text) : text;
  if (response.status === 401 && keyOverride === undefined) {
    showLogin('The API key was refused (401 unauthorized). Type the key again.');
    throw new ApiError(401, parsed);
  }
  if (!response.ok) throw new ApiError(response.status, typeof parsed === 'object' ? parsed : undefined);
  return parsed;
}

/** Element builder: h('td', {class: 'mono'}, 'text', child, ...) */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const stateBadge = (state) => h('span', { class: `state state-${state}`, 'data-state': state }, state);
const time = (iso) => (iso ? new Date(iso).toLocaleString(undefined, { hour12: false }) : '');

function table(headings, rows, empty = 'Nothing here.') {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  return h(
    'table',
    {},
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headings.map((x) => h('th', {}, x)),
      ),
    ),
    h('tbody', {}, rows),
  );
}

function message(text, kind = 'notice') {
  return h('p', { class: kind, role: kind === 'error' ? 'alert' : 'status' }, text);
}

function showError(err) {
  if (err instanceof ApiError && err.status === 401) return;
  view.replaceChildren(message(`Error: ${err.message}`, 'error'));
}

// ---- login ----------------------------------------------------------------------------------

function showLogin(error) {
  sessionStorage.removeItem(KEY_STORE);
  $('#nav').hidden = true;
  $('#counters').hidden = true;
  view.replaceChildren();
  $('#login').hidden = false;
  $('#login-error').hidden = !error;
  $('#login-error').textContent = error ?? '';
  $('#key').focus();
}

$('#login').addEventListener('submit', async (event) => {
  event.preventDefault();
  const typed = $('#key').value;
  try {
    await api('GET', '/domains', undefined, typed);
  } catch (err) {
    const text =
      err.status === 401
        ? 'That API key is wrong: the service answered 401 unauthorized.'
        : `The service could not be reached (${err.message}).`;
    $('#login-error').textContent = text;
    $('#login-error').hidden = false;
    return;
  }
  sessionStorage.setItem(KEY_STORE, typed);
  $('#key').value = '';
  start();
});

$('#logout').addEventListener('click', () => showLogin());

// ---- counters (the figures of /metrics) -----------------------------------------------------

/** Sums the samples of one metric in Prometheus text whose labels include all of `labels`. */
function sample(text, name, labels = {}) {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== ' ' && line[name.length] !== '{')) continue;
    const wanted = Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`));
    if (wanted) sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
  }
  return sum;
}

async function refreshCounters() {
  let text;
  try {
    text = await api('GET', '/metrics');
  } catch {
    return;
  }
  const figures = [
    ['in flight', sample(text, 'mailroute_messages_in_flight')],
    ['retries scheduled', sample(text, 'mailroute_retries_scheduled')],
    ['dead letters', sample(text, 'mailroute_dlq_messages')],
    ['SMTP accepted', sample(text, 'mailroute_smtp_transactions_total', { reason: 'accepted' })],
    [
      'SMTP refused',
      sample(text, 'mailroute_smtp_transactions_total') -
        sample(text, 'mailroute_smtp_transactions_total', { reason: 'accepted' }),
    ],
    ['webhook OK', sample(text, 'mailroute_webhook_attempts_total', { outcome: 'success' })],
    [
      'webhook failed',
      sample(text, 'mailroute_webhook_attempts_total') -
        sample(text, 'mailroute_webhook_attempts_total', { outcome: 'success' }),
    ],
    ['SMTP open', sample(text, 'mailroute_smtp_connections_open')],
  ];
  $('#counters').replaceChildren(
    ...figures.map(([label, value]) =>
      h(
        'div',
        { class: 'counter', 'data-counter': label },
        h('b', {}, value.toLocaleString()),
        h('span', {}, label),
      ),
    ),
  );
  $('#counters').hidden = false;
}

// ---- messages -------------------------------------------------------------------------------

function hashQuery() {
  const [, query = ''] = location.hash.split('?');
  return new URLSearchParams(query);
}

function filterForm(params, base, { withState }) {
  const state = h(
    'select',
    { name: 'state', 'aria-label': 'state' },
    h('option', { value: '' }, 'any state'),
    STATES.map((s) => h('option', { value: s, selected: params.get('state') === s }, s)),
  );
  const domain = h('input', {
    name: 'domain',
    placeholder: 'example.com',
    'aria-label': 'recipient domain',
    value: params.get('domain') ?? '',
  });
  const form = h(
    'form',
    { class: 'filters' },
    withState ? h('label', {}, 'State', state) : null,
    h('label', {}, 'Recipient domain', domain),
    h('button', { type: 'submit' }, 'Filter'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (withState && state.value) next.set('state', state.value);
    if (domain.value.trim()) next.set('domain', domain.value.trim());
    location.hash = `${base}?${next}`;
  });
  return form;
}

function pager(params, base, count) {
  const page = Number(params.get('page') ?? '0');
  const go = (p) => () => {
    const next = new URLSearchParams(params);
    next.set('page', String(p));
    location.hash = `${base}?${next}`;
  };
  return h(
    'div',
    { class: 'pager' },
    h(
      'button',
      { class: 'secondary', type: 'button', disabled: page === 0, onclick: go(page - 1) },
      '← Newer',
    ),
    h('span', { class: 'muted' }, `page ${page + 1}`),
    h(
      'button',
      { class: 'secondary', type: 'button', disabled: count < PAGE, onclick: go(page + 1) },
      'Older →',
    ),
  );
}

function listQuery(params, state) {
  const query = new URLSearchParams({
    limit: String(PAGE),
    offset: String(Number(params.get('page') ?? '0') * PAGE),
  });
  const s = state ?? params.get('state');
  if (s) query.set('state', s);
  if (params.get('domain')) query.set('domain', params.get('domain'));
  return query;
}

async function messagesView() {
  const params = hashQuery();
  const list = await api('GET', `/messages?${listQuery(params)}`);
  const rows = list.map((m) =>
    h(
      'tr',
      { 'data-id': m.id },
      h('td', {}, time(m.received_at)),
      h('td', {}, stateBadge(m.state)),
      h('td', {}, m.from),
      h('td', {}, m.to.join(', ')),
      h('td', {}, h('a', { href: `#/message/${m.id}` }, m.subject || '(no subject)')),
      h('td', { class: 'mono' }, m.id),
    ),
  );
  view.replaceChildren(
    h('h1', {}, 'Messages'),
    filterForm(params, '#/messages', { withState: true }),
    table(['Received', 'State', 'From', 'To', 'Subject', 'Id'], rows, 'No messages match.'),
    pager(params, '#/messages', list.length),
  );
}

/** The header block of the raw message: read until the blank line, the rest is not downloaded. */
async function rawHeaders(id) {
  const headers = {};
  const k = key();
  if (k) headers['x-api-key'] = k;
  const response = await fetch(`/messages/${encodeURIComponent(id)}/raw`, { headers });
  if (!response.ok || !response.body) return '';
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (text.length < 256 * 1024) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (/\r?\n\r?\n/.test(text)) break;
  }
  await reader.cancel().catch(() => {});
  return text.split(/\r?\n\r?\n/)[0];
}

async function openRaw(id) {
  const headers = {};
  if (key()) headers['x-api-key'] = key();
  const response = await fetch(`/messages/${encodeURIComponent(id)}/raw`, { headers });
  const blob = new Blob([await response.arrayBuffer()], { type: 'text/plain' });
  window.open(URL.createObjectURL(blob), '_blank', 'noopener');
}

async function replayButton(id, after) {
  return h(
    'button',
    {
      type: 'button',
      class: 'secondary',
      'data-action': 'replay',
      onclick: async (event) => {
        event.target.disabled = true;
        try {
          await api('POST', `/messages/${encodeURIComponent(id)}/retry`);
          await after();
        } catch (err) {
          event.target.after(message(err.message, 'error'));
        }
      },
    },
    'Replay',
  );
}

async function messageView(id) {
  const m = await api('GET', `/messages/${encodeURIComponent(id)}`);
  const headerText = await rawHeaders(id).catch(() => '');
  const canReplay = m.state === 'dlq' || m.state === 'failed';
  view.replaceChildren(
    h('p', {}, h('a', { href: '#/messages' }, '← Messages')),
    h(
      'div',
      { class: 'card' },
      h('h1', {}, m.subject || '(no subject)'),
      h(
        'dl',
        { class: 'fields' },
        h('dt', {}, 'State'),
        h('dd', { id: 'message-state' }, stateBadge(m.state)),
        h('dt', {}, 'Id'),
        h('dd', { class: 'mono' }, m.id),
        h('dt', {}, 'Message-ID'),
        h('dd', { class: 'mono' }, m.message_id),
        h('dt', {}, 'From'),
        h('dd', {}, m.from),
        h('dt', {}, 'To'),
        h('dd', {}, m.to.join(', ')),
        h('dt', {}, 'Received'),
        h('dd', {}, time(m.received_at)),
        h('dt', {}, 'Raw'),
        h(
          'dd',
          {},
          h(
            'a',
            {
              href: '#',
              id: 'raw-link',
              onclick: (e) => {
                e.preventDefault();
                void openRaw(m.id);
              },
            },
            'open the original message',
          ),
        ),
      ),
      canReplay ? h('p', {}, await replayButton(m.id, () => messageView(id))) : null,
    ),
    h(
      'div',
      { class: 'card' },
      h('h2', {}, 'Deliveries'),
      table(
        ['Route', 'Webhook', 'Recipients', 'State', 'Attempts', 'Next attempt'],
        m.deliveries.map((d) =>
          h(
            'tr',
            {},
            h('td', { class: 'mono' }, d.route_id),
            h('td', { class: 'mono' }, d.webhook_url),
            h('td', {}, d.recipients.join(', ')),
            h('td', {}, stateBadge(d.state)),
            h('td', {}, d.attempts),
            h('td', {}, time(d.next_attempt_at)),
          ),
        ),
        'No deliveries (not routed yet, or nothing matched).',
      ),
    ),
    h(
      'div',
      { class: 'card' },
      h('h2', {}, 'Attempts'),
      table(
        ['At', 'Sent', 'Delivery', 'HTTP status', 'Error', 'Duration', 'Response'],
        m.attempts.map((a) =>
          h(
            'tr',
            {},
            h('td', {}, time(a.at)),
            h('td', {}, time(a.sent_at)),
            h('td', { class: 'mono' }, a.delivery),
            h('td', {}, a.status_code ?? ''),
            h('td', {}, a.error ?? ''),
            h('td', {}, `${a.duration_ms} ms`),
            h('td', {}, responseOf(a)),
          ),
        ),
        'No attempts yet.',
      ),
    ),
    h(
      'div',
      { class: 'card' },
      h('h2', {}, 'History'),
      table(
        ['At', 'State', 'Detail'],
        m.history.map((e) =>
          h('tr', {}, h('td', {}, time(e.at)), h('td', {}, stateBadge(e.state)), h('td', {}, e.detail ?? '')),
        ),
      ),
    ),
    h(
      'div',
      { class: 'card' },
      h('h2', {}, 'Headers'),
      h('pre', { id: 'headers' }, headerText || '(not available)'),
    ),
  );
}

/** What the receiver answered: its words as text (h() makes text nodes), never as markup. */
function responseOf(attempt) {
  const said = [
    attempt.content_type ? `Content-Type: ${attempt.content_type}` : '',
    attempt.retry_after ? `Retry-After: ${attempt.retry_after}` : '',
  ].filter(Boolean);
  return [
    said.length ? h('div', { class: 'muted' }, said.join(' · ')) : undefined,
    attempt.response_body ? h('pre', { class: 'response-body' }, attempt.response_body) : undefined,
  ];
}

// ---- dead letter queue ----------------------------------------------------------------------

function reasonOf(detail) {
  const last = [...detail.history].reverse().find((e) => e.state === 'dlq');
  const attempt = detail.attempts.at(-1);
  const why = last?.detail ?? (attempt ? (attempt.error ?? `HTTP ${attempt.status_code}`) : '');
  return why || 'retries exhausted';
}

async function dlqView() {
  const params = hashQuery();
  const list = await api('GET', `/messages?${listQuery(params, 'dlq')}`);
  const details = await Promise.all(list.map((m) => api('GET', `/messages/${encodeURIComponent(m.id)}`)));
  const rows = await Promise.all(
    details.map(async (m) =>
      h(
        'tr',
        { 'data-id': m.id },
        h('td', {}, time(m.received_at)),
        h('td', {}, h('a', { href: `#/message/${m.id}` }, m.subject || '(no subject)')),
        h('td', {}, m.to.join(', ')),
        h('td', { class: 'reason' }, reasonOf(m)),
        h('td', {}, await replayButton(m.id, () => dlqView())),
      ),
    ),
  );
  const status = h('p', { id: 'bulk-status', role: 'status' });
  const replayAll = h(
    'button',
    {
      type: 'button',
      class: 'danger',
      id: 'replay-all',
      onclick: async () => {
        replayAll.disabled = true;
        const body = { state: 'dlq', limit: 1000 };
        if (params.get('domain')) body.domain = params.get('domain');
        try {
          const result = await api('POST', '/messages/retry', body);
          status.textContent = `Re-queued ${result.requeued} of ${result.matched} matching message(s).`;
          // the list once the replays have moved on, if the user is still looking at it
          setTimeout(() => location.hash.startsWith('#/dlq') && dlqView().catch(showError), 800);
        } catch (err) {
          status.textContent = err.message;
          status.className = 'error';
        }
        replayAll.disabled = false;
      },
    },
    params.get('domain') ? `Replay all for ${params.get('domain')}` : 'Replay all',
  );
  view.replaceChildren(
    h('h1', {}, 'Dead letter queue'),
    filterForm(params, '#/dlq', { withState: false }),
    h('p', {}, replayAll, ' ', h('span', { class: 'muted' }, 'up to 1,000 at a time, newest first')),
    status,
    table(['Received', 'Subject', 'To', 'Reason', ''], rows, 'The dead letter queue is empty.'),
    pager(params, '#/dlq', list.length),
  );
}

// ---- domains and routes ---------------------------------------------------------------------

function deleteButton(path, after, label) {
  return h(
    'button',
    {
      type: 'button',
      class: 'danger',
      'aria-label': label,
      onclick: async (event) => {
        if (!confirm(`${label}?`)) return;
        event.target.disabled = true;
        try {
          await api('DELETE', path);
          await after();
        } catch (err) {
          event.target.after(message(err.message, 'error'));
        }
      },
    },
    'Delete',
  );
}

function createForm(id, fields, submitText, onSubmit) {
  const inputs = fields.map(([name, label, placeholder]) =>
    h('input', { name, placeholder, 'aria-label': label }),
  );
  const status = h('span', { role: 'status' });
  const form = h(
    'form',
    { class: 'inline', id },
    fields.map(([, label], i) => h('label', {}, label, inputs[i])),
    h('button', { type: 'submit' }, submitText),
    status,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const values = Object.fromEntries(inputs.map((input) => [input.name, input.value.trim()]));
    try {
      await onSubmit(values);
    } catch (err) {
      status.textContent = err.message;
      status.className = 'error';
    }
  });
  return form;
}

async function routesView() {
  const [domains, routes, endpoints] = await Promise.all([
    api('GET', '/domains'),
    api('GET', '/routes'),
    api('GET', '/endpoints'),
  ]);
  const reload = () => routesView();
  const endpointOf = (route) => endpoints.find((e) => e.routes.includes(route.id));
  const result = h('div', { id: 'match-result' });
  const tester = createForm(
    'tester',
    [['address', 'Recipient address', 'alice@example.com']],
    'Test',
    async ({ address }) => {
      const found = await api('GET', `/routes/match?${new URLSearchParams({ address })}`);
      result.replaceChildren(
        h(
          'p',
          { class: found.matched ? 'notice' : 'error' },
          found.matched ? `Route ${found.route.id} (${found.route.webhook_url})` : 'No route',
        ),
        h('p', {}, found.reason),
      );
    },
  );
  view.replaceChildren(
    h(
      'div',
      { class: 'card' },
      h('h1', {}, 'Route tester'),
      h('p', { class: 'muted' }, 'Which route receives mail for an address, and why.'),
      tester,
      result,
    ),
    h(
      'div',
      { class: 'card' },
      h('h1', {}, 'Domains'),
      createForm('new-domain', [['name', 'Domain name', 'example.com']], 'Add domain', async (v) => {
        await api('POST', '/domains', { name: v.name });
        await reload();
      }),
      table(
        ['Name', 'Id', 'Created', ''],
        domains.map((d) =>
          h(
            'tr',
            { 'data-id': d.id },
            h('td', {}, d.name),
            h('td', { class: 'mono' }, d.id),
            h('td', {}, time(d.created_at)),
            h('td', {}, deleteButton(`/domains/${d.id}`, reload, `Delete domain ${d.name} and its routes`)),
          ),
        ),
        'No domains yet.',
      ),
    ),
    h(
      'div',
      { class: 'card' },
      h('h1', {}, 'Routes'),
      createForm(
        'new-route',
        [
          ['domain', 'Domain', 'example.com'],
          ['recipient_pattern', 'Recipient pattern', 'support+*'],
          ['webhook_url', 'Webhook URL', 'https://app.example/hook'],
          ['webhook_secret', 'Signing secret (optional)', ''],
        ],
        'Add route',
        async (v) => {
          const body = {
            domain: v.domain,
            recipient_pattern: v.recipient_pattern,
            webhook_url: v.webhook_url,
          };
          if (v.webhook_secret) body.webhook_secret = v.webhook_secret;
          await api('POST', '/routes', body);
          await reload();
        },
      ),
      table(
        ['Domain', 'Pattern', 'Action', 'Webhooks', 'Endpoint', 'Signed', 'Id', ''],
        routes.map((r) =>
          h(
            'tr',
            { 'data-id': r.id },
            h('td', {}, r.domain),
            h('td', { class: 'mono' }, r.recipient_pattern),
            h('td', {}, r.action ?? 'webhook'),
            h(
              'td',
              { class: 'mono' },
              [r.webhook_url, ...(r.destinations ?? []).map((d) => `${d.webhook_url} (${d.id})`)].map((url) =>
                h('div', {}, url),
              ),
            ),
            h('td', { class: 'endpoint-state' }, endpointOf(r) ? stateBadge(endpointOf(r).state) : ''),
            h(
              'td',
              {},
              r.webhook_secret ? 'yes' : 'no',
              r.previous_secret_until ? ` (old secret until ${time(r.previous_secret_until)})` : '',
            ),
            h('td', { class: 'mono' }, r.id),
            h('td', {}, deleteButton(`/routes/${r.id}`, reload, `Delete route ${r.recipient_pattern}`)),
          ),
        ),
        'No routes yet.',
      ),
    ),
    h(
      'div',
      { class: 'card' },
      h('h1', {}, 'Change a route'),
      h(
        'p',
        { class: 'muted' },
        'Fields left empty keep their value. A new secret rotates: the old one keeps signing for the grace period (default one day).',
      ),
      createForm(
        'edit-route',
        [
          ['id', 'Route id', 'r-…'],
          ['recipient_pattern', 'New recipient pattern', ''],
          ['webhook_url', 'New webhook URL', ''],
          ['webhook_secret', 'New signing secret', ''],
          ['secret_grace_seconds', 'Old secret valid for (seconds)', '86400'],
          ['action', 'Action (webhook, reject, drop)', ''],
        ],
        'Save route',
        async (v) => {
          const body = {};
          for (const name of ['recipient_pattern', 'webhook_url', 'webhook_secret', 'action'])
            if (v[name]) body[name] = v[name];
          if (v.secret_grace_seconds) body.secret_grace_seconds = Number(v.secret_grace_seconds);
          await api('PATCH', `/routes/${encodeURIComponent(v.id)}`, body);
          await reload();
        },
      ),
      h('h1', {}, 'Add a destination'),
      h(
        'p',
        { class: 'muted' },
        'The route also delivers to this URL, separately from its other destinations.',
      ),
      createForm(
        'new-destination',
        [
          ['id', 'Route id', 'r-…'],
          ['webhook_url', 'Webhook URL', 'https://archive.example/hook'],
          ['webhook_secret', 'Signing secret (optional)', ''],
        ],
        'Add destination',
        async (v) => {
          const body = { webhook_url: v.webhook_url };
          if (v.webhook_secret) body.webhook_secret = v.webhook_secret;
          await api('POST', `/routes/${encodeURIComponent(v.id)}/destinations`, body);
          await reload();
        },
      ),
    ),
    endpointsCard(endpoints, reload),
  );
}

/** Each webhook endpoint's health, with pause and resume. */
function endpointsCard(endpoints, reload) {
  return h(
    'div',
    { class: 'card', id: 'endpoints' },
    h('h1', {}, 'Endpoints'),
    h(
      'p',
      { class: 'muted' },
      'One per webhook URL. A paused endpoint gets no deliveries (they wait, spending no attempt); paused by the breaker, one probe goes out at growing intervals and its first success resumes it.',
    ),
    table(
      ['Webhook', 'State', 'Failures in a row', 'Last success', 'Last failure', 'Next probe', ''],
      endpoints.map((e) =>
        h(
          'tr',
          { 'data-id': e.id },
          h('td', { class: 'mono' }, e.url),
          h('td', {}, stateBadge(e.state), e.paused_by ? ` by ${e.paused_by}` : ''),
          h('td', {}, e.consecutive_failures),
          h('td', {}, time(e.last_success_at)),
          h('td', {}, time(e.last_failure_at), e.last_failure_reason ? ` (${e.last_failure_reason})` : ''),
          h('td', {}, time(e.next_probe_at)),
          h('td', {}, pauseButton(e, reload)),
        ),
      ),
      'No endpoints yet.',
    ),
  );
}

function pauseButton(endpoint, after) {
  const action = endpoint.state === 'paused' ? 'resume' : 'pause';
  return h(
    'button',
    {
      type: 'button',
      class: action,
      onclick: async (event) => {
        event.target.disabled = true;
        try {
          await api('POST', `/endpoints/${endpoint.id}/${action}`);
          await after();
        } catch (err) {
          event.target.after(message(err.message, 'error'));
        }
      },
    },
    action === 'resume' ? 'Resume' : 'Pause',
  );
}

// ---- navigation -----------------------------------------------------------------------------

async function render() {
  const path = location.hash.slice(1).split('?')[0] || '/messages';
  for (const link of document.querySelectorAll('nav a')) {
    const target = link.getAttribute('href').slice(1);
    link.classList.toggle(
      'active',
      path === target || (target === '/messages' && path.startsWith('/message/')),
    );
  }
  try {
    if (path.startsWith('/message/')) await messageView(decodeURIComponent(path.slice('/message/'.length)));
    else if (path === '/dlq') await dlqView();
    else if (path === '/routes') await routesView();
    else await messagesView();
  } catch (err) {
    showError(err);
  }
  void refreshCounters();
}

let started = false;
function start() {
  $('#login').hidden = true;
  $('#nav').hidden = false;
  if (!started) {
    started = true;
    window.addEventListener('hashchange', () => void render());
    setInterval(() => key() !== null && !$('#nav').hidden && void refreshCounters(), 10_000);
  }
  void render();
}

// an open service (no key configured) needs no sign-in; otherwise the key of this tab, if any
(async () => {
  try {
    await api('GET', '/domains', undefined, key());
    start();
  } catch (err) {
    showLogin(key() && err.status === 401 ? 'The stored API key was refused (401 unauthorized).' : undefined);
  }
})();
