// The multihome dashboard: polls the daemon's JSON API (api/status, api/history) once a
// second and draws the links' throughput, RTT, loss and state over the history the daemon
// keeps (uPlot), the links, sessions and paths, policies, events and counters.
//
// Read-only: it only GETs. Everything is built with DOM calls and textContent (names come
// from config files and peers), never innerHTML. Hooks for tests and scripts: each link
// row carries data-link, data-session and data-state; each chart data-points (samples
// drawn) and data-last (Unix time of the newest).
'use strict';

const REFRESH_MS = 1000;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
  '#17becf'];
const CHARTS = [
  { id: 'tx', title: 'Sent, Mbit/s', field: 'tx_bps', scale: (v) => v / 1e6 },
  { id: 'rx', title: 'Received, Mbit/s', field: 'rx_bps', scale: (v) => v / 1e6 },
  { id: 'rtt', title: 'RTT, ms', field: 'rtt_ms', scale: (v) => v },
  { id: 'loss', title: 'Loss, %', field: 'loss', scale: (v) => v * 100 },
  { id: 'state', title: 'State (2 up, 1 suspect, 0 down)', field: 'state', scale: (v) => v,
    stepped: true },
];
const plots = {}; // chart id -> { plot, keys }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function num(v, digits) {
  return typeof v === 'number' && isFinite(v) ? v.toFixed(digits) : '-';
}

function bytes(v) {
  if (typeof v !== 'number') return '-';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i += 1; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function row(cells, attrs) {
  const tr = el('tr');
  for (const c of cells) {
    const td = typeof c === 'object' && c !== null ? c : el('td', c);
    tr.appendChild(td);
  }
  for (const [k, v] of Object.entries(attrs || {})) tr.dataset[k] = v;
  return tr;
}

function table(head, rows) {
  const t = el('table');
  t.appendChild(row(head.map((h) => el('th', h))));
  for (const r of rows) t.appendChild(r);
  return t;
}

function stateCell(s) {
  return el('td', s, `text state-${s}`);
}

function drawLinks(hist) {
  const body = document.querySelector('#links tbody');
  body.replaceChildren(...hist.links.map((l) => row([
    el('td', l.session, 'text'), el('td', l.link, 'text'), stateCell(l.state),
    num(l.rtt_ms, 1), num(typeof l.loss === 'number' ? l.loss * 100 : null, 2),
    num(typeof l.tx_bps === 'number' ? l.tx_bps / 1e6 : null, 2),
    num(typeof l.rx_bps === 'number' ? l.rx_bps / 1e6 : null, 2),
    bytes(l.tx_bytes), bytes(l.rx_bytes),
  ], { link: l.link, session: l.session, state: l.state })));
}

function chartWidth(box) {
  // clientWidth includes the box's padding (4 px each side).
  return Math.max(300, box.clientWidth - 8);
}

function drawCharts(hist) {
  const section = document.getElementById('charts');
  const keys = hist.series.map((s) => s.key);
  for (const c of CHARTS) {
    let box = document.getElementById(`chart-${c.id}`);
    if (!box) {
      box = el('div', null, 'chart');
      box.id = `chart-${c.id}`;
      section.appendChild(box);
    }
    const data = [hist.t, ...hist.series.map((s) => s[c.field].map(
      (v) => (v === null ? null : c.scale(v))))];
    const p = plots[c.id];
    if (!p || p.keys.join('\n') !== keys.join('\n')) {
      if (p) p.plot.destroy();
      const opts = {
        title: c.title, width: chartWidth(box), height: 180,
        scales: { x: { time: true } },
        legend: { live: false },
        series: [{}, ...keys.map((k, i) => ({
          label: k, stroke: COLORS[i % COLORS.length], width: 1.5,
          paths: c.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
        }))],
      };
      plots[c.id] = { plot: new uPlot(opts, data, box), keys };
    } else {
      p.plot.setData(data);
    }
    box.dataset.points = String(hist.t.length);
    box.dataset.last = hist.t.length ? String(hist.t[hist.t.length - 1]) : '';
  }
}

function pathTable(links) {
  return table(['path', 'state', 'remote', 'RTT ms', 'min RTT ms', 'loss %', 'rate Mbit/s',
    'cwnd', 'in flight', 'share %', 'mode'], links.map((l) => row([
    el('td', l.name, 'text'), stateCell(l.state), el('td', l.remote, 'text'),
    num(l.srtt_ms, 1), num(l.min_rtt_ms, 1), num(l.loss * 100, 2),
    num(l.delivery_rate_bps / 1e6, 2), bytes(l.cwnd_bytes), bytes(l.inflight_bytes),
    num(l.share * 100, 0), el('td', l.rate_mode, 'text'),
  ])));
}

function drawSessions(doc) {
  const out = [];
  for (const s of doc.sessions || []) {
    const box = el('div', null, 'session');
    box.appendChild(el('div', `session ${s.session_id} · peer ${s.peer} · ` +
      `${s.established ? 'established' : 'not established'} · cipher ${s.cipher || '-'}`));
    box.appendChild(pathTable(s.links || []));
    out.push(box);
  }
  if (Array.isArray(doc.uplinks)) {
    out.push(table(['uplink', 'interface', 'state', 'attempts', 'wins', 'chosen', 'refusals',
      'timeouts', 'failures', 'weight', 'ETT ms'], doc.uplinks.map((u) => row([
      el('td', u.name, 'text'), el('td', u.interface, 'text'), stateCell(u.state || '-'),
      u.attempts, u.wins, u.chosen, u.refusals, u.timeouts, u.failures,
      num(u.avmet_weight, 3), num(u.ett_ms, 1),
    ]))));
  }
  if (Array.isArray(doc.clients)) {
    out.push(table(['client', 'detours'], doc.clients.map((c) => row([
      el('td', c.name, 'text'), c.detours]))));
    for (const c of doc.clients) {
      if (!(c.entries || []).length) continue;
      const box = el('div', null, 'session');
      box.appendChild(el('div', `client ${c.name}: detours through this relay`));
      box.appendChild(table(['mode', 'relay port', 'client source', 'server', 'expires in s'],
        c.entries.map((e) => row([el('td', e.mode, 'text'), e.port,
          el('td', e.source, 'text'), el('td', e.server, 'text'), num(e.expires_in_s, 0)]))));
      out.push(box);
    }
  }
  if (!out.length) out.push(el('p', 'no sessions', 'note'));
  document.getElementById('sessions').replaceChildren(...out);
}

function ruleTable(rules) {
  return table(['class', 'protocol', 'ports', 'DSCP', 'policy'], rules.map((r) => row([
    el('td', r.name || '-', 'text'), el('td', r.protocol ?? 'any', 'text'),
    el('td', Array.isArray(r.ports) ? r.ports.join('-') : (r.ports ?? 'any'), 'text'),
    el('td', r.dscp ?? 'any', 'text'), el('td', r.policy, 'text'),
  ])));
}

function drawPolicies(doc) {
  const out = [];
  const p = doc.policies;
  if (p) {
    out.push(el('div', `sent traffic (this side's classifier): default ${p.default}`));
    if ((p.rules || []).length) out.push(ruleTable(p.rules));
  }
  for (const s of doc.sessions || []) {
    const st = s.stated;
    if (!st || st.default === undefined) continue;
    out.push(el('div', `peer ${s.peer}, stated downlink policy (epoch ${st.epoch}, ` +
      `${st.acked ? 'acknowledged' : 'not acknowledged'}): default ${st.default}`));
    if ((st.rule_list || []).length) out.push(ruleTable(st.rule_list));
  }
  if (doc.role === 'race') {
    out.push(el('div', `predictor ${doc.predictor} · best uplink ${doc.best} · mode ${doc.mode}`));
  }
  if (!out.length) out.push(el('p', 'no flow classes', 'note'));
  document.getElementById('policies').replaceChildren(...out);
}

function drawEvents(doc) {
  const items = (doc.events || []).slice().reverse().map((e) => {
    const li = el('li');
    li.dataset.kind = e.kind;
    const t = el('time', new Date(e.unix_ms).toLocaleTimeString());
    t.dateTime = new Date(e.unix_ms).toISOString();
    li.append(t, el('span', e.kind, `kind kind-${e.kind}`), el('span', e.text));
    return li;
  });
  document.getElementById('events').replaceChildren(...items);
}

function drawCounters(doc) {
  const entries = Object.entries(doc.counters || {}).filter(([, v]) => typeof v === 'number');
  const nonzero = entries.filter(([, v]) => v !== 0).sort();
  document.querySelector('#counters tbody').replaceChildren(
    ...nonzero.map(([k, v]) => row([el('td', k, 'text'), v])));
  document.getElementById('counters-zero').textContent =
    `${entries.length - nonzero.length} counters at zero not shown`;
}

async function getJson(path) {
  const r = await fetch(path, { cache: 'no-store' });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

async function refresh() {
  const err = document.getElementById('error');
  try {
    const [doc, hist] = await Promise.all([getJson('api/status'), getJson('api/history')]);
    document.getElementById('role').textContent = doc.role || '';
    drawLinks(hist);
    drawCharts(hist);
    drawSessions(doc);
    drawPolicies(doc);
    drawEvents(doc);
    drawCounters(doc);
    document.getElementById('updated').textContent =
      `updated ${new Date().toLocaleTimeString()}`;
    err.hidden = true;
  } catch (e) {
    err.textContent = `daemon unreachable: ${e.message}`;
    err.hidden = false;
  }
}

window.addEventListener('resize', () => {
  for (const c of CHARTS) {
    const box = document.getElementById(`chart-${c.id}`);
    if (plots[c.id] && box) plots[c.id].plot.setSize({ width: chartWidth(box), height: 180 });
  }
});

async function loop() {
  await refresh();
  setTimeout(loop, REFRESH_MS);
}
loop();
