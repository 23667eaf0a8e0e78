// cadre's dashboard: plain JavaScript, no library. Pages are drawn from the REST API
// (/api/v1, with the session cookie and, for changes, the session's CSRF token) and from
// /ui/cluster; /ui/live says when to draw again. Routes: #/cluster, #/queue, #/job/ID,
// #/accounts, #/scheduler.
'use strict';

// What the pages keep across live redraws (the filters, what is picked or open, the
// scheduler page's chart samples), as a session starts (see leave).
function pageState() {
  return { partition: '', nodeState: '', node: null, job: null, whyNot: new Set(), samples: [] };
}

const S = {
  user: null,
  admin: false,
  csrf: '',
  live: null,
  // Draws the page (see startLive); until the live stream is up, route draws directly.
  redraw: null,
  ...pageState(),
  // The rank output the job page follows (see followOutput).
  out: null,
  // Which session the page is in: one more at each login and each end of a session. An
  // answer to a request sent in another is stale (see api).
  epoch: 0,
};

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(method, path, body) {
  const epoch = S.epoch;
  const opts = { method, headers: {}, credentials: 'same-origin', cache: 'no-store' };
  if (method !== 'GET') opts.headers['X-CSRF-Token'] = S.csrf;
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const data = r.status === 204 ? null : await r.json().catch(() => null);
  if (epoch !== S.epoch) {
    const e = new Error('the session changed while the request was under way');
    e.stale = true;
    throw e;
  }
  if (r.status === 204) return null;
  if (!r.ok) {
    const msg = data && data.error ? data.error.message : `${r.status} ${r.statusText}`;
    const e = new Error(msg);
    e.status = r.status;
    throw e;
  }
  return data;
}

function clearToast() {
  document.getElementById('toast').className = '';
}

function toast(text, bad) {
  const t = document.getElementById('toast');
  t.textContent = text;
  t.className = bad ? 'show bad' : 'show';
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.className = ''; }, 8000);
}

function when(secs) {
  if (!secs) return '';
  const d = new Date(secs * 1000);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function duration(secs) {
  if (secs === null || secs === undefined) return '';
  secs = Math.max(0, Math.floor(secs));
  const d = Math.floor(secs / 86400);
  const h = Math.floor((secs % 86400) / 3600);
  const m = Math.floor((secs % 3600) / 60);
  const s = secs % 60;
  const p = (n) => String(n).padStart(2, '0');
  return (d ? `${d}-` : '') + `${p(h)}:${p(m)}:${p(s)}`;
}

// A job's colour: hues spread by the golden angle so that neighbours differ.
function jobColour(id) {
  return `hsl(${Math.round((id * 137.508) % 360)}, 62%, 42%)`;
}

// --- the page frame -----------------------------------------------------------------------

function main() {
  return document.getElementById('main');
}

// Draws a page of the logged-in dashboard. A drawing that finishes after the session ended
// (a logout, or a request answered 401 while it was under way) is dropped: the login form
// stays.
function page(title, ...children) {
  if (S.user) frame(title, children);
}

function frame(title, children) {
  const m = main();
  // Keyboard focus survives a redraw: the element of the same key (or id) gets it back.
  const a = document.activeElement;
  const key = a && m.contains(a) && a !== m ? (a.dataset.key || a.id) : null;
  m.replaceChildren(el('h1', { text: title }),
    ...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  document.title = `${title} - cadre`;
  if (key) {
    const again = m.querySelector(`[data-key="${CSS.escape(key)}"], #${CSS.escape(key)}`);
    if (again) again.focus();
  }
}

function failure(title, e) {
  if (over(e)) return undefined;
  return page(title, el('p', { class: 'error', role: 'alert', text: e.message }));
}

// Whether an error of `api` means that the caller should show nothing: the request was
// sent in a session that is over, or this one just ended (401), which brings the login
// form (once).
function over(e) {
  if (e.stale) return true;
  if (e.status !== 401) return false;
  if (S.user) ended('Your session ended (logged out elsewhere, expired, or its token revoked), or the controller restarted. Log in again.');
  return true;
}

function confirmAction(title, text, extra) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-extra').replaceChildren(...(extra ? [extra] : []));
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.returnValue = '';
    d.showModal();
  });
}

// --- login --------------------------------------------------------------------------------

function loginPage(message) {
  document.getElementById('nav').hidden = true;
  document.getElementById('logout').hidden = true;
  document.getElementById('who').textContent = '';
  const token = el('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, maxlength: '256' });
  const form = el('form', { id: 'login', class: 'login', onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      await api('POST', '/ui/login', { token: token.value });
      token.value = '';
      await boot();
    } catch (e) {
      toast(`Login failed: ${e.message}`, true);
    }
  } },
  el('label', { for: 'token', text: 'API token' }), token,
  el('button', { type: 'submit', text: 'Log in' }));
  frame('Log in', [el('p', { id: 'login-why', text: message || 'Log in with an API token (cadre token create), or open the link `cadre ui` prints.' }), form]);
  token.focus();
}

async function logout() {
  // Over from the click: the login form at once, and what answers in the meantime, the
  // logout's own answer too, is stale and draws nothing. (The request takes the session's
  // CSRF token as it is sent.)
  const request = api('POST', '/ui/logout');
  ended('Logged out.');
  try { await request; } catch (e) { /* stale, or the session was gone already */ }
}

// Ends the page's session: nothing drawn, followed or kept of it from here on.
function leave() {
  S.user = null;
  S.admin = false;
  S.csrf = '';
  S.epoch += 1;
  if (S.live) S.live.close();
  S.live = null;
  S.redraw = null;
  if (S.out) { clearTimeout(S.out.timer); S.out = null; }
  Object.assign(S, pageState());
  clearToast();
}

// The session is over: the login form, with why.
function ended(message) {
  leave();
  loginPage(message);
}

// --- live updates -------------------------------------------------------------------------

function startLive() {
  if (S.live) S.live.close();
  const ind = document.getElementById('live');
  const es = new EventSource('/ui/live');
  es.onopen = () => { ind.textContent = 'live'; ind.className = 'live on'; };
  es.onerror = () => {
    ind.textContent = 'reconnecting';
    ind.className = 'live off';
    // The browser retries a stream that broke, but not one refused: ask whether the
    // session is still there (a controller's restart ends every session), and if it is,
    // open the stream again a little later.
    if (es.readyState !== EventSource.CLOSED) return;
    const again = () => setTimeout(() => { if (S.live === es) startLive(); }, 5000);
    api('GET', '/ui/session').then(again, (e) => {
      if (S.live === es && !over(e)) again();
    });
  };
  // One drawing at a time, live redraws and navigations alike: what comes during one makes
  // one more, not one each, and a drawing of the page left behind cannot land over the page
  // navigated to (each reads the address when it starts).
  let busy = false;
  let again = null;
  const redraw = async (live = true) => {
    if (busy) { again = again === null ? live : (again && live); return; }
    busy = true;
    try { await route(live); } finally {
      busy = false;
      if (again !== null) { const l = again; again = null; redraw(l); }
    }
  };
  es.addEventListener('change', () => redraw(true));
  S.redraw = redraw;
  S.live = es;
}

// --- cluster ------------------------------------------------------------------------------

const NODE_STATES = ['idle', 'mixed', 'allocated', 'draining', 'drained', 'down', 'unknown'];

function gpuCell(node, g, jobs) {
  const held = g.holders.length > 0;
  const who = g.holders.map(([id, milli]) => {
    const j = jobs[id];
    const share = milli < 1000 ? ` (${milli / 1000} GPU)` : '';
    return `job ${id}${j ? ` of ${j.user}` : ''}${share}`;
  }).join(', ');
  const label = `${node.name} GPU ${g.index}${node.emulated ? ' (emulated)' : ''}: ${held ? who : 'free'}`;
  const c = el('span', {
    class: `gpu ${held ? 'held' : 'free'}${g.holders.length > 1 ? ' shared' : ''}${node.emulated ? ' emulated' : ''}`,
    role: 'img', 'aria-label': label, title: label,
    dataset: { gpu: String(g.index), job: held ? g.holders.map((h) => h[0]).join(' ') : '' },
  });
  if (held) c.style.backgroundColor = jobColour(g.holders[0][0]);
  if (held && S.job !== null && g.holders.some((h) => h[0] === S.job)) c.classList.add('picked');
  return c;
}

function nodeBox(n, jobs) {
  const held = n.gpus.filter((g) => g.holders.length).length;
  const state = el('span', { class: `state s-${n.state}`, text: n.state });
  const summary = `${n.name}: ${n.state}${n.reason ? ` (${n.reason})` : ''}, ${held} of ${n.gpus.length} GPUs held${n.connected ? '' : ', agent not connected'}`;
  return el('li', { class: `node s-${n.state}`, dataset: { node: n.name } },
    el('button', { type: 'button', class: 'node-name', title: summary, 'aria-label': summary,
      dataset: { key: `node-${n.name}` }, onclick: () => { S.node = n.name; route(true); } },
    n.name, ' ', state, n.connected ? '' : el('span', { class: 'warn', text: ' (no agent)' })),
    el('div', { class: 'gpus' }, n.gpus.map((g) => gpuCell(n, g, jobs))),
    n.reason ? el('div', { class: 'reason', text: n.reason }) : null);
}

function nodeDetail(n, jobs) {
  if (!n) return null;
  const rows = n.gpus.map((g) => el('tr', {},
    el('td', { text: String(g.index) }),
    el('td', {}, g.holders.length ? g.holders.map(([id, milli], i) => [i ? ', ' : '',
      el('a', { href: `#/job/${id}`, text: `job ${id}` }),
      jobs[id] ? ` (${jobs[id].user})` : '', milli < 1000 ? ` ${milli / 1000} GPU` : '']) : 'free')));
  const actions = [];
  if (S.admin) {
    if (n.state === 'drained' || n.state === 'draining' || n.state === 'down') {
      actions.push(el('button', { type: 'button', id: 'resume', onclick: async () => {
        if (!await confirmAction(`Resume ${n.name}?`, `${n.name} takes new jobs again.`)) return;
        try { await api('POST', `/api/v1/nodes/${encodeURIComponent(n.name)}/resume`); toast(`${n.name} resumed`); route(true); } catch (e) { if (!over(e)) toast(e.message, true); }
      } }, `Resume ${n.name}`));
    } else {
      actions.push(el('button', { type: 'button', id: 'drain', class: 'danger', onclick: async () => {
        const reason = el('input', { id: 'drain-reason', required: true, maxlength: '200' });
        const extra = el('p', {}, el('label', { for: 'drain-reason', text: 'Reason ' }), reason);
        if (!await confirmAction(`Drain ${n.name}?`, `${n.name} takes no new jobs; running ones finish.`, extra)) return;
        try {
          await api('POST', `/api/v1/nodes/${encodeURIComponent(n.name)}/drain`, { reason: reason.value });
          toast(`${n.name}: drain requested`);
          route(true);
        } catch (e) { if (!over(e)) toast(e.message, true); }
      } }, `Drain ${n.name}`));
    }
  }
  return el('section', { class: 'detail', 'aria-label': `Node ${n.name}`, id: 'node-detail' },
    el('h2', {}, `Node ${n.name} `, el('button', { type: 'button', class: 'close', 'aria-label': 'Close node details', onclick: () => { S.node = null; route(true); } }, '×')),
    el('dl', {},
      el('dt', { text: 'State' }), el('dd', { id: 'node-state', text: n.state }),
      n.reason ? [el('dt', { text: 'Reason' }), el('dd', { text: n.reason })] : null,
      el('dt', { text: 'Agent' }), el('dd', { text: n.connected ? 'connected' : 'not connected' }),
      el('dt', { text: 'Partitions' }), el('dd', { text: n.partitions.join(', ') }),
      el('dt', { text: 'CPUs' }), el('dd', { text: `${n.cpus_alloc} of ${n.cpus} allocated` }),
      el('dt', { text: 'GPUs' }), el('dd', { text: `${n.gpus.length} ${n.gpu_model || ''}${n.emulated && n.gpu_model !== 'emulated' ? ' (emulated)' : ''}` }),
      n.block ? [el('dt', { text: 'NVLink block' }), el('dd', { text: n.block })] : null,
      n.leaf ? [el('dt', { text: 'Leaf switch' }), el('dd', { text: n.leaf })] : null),
    el('table', {}, el('caption', { text: 'GPUs' }),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'GPU' }), el('th', { scope: 'col', text: 'Held by' }))),
      el('tbody', {}, rows)),
    el('div', { class: 'buttons' }, actions));
}

async function clusterPage() {
  let v;
  try { v = await api('GET', '/ui/cluster'); } catch (e) { return failure('Cluster', e); }
  const part = el('select', { id: 'f-partition', onchange: (ev) => { S.partition = ev.target.value; route(true); } },
    el('option', { value: '', text: 'all' }),
    v.partitions.map((p) => el('option', { value: p, text: p, selected: p === S.partition })));
  const state = el('select', { id: 'f-state', onchange: (ev) => { S.nodeState = ev.target.value; route(true); } },
    el('option', { value: '', text: 'all' }),
    NODE_STATES.map((s) => el('option', { value: s, text: s, selected: s === S.nodeState })));
  const nodes = v.nodes.filter((n) => (!S.partition || n.partitions.includes(S.partition))
    && (!S.nodeState || n.state === S.nodeState));
  let gpus = 0; let held = 0;
  for (const n of v.nodes) { gpus += n.gpus.length; held += n.gpus.filter((g) => g.holders.length).length; }
  const emulated = v.nodes.some((n) => n.emulated);
  // Grouped by NVLink block, else leaf switch: what a gang's placement is judged by.
  const groups = new Map();
  for (const n of nodes) {
    const g = n.block ? `block ${n.block}` : n.leaf ? `switch ${n.leaf}` : '';
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(n);
  }
  const legend = Object.entries(v.jobs).map(([id, j]) => {
    const n = v.nodes.reduce((a, node) => a + node.gpus.filter((g) => g.holders.some((h) => String(h[0]) === id)).length, 0);
    const sw = el('span', { class: 'swatch', 'aria-hidden': 'true' });
    sw.style.backgroundColor = jobColour(Number(id));
    return el('li', { class: S.job === Number(id) ? 'picked' : '' },
      el('button', { type: 'button', class: 'pick', 'aria-pressed': S.job === Number(id) ? 'true' : 'false',
        dataset: { key: `pick-${id}` },
        onclick: () => { S.job = S.job === Number(id) ? null : Number(id); route(true); } }, sw, ` job ${id}`),
      ' ', el('a', { href: `#/job/${id}`, text: j.name || 'details' }), ` ${j.user}, ${n} GPU${n === 1 ? '' : 's'}`);
  });
  const detail = nodeDetail(v.nodes.find((n) => n.name === S.node), v.jobs);
  page('Cluster',
    el('p', { class: 'summary', id: 'cluster-summary' },
      `${v.nodes.length} nodes, ${gpus} GPUs${emulated ? ' (emulated)' : ''}, ${held} held by ${Object.keys(v.jobs).length} jobs.`),
    el('div', { class: 'filters' },
      el('label', { for: 'f-partition', text: 'Partition ' }), part,
      el('label', { for: 'f-state', text: ' State ' }), state,
      el('span', { text: ` ${nodes.length} shown` })),
    detail,
    legend.length ? el('section', { 'aria-label': 'Jobs holding GPUs' },
      el('h2', { text: 'Jobs holding GPUs' }), el('ul', { class: 'legend' }, legend)) : null,
    [...groups.entries()].map(([g, ns]) => el('section', { class: 'group', 'aria-label': g || 'Nodes' },
      g ? el('h2', { text: g }) : null,
      el('ul', { class: 'nodes' }, ns.map((n) => nodeBox(n, v.jobs))))));
}

// --- queue --------------------------------------------------------------------------------

async function whyNot(id) {
  const x = await api('GET', `/api/v1/jobs/${id}/explain`);
  return el('div', { class: 'why', id: `why-${id}` },
    el('p', {}, `Reason ${x.reason}`, x.detail ? `: ${x.detail}` : '',
      x.expected_start ? `; expected to start ${when(x.expected_start)}` : ''),
    x.factors.length ? el('p', {}, 'Priority factors: ',
      x.factors.map(([k, f]) => `${k} ${Number(f).toFixed(3)}`).join(', ')) : null,
    x.nodes.length ? el('table', {}, el('caption', { text: `Why not, node by node (job ${id})` }),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'Node' }), el('th', { scope: 'col', text: 'Why not' }))),
      el('tbody', {}, x.nodes.map(([n, why]) => el('tr', {}, el('td', { text: n }), el('td', { text: why }))))) : null);
}

async function queuePage() {
  // The first 1,000 of each list, the pending ones in priority order, from the
  // controller's live state (the REST API's job list reads every job's whole record).
  let q;
  try { q = await api('GET', '/ui/queue?limit=1000'); } catch (e) { return failure('Queue', e); }
  const shown = q.pending;
  const whys = new Map();
  await Promise.all([...S.whyNot].filter((id) => shown.some((j) => j.id === id)).map(async (id) => {
    try { whys.set(id, await whyNot(id)); } catch (e) { if (!over(e)) whys.set(id, el('p', { class: 'error', text: e.message })); }
  }));
  const now = q.now;
  const prow = (j, i) => {
    const open = S.whyNot.has(j.id);
    const rows = [el('tr', { dataset: { job: String(j.id) } },
      el('td', { text: String(i + 1) }),
      el('td', {}, el('a', { href: `#/job/${j.id}`, text: String(j.id) })),
      el('td', { text: j.name }), el('td', { text: j.user }), el('td', { text: j.partition }),
      el('td', { class: 'num', text: String(j.gpus) }), el('td', { class: 'num', text: String(j.priority ?? '') }),
      el('td', { class: 'reason', text: j.reason }),
      el('td', { text: j.expected_start ? when(j.expected_start) : '' }),
      el('td', {}, el('button', { type: 'button', class: 'why-button', 'aria-expanded': open ? 'true' : 'false',
        'aria-controls': `why-${j.id}`, dataset: { key: `why-${j.id}` },
        onclick: () => { if (open) S.whyNot.delete(j.id); else S.whyNot.add(j.id); route(true); } },
      open ? 'Hide' : 'Why not?')))];
    if (open && whys.has(j.id)) rows.push(el('tr', { class: 'why-row' }, el('td', { colspan: '10' }, whys.get(j.id))));
    return rows;
  };
  const rrow = (j) => {
    const elapsed = j.start_time ? now - j.start_time : 0;
    const limit = j.time_limit || 0;
    const bar = el('progress', { max: String(limit || 1), value: String(limit ? Math.min(elapsed, limit) : 0),
      'aria-label': `job ${j.id} elapsed ${duration(elapsed)} of ${limit ? duration(limit) : 'no limit'}` });
    return el('tr', { dataset: { job: String(j.id) } },
      el('td', {}, el('a', { href: `#/job/${j.id}`, text: String(j.id) })),
      el('td', { text: j.name }), el('td', { text: j.user }), el('td', { text: j.partition }),
      el('td', { text: j.nodes }), el('td', { class: 'num', text: String(j.gpus) }),
      el('td', {}, bar, ` ${duration(elapsed)} / ${limit ? duration(limit) : 'none'}`));
  };
  const th = (t) => el('th', { scope: 'col', text: t });
  page('Queue',
    el('section', { 'aria-labelledby': 'h-pending' },
      el('h2', { id: 'h-pending', text: `Pending (${q.pending_total}), in priority order` }),
      q.pending_total > shown.length ? el('p', { text: `The first ${shown.length} are shown.` }) : null,
      el('table', { id: 'pending' },
        el('thead', {}, el('tr', {}, ['#', 'Job', 'Name', 'User', 'Partition', 'GPUs', 'Priority', 'Reason', 'Expected start', 'Why not'].map(th))),
        el('tbody', {}, shown.map(prow)))),
    el('section', { 'aria-labelledby': 'h-running' },
      el('h2', { id: 'h-running', text: `Running (${q.running_total})` }),
      q.running_total > q.running.length ? el('p', { text: `The first ${q.running.length} by job id are shown.` }) : null,
      el('table', { id: 'running' },
        el('thead', {}, el('tr', {}, ['Job', 'Name', 'User', 'Partition', 'Nodes', 'GPUs', 'Elapsed / limit'].map(th))),
        el('tbody', {}, q.running.map(rrow)))));
}

// --- accounts -----------------------------------------------------------------------------

function amount(a) {
  if (!a) return '';
  const parts = [];
  if (a.gpus !== null && a.gpus !== undefined) parts.push(`${a.gpus} GPUs`);
  if (a.cpus !== null && a.cpus !== undefined) parts.push(`${a.cpus} CPUs`);
  if (a.mem_mib !== null && a.mem_mib !== undefined) parts.push(`${a.mem_mib} MiB`);
  if (a.nics !== null && a.nics !== undefined) parts.push(`${a.nics} NICs`);
  return parts.join(', ');
}

async function accountsPage() {
  let shares; let queues;
  try {
    [shares, queues] = await Promise.all([api('GET', '/api/v1/shares'), api('GET', '/api/v1/queues')]);
  } catch (e) { return failure('Accounts', e); }
  const th = (t) => el('th', { scope: 'col', text: t });
  const n = (x, d) => (x === null || x === undefined ? '' : Number(x).toFixed(d));
  page('Accounts',
    el('section', { 'aria-labelledby': 'h-shares' },
      el('h2', { id: 'h-shares', text: 'Fair-share tree' }),
      el('table', { id: 'shares' },
        el('thead', {}, el('tr', {}, ['Account', 'User', 'Parent', 'Shares', 'Normalised shares', 'Raw usage', 'Effective usage', 'Fair-share factor'].map(th))),
        el('tbody', {}, shares.shares.map((r) => el('tr', { dataset: { account: r.account, user: r.user } },
          el('td', { text: r.account }), el('td', { text: r.user }), el('td', { text: r.parent || '' }),
          el('td', { class: 'num', text: r.raw_shares }), el('td', { class: 'num', text: n(r.norm_shares, 3) }),
          el('td', { class: 'num', text: n(r.raw_usage, 0) }), el('td', { class: 'num', text: n(r.effective_usage, 3) }),
          el('td', { class: 'num', text: n(r.fairshare, 3) })))))),
    el('section', { 'aria-labelledby': 'h-queues' },
      el('h2', { id: 'h-queues', text: `Queues (${queues.queues.length})` }),
      queues.queues.length ? el('table', { id: 'queues' },
        el('thead', {}, el('tr', {}, ['Queue', 'Cohort', 'Nominal quota', 'Used', 'Borrowed', 'Admitted', 'Pending', 'Over quota'].map(th))),
        el('tbody', {}, queues.queues.map((q) => el('tr', {},
          el('td', { text: q.name }), el('td', { text: q.cohort || '' }), el('td', { text: amount(q.nominal) }),
          el('td', { text: amount(q.used) }), el('td', { text: amount(q.borrowed) }),
          el('td', { class: 'num', text: String(q.admitted) }), el('td', { class: 'num', text: String(q.pending) }),
          el('td', { text: q.over_quota ? 'yes' : 'no' })))))
        : el('p', { text: 'No queues are configured: jobs are admitted by partition and fair-share alone.' })));
}

// --- scheduler ----------------------------------------------------------------------------

// A bar per sample, with its figures in words for those who do not see the bars.
function bars(id, label, samples, value, unit) {
  const vals = samples.map(value);
  const max = Math.max(1, ...vals);
  const last = vals.length ? vals[vals.length - 1] : 0;
  const words = `${label}: last ${last}${unit}, highest ${Math.max(0, ...vals)}${unit}, over ${vals.length} samples`;
  return el('figure', { class: 'chart', id },
    el('div', { class: 'bars', role: 'img', 'aria-label': words },
      vals.map((v) => {
        const b = el('span', { class: 'bar', title: `${v}${unit}` });
        b.style.height = `${Math.round((v / max) * 100)}%`;
        return b;
      })),
    el('figcaption', { text: words }));
}

async function schedulerPage() {
  let v;
  try { v = await api('GET', '/ui/scheduler'); } catch (e) { return failure('Scheduler', e); }
  S.samples = S.samples.filter((x) => x.now <= v.now);
  const prev = S.samples[S.samples.length - 1];
  if (!prev || prev.now !== v.now || prev.passes !== v.passes) S.samples.push(v);
  if (S.samples.length > 120) S.samples.shift();
  const first = S.samples[0];
  const span = v.now - first.now;
  const perMin = span > 0 ? ((v.submitted - first.submitted) * 60) / span : null;
  const ms = (us) => `${(us / 1000).toFixed(1)} ms`;
  page('Scheduler',
    el('dl', { id: 'sched' },
      el('dt', { text: 'Scheduling passes' }), el('dd', { id: 'sched-passes', text: String(v.passes) }),
      el('dt', { text: 'Last pass' }), el('dd', { text: ms(v.last_pass_us) }),
      el('dt', { text: 'Mean pass' }), el('dd', { text: ms(v.mean_pass_us) }),
      el('dt', { text: 'Longest pass' }), el('dd', { text: ms(v.max_pass_us) }),
      el('dt', { text: 'Pending' }), el('dd', { id: 'sched-pending', text: `${v.pending} (${v.held} held)` }),
      el('dt', { text: 'Running' }), el('dd', { text: String(v.running) }),
      el('dt', { text: 'Submitted since start' }), el('dd', { text: String(v.submitted) }),
      perMin === null ? null : [el('dt', { text: 'Submissions per minute' }), el('dd', { text: perMin.toFixed(1) })]),
    el('h2', { text: 'Since this page was opened (a sample at each change)' }),
    bars('chart-pending', 'Pending jobs', S.samples, (x) => x.pending, ''),
    bars('chart-running', 'Running jobs', S.samples, (x) => x.running, ''),
    bars('chart-pass', 'Last pass', S.samples, (x) => Math.round(x.last_pass_us / 1000), ' ms'));
}

// --- job ----------------------------------------------------------------------------------

function ranges(list) {
  const out = [];
  const s = [...list].sort((a, b) => a - b);
  for (let i = 0; i < s.length;) {
    let j = i;
    while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
    out.push(i === j ? `${s[i]}` : `${s[i]}-${s[j]}`);
    i = j + 1;
  }
  return out.join(',');
}

async function act(id, verb, label) {
  if (!await confirmAction(`${label} job ${id}?`, `${label} job ${id}. This cannot be undone from here.`)) return;
  try {
    if (verb === 'cancel') await api('POST', `/api/v1/jobs/${id}/cancel`, {});
    else await api('POST', `/api/v1/jobs/${id}/${verb}`);
    toast(`Job ${id}: ${label.toLowerCase()} done`);
  } catch (e) {
    if (over(e)) return;
    toast(`Job ${id}: ${label.toLowerCase()} refused: ${e.message}`, true);
  }
  route(true);
}

// A rank's output, read from its node through GET /api/v1/jobs/ID/output: the last 64 KiB
// first, then each new piece from where the last ended, every second until the rank ends.
// The <pre> lives across redraws, so what was read stays, and so does the scroll position.
const OUTPUT_KEEP = 1 << 21;

function followOutput(id, task) {
  const o = S.out;
  if (o && o.job === id && o.task === task) return o;
  if (o) clearTimeout(o.timer);
  S.out = {
    job: id, task, next: null, ended: false, busy: false, timer: null, running: false,
    pre: el('pre', { id: 'output', tabindex: '0', 'aria-label': `Output of task ${task}` }),
    status: el('p', { id: 'output-status', role: 'status', text: 'Reading...' }),
  };
  return S.out;
}

async function pollOutput(o) {
  if (o !== S.out || o.busy) return;
  if (location.hash !== `#/job/${o.job}`) { clearTimeout(o.timer); S.out = null; return; }
  o.busy = true;
  let again = 1000;
  try {
    const from = o.next === null ? '' : `&offset=${o.next}`;
    const r = await api('GET', `/api/v1/jobs/${o.job}/output?task=${o.task}${from}`);
    if (o !== S.out) return;
    const pre = o.pre;
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    if (o.next === null && r.offset > 0) pre.textContent = `[${r.offset} earlier bytes not shown]\n`;
    if (r.data) {
      pre.append(r.data);
      if (pre.textContent.length > OUTPUT_KEEP) pre.textContent = pre.textContent.slice(-OUTPUT_KEEP / 2);
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    o.next = r.next_offset;
    o.ended = r.ended;
    o.status.textContent = `${r.ended ? 'Ended' : 'Running, following'}: ${r.size} bytes on ${r.node}`;
    if (r.next_offset < r.size) again = 0;
    else if (r.ended) again = null;
  } catch (e) {
    if (o !== S.out || over(e)) return;
    o.status.textContent = e.message;
    // The agent may be reconnecting (503), or not have started the rank yet (404 while the
    // job runs); anything else will not change by asking again.
    again = e.status === 503 || (e.status === 404 && o.running) ? 2000 : null;
  } finally {
    o.busy = false;
  }
  if (again !== null) o.timer = setTimeout(() => pollOutput(o), again);
}

function outputSection(id, j, tasks, names) {
  const batch = j.run && j.run.script;
  const choices = batch ? [0] : tasks.map((_, p) => p);
  if (j.state === 'PENDING' || !choices.length) {
    if (S.out) { clearTimeout(S.out.timer); S.out = null; }
    return el('section', { 'aria-labelledby': 'h-output' }, el('h2', { id: 'h-output', text: 'Output' }),
      el('p', { text: 'No output until the job starts.' }));
  }
  const current = S.out && S.out.job === id && choices.includes(S.out.task) ? S.out.task : choices[0];
  const o = followOutput(id, current);
  o.running = j.state === 'RUNNING';
  if (o.timer === null && !o.busy) pollOutput(o);
  const label = (p) => (batch ? `0: the batch script on ${names[tasks[0].node] || tasks[0].node}`
    : `${p}: group ${tasks[p].group} rank ${tasks[p].rank} on ${names[tasks[p].node] || tasks[p].node}`);
  const pick = el('select', { id: 'output-task', onchange: (ev) => { const f = followOutput(id, Number(ev.target.value)); pollOutput(f); route(true); } },
    choices.map((p) => el('option', { value: String(p), text: label(p), selected: p === current })));
  return el('section', { 'aria-labelledby': 'h-output' }, el('h2', { id: 'h-output', text: 'Output' }),
    el('label', { for: 'output-task', text: 'Task ' }), pick, o.status, o.pre);
}

async function jobPage(id) {
  let j; let events; let nodes; let steps;
  try {
    [j, events, nodes, steps] = await Promise.all([
      api('GET', `/api/v1/jobs/${id}`),
      api('GET', `/api/v1/jobs/${id}/events`),
      api('GET', '/api/v1/nodes'),
      api('GET', `/api/v1/jobs/${id}/steps`),
    ]);
  } catch (e) { return failure(`Job ${id}`, e); }
  const names = nodes.nodes.map((n) => n.name);
  const active = j.state === 'PENDING' || j.state === 'RUNNING';
  const buttons = [];
  if (active) buttons.push(el('button', { type: 'button', id: 'act-cancel', class: 'danger', onclick: () => act(id, 'cancel', 'Cancel') }, 'Cancel'));
  if (j.state === 'PENDING' && !j.held) buttons.push(el('button', { type: 'button', id: 'act-hold', onclick: () => act(id, 'hold', 'Hold') }, 'Hold'));
  if (j.state === 'PENDING' && j.held) buttons.push(el('button', { type: 'button', id: 'act-release', onclick: () => act(id, 'release', 'Release') }, 'Release'));
  if (j.state === 'RUNNING') buttons.push(el('button', { type: 'button', id: 'act-requeue', onclick: () => act(id, 'requeue', 'Requeue') }, 'Requeue'));
  const dd = (k, v) => (v === '' || v === null || v === undefined ? null : [el('dt', { text: k }), el('dd', { text: String(v) })]);
  const tasks = j.allocation ? [...j.allocation.tasks].sort((a, b) => a.group - b.group || a.rank - b.rank) : [];
  const groups = j.spec && j.spec.groups ? j.spec.groups : [];
  const cmd = j.run ? (j.run.script ? '(batch script)' : (j.run.command || []).join(' ')) : '';
  page(`Job ${id}`,
    el('p', { class: 'summary' }, el('span', { id: 'job-state', class: `jstate j-${j.state}`, text: j.state }),
      j.state === 'PENDING' ? ` reason ${j.reason}` : '', j.held ? ' (held)' : ''),
    buttons.length ? el('div', { class: 'buttons', role: 'group', 'aria-label': 'Actions' }, buttons) : null,
    el('section', { 'aria-labelledby': 'h-spec' }, el('h2', { id: 'h-spec', text: 'Spec' }),
      el('dl', {},
        dd('Name', j.name), dd('User', j.user), dd('Account', j.account), dd('Partition', j.partition),
        dd('Tasks', j.tasks), dd('GPUs', j.gpus), dd('CPUs', j.cpus),
        dd('Time limit', j.time_limit ? duration(j.time_limit) : 'none'),
        dd('Submitted', when(j.submit_time)), dd('Started', when(j.start_time)), dd('Ended', when(j.end_time)),
        dd('Expected start', when(j.expected_start)), dd('Priority', j.priority), dd('Exit code', j.exit_code),
        dd('Requeues', j.requeues), dd('Nodes', j.nodes), dd('Command', cmd),
        dd('Task groups', groups.map((g) => `${g.name || 'group'} x${g.count}`).join(', ')))),
    el('section', { 'aria-labelledby': 'h-placement' }, el('h2', { id: 'h-placement', text: 'Placement' }),
      tasks.length ? el('table', { id: 'placement' },
        el('thead', {}, el('tr', {}, ['Group', 'Rank', 'Node', 'GPUs', 'Cores', 'NICs', 'Memory (MiB)'].map((t) => el('th', { scope: 'col', text: t })))),
        el('tbody', {}, tasks.map((t) => el('tr', {},
          el('td', { text: String(t.group) }), el('td', { text: String(t.rank) }),
          el('td', { class: 'rank-node', text: names[t.node] || String(t.node) }),
          el('td', { class: 'rank-gpus', text: ranges(t.gpus) }), el('td', { text: ranges(t.cores) }),
          el('td', { text: ranges(t.nics) }), el('td', { class: 'num', text: String(t.mem_mib) })))))
        : el('p', { text: 'Not placed.' })),
    outputSection(id, j, tasks, names),
    el('section', { 'aria-labelledby': 'h-steps' }, el('h2', { id: 'h-steps', text: `Steps (${steps.steps.length})` }),
      steps.steps.length ? el('table', { id: 'steps' },
        el('thead', {}, el('tr', {}, ['Step', 'Name', 'State', 'Nodes', 'Tasks', 'Started', 'Ended', 'Exit code', 'Command'].map((t) => el('th', { scope: 'col', text: t })))),
        el('tbody', {}, steps.steps.map((st) => el('tr', {},
          el('td', { text: `${id}.${st.step}` }), el('td', { text: st.name }), el('td', { text: st.state }),
          el('td', { text: st.nodes }), el('td', { class: 'num', text: String(st.ntasks) }),
          el('td', { text: when(st.start_time) }), el('td', { text: when(st.end_time) }),
          el('td', { text: st.exit_code === null || st.exit_code === undefined ? '' : String(st.exit_code) }),
          el('td', { text: st.command })))))
        : el('p', { text: 'No steps (srun inside the job makes them).' })),
    el('section', { 'aria-labelledby': 'h-events' }, el('h2', { id: 'h-events', text: 'Events' }),
      el('ol', { class: 'timeline', id: 'events' }, events.events.map((e) => el('li', { class: e.warning ? 'warning' : '' },
        el('time', { text: when(e.at) }), ' ', el('strong', { text: e.kind }), e.warning ? ' (warning)' : '', ` ${e.message}`)))));
}

// --- routing ------------------------------------------------------------------------------

async function route(live) {
  if (!S.user) return;
  const h = location.hash || '#/cluster';
  for (const a of document.querySelectorAll('#nav a')) {
    if (h.startsWith(a.getAttribute('href'))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const m = /^#\/job\/(\d{1,19})$/.exec(h);
  if (m) return jobPage(m[1]);
  if (h === '#/queue') return queuePage();
  if (h === '#/accounts') return accountsPage();
  if (h === '#/scheduler') return schedulerPage();
  if (!live && h !== '#/cluster') { location.hash = '#/cluster'; return undefined; }
  return clusterPage();
}

async function boot() {
  let s;
  try {
    s = await api('GET', '/ui/session');
  } catch (e) {
    return loginPage(e.status === 401 ? null : e.message);
  }
  clearToast();
  S.epoch += 1;
  S.user = s.user;
  S.admin = s.admin;
  S.csrf = s.csrf;
  document.getElementById('nav').hidden = false;
  document.getElementById('logout').hidden = false;
  document.getElementById('who').textContent = `${s.user}${s.admin ? ' (administrator)' : ''}`;
  startLive();
  return route(false);
}

window.addEventListener('hashchange', () => { main().focus(); (S.redraw || route)(false); });
document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('logout').addEventListener('click', logout);
  boot();
});
