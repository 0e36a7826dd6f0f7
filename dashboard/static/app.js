// The rollfleet dashboard: one EventSource on /events, one JSON snapshot a
// second, rendered into the page.
//
// The charts are small hand-written SVG (a line chart and a bar chart)
// rather than a plot library: they need a few dozen lines each, and nothing
// has to be vendored, kept up to date or trusted. Everything the page uses
// ships in the rollout binary; it loads nothing from elsewhere.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
// Okabe–Ito colours, told apart with most colour-vision deficiencies; the
// two lightest replaced by darker ones, so each line keeps 3:1 contrast
// against the white background. Every figure a chart draws is also in the
// page's text (totals, tables) for screen readers.
const PALETTE = ['#0072b2', '#d55e00', '#009e73', '#cc79a7', '#a86f00', '#6a3d9a', '#000000', '#7f6a00'];

// LATEST_SHOWN is how many of the latest failure reasons the page lists
// (the snapshot has more).
const LATEST_SHOWN = 8;

const $ = (id) => document.getElementById(id);

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// compact renders a number briefly: 1234 → "1.23k".
function compact(n) {
  if (n === null || n === undefined || !isFinite(n)) return '–';
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toPrecision(3) + 'G';
  if (a >= 1e6) return (n / 1e6).toPrecision(3) + 'M';
  if (a >= 1e4) return (n / 1e3).toPrecision(3) + 'k';
  if (a >= 100 || Number.isInteger(n)) return String(Math.round(n));
  return n.toPrecision(3);
}

// integer renders a count exactly, with thousands separators.
const integer = (n) => Number(n).toLocaleString('en-US');

function clock(ms) {
  return new Date(ms).toLocaleTimeString('en-GB', { hour12: false });
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
function niceCeil(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// lineChart draws series (each {name, color, values}, values aligned with
// times, null for a gap) into svg, with y from yMin to yMax (default: a
// nice bound above the largest value).
function lineChart(svg, times, series, opts) {
  const box = svg.viewBox.baseVal;
  const o = Object.assign({ w: box.width, h: box.height, yMin: 0, yMax: null, fmt: compact }, opts);
  const m = { l: 44, r: 8, t: 8, b: 22 };
  svg.replaceChildren();
  let top = o.yMax;
  if (top === null) {
    let max = 0;
    for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
    top = niceCeil(max);
  }
  const pw = o.w - m.l - m.r, ph = o.h - m.t - m.b;
  const y = (v) => m.t + ph * (1 - (v - o.yMin) / (top - o.yMin));
  const n = times.length;
  const x = (i) => m.l + (n <= 1 ? pw : pw * i / (n - 1));
  // Grid lines at the bottom, the middle (or 0, when the range spans it)
  // and the top.
  const mid = o.yMin < 0 && top > 0 ? 0 : (o.yMin + top) / 2;
  for (const v of [o.yMin, mid, top]) {
    if (v === mid && Math.min(y(o.yMin) - y(mid), y(mid) - y(top)) < 14) continue; // labels would overlap
    svg.append(svgEl('line', { class: v === o.yMin ? 'axis' : 'grid', x1: m.l, x2: o.w - m.r, y1: y(v), y2: y(v) }));
    svg.append(svgEl('text', { x: m.l - 4, y: y(v) + 4, 'text-anchor': 'end' }, o.fmt(v)));
  }
  if (n === 0) {
    svg.append(svgEl('text', { class: 'empty', x: o.w / 2, y: o.h / 2, 'text-anchor': 'middle' }, 'no data yet'));
    return;
  }
  svg.append(svgEl('text', { x: m.l, y: o.h - 6 }, clock(times[0])));
  svg.append(svgEl('text', { x: o.w - m.r, y: o.h - 6, 'text-anchor': 'end' }, clock(times[n - 1])));
  for (const s of series) {
    let d = '', pen = false;
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      d += (pen ? 'L' : 'M') + x(i).toFixed(1) + ' ' + y(Math.min(v, top)).toFixed(1);
      pen = true;
    });
    const path = svgEl('path', { class: 'series', d: d || 'M0 0', stroke: s.color });
    path.append(svgEl('title', {}, s.name));
    svg.append(path);
    // A lone point between gaps would not show as a line: mark each one.
    s.values.forEach((v, i) => {
      const prev = s.values[i - 1], next = s.values[i + 1];
      if (v !== null && v !== undefined && (prev === null || prev === undefined) && (next === null || next === undefined)) {
        svg.append(svgEl('circle', { cx: x(i), cy: y(Math.min(v, top)), r: 2.5, fill: s.color }));
      }
    });
  }
}

// barChart draws a histogram: counts[i] of the values up to bounds[i], the
// last count above every bound.
function barChart(svg, hist, label) {
  const w = svg.viewBox.baseVal.width, h = svg.viewBox.baseVal.height, m = { l: 44, r: 8, t: 8, b: 22 };
  svg.replaceChildren();
  const counts = hist.counts || [];
  const total = counts.reduce((a, b) => a + b, 0);
  const top = niceCeil(Math.max(1, ...counts));
  const pw = w - m.l - m.r, ph = h - m.t - m.b;
  const y = (v) => m.t + ph * (1 - v / top);
  for (const f of [0, 0.5, 1]) {
    svg.append(svgEl('line', { class: f === 0 ? 'axis' : 'grid', x1: m.l, x2: w - m.r, y1: y(f * top), y2: y(f * top) }));
    svg.append(svgEl('text', { x: m.l - 4, y: y(f * top) + 4, 'text-anchor': 'end' }, compact(f * top)));
  }
  if (total === 0) {
    svg.append(svgEl('text', { class: 'empty', x: w / 2, y: h / 2, 'text-anchor': 'middle' }, 'no data yet'));
    return;
  }
  const bw = pw / counts.length;
  counts.forEach((c, i) => {
    const name = i < hist.bounds.length ? '≤' + label(hist.bounds[i]) : '>' + label(hist.bounds[hist.bounds.length - 1]);
    const bar = svgEl('rect', { class: 'bar', x: m.l + i * bw + 1, width: Math.max(bw - 2, 1), y: y(c), height: y(0) - y(c) });
    bar.append(svgEl('title', {}, `${name} ${hist.unit}: ${c}`));
    svg.append(bar);
    if (i % 2 === 0 || counts.length <= 10) {
      svg.append(svgEl('text', { x: m.l + (i + 0.5) * bw, y: h - 6, 'text-anchor': 'middle' }, name));
    }
  });
}

const msLabel = (v) => (v >= 1000 ? v / 1000 + 's' : String(v));

function rows(tbody, data, cells, empty) {
  tbody.replaceChildren();
  if (data.length === 0) {
    const tr = el('tr');
    tr.append(el('td', { colspan: tbody.closest('table').querySelectorAll('thead th').length, class: 'note' }, empty));
    tbody.append(tr);
    return;
  }
  for (const d of data) {
    const tr = el('tr');
    for (const c of cells(d)) tr.append(c);
    tbody.append(tr);
  }
}

const td = (text, cls) => el('td', cls ? { class: cls } : {}, text);

function swatch(color) {
  const s = el('span', { class: 'swatch', 'aria-hidden': 'true' });
  s.style.backgroundColor = color;
  return s;
}

function render(s) {
  const t = s.totals;
  $('episodes').textContent = integer(t.episodes);
  $('trajectories').textContent = integer(t.trajectories);
  $('failures').textContent = integer(t.failures);
  $('success-rate').textContent = t.trajectories ? t.success_rate.toFixed(3) : '–';
  $('mean-reward').textContent = t.trajectories ? t.mean_reward.toFixed(4) : '–';
  $('mean-turns').textContent = t.trajectories ? t.mean_turns.toFixed(2) : '–';
  $('turns').textContent = integer(t.turns);
  $('tokens').textContent = integer(t.tokens);
  $('turns-per-s').textContent = compact(s.rates.turns_per_s);
  $('episodes-per-s').textContent = compact(s.rates.episodes_per_s);
  $('tokens-per-s').textContent = compact(s.rates.tokens_per_s);
  const pol = s.fleet.policy;
  $('policy').textContent = pol ? `v${pol.version}${pol.paused ? ' paused' : ''}` : '–';
  let since = `since ${clock(Date.parse(s.started))}`;
  if (s.run) since += `, run ${s.run}`;
  if (t.dropped) since += `; ${integer(t.dropped)} messages dropped (the dashboard fell behind)`;
  $('since').textContent = since;

  const ser = s.series;
  const span = ser.span_s >= 3600 ? `${ser.span_s / 3600} h` : `${ser.span_s / 60} min`;
  $('range').options[$('range').selectedIndex].textContent =
    `${ser.range === 'long' ? 'Long' : 'Recent'}: ${span} in ${ser.step_s} s steps`;
  lineChart($('chart-turns'), ser.t, [{ name: 'turns/s', color: PALETTE[0], values: ser.turns_per_s }]);
  lineChart($('chart-episodes'), ser.t, [{ name: 'episodes/s', color: PALETTE[1], values: ser.episodes_per_s }]);
  lineChart($('chart-tokens'), ser.t, [{ name: 'tokens/s', color: PALETTE[2], values: ser.tokens_per_s }]);

  const envs = s.envs.map((e, i) => Object.assign({ color: PALETTE[i % PALETTE.length] }, e));
  const fixed = (v) => v.toFixed(2);
  lineChart($('chart-success'), ser.t,
    envs.map((e) => ({ name: e.env, color: e.color, values: e.success_rate_series })), { yMax: 1, fmt: fixed });
  let lo = 0, hi = 1;
  for (const e of envs) for (const v of e.mean_reward_series) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  lineChart($('chart-reward'), ser.t,
    envs.map((e) => ({ name: e.env, color: e.color, values: e.mean_reward_series })),
    { yMin: lo < 0 ? -niceCeil(Math.max(-lo, hi / 10)) : 0, yMax: niceCeil(hi), fmt: fixed });
  rows($('envs'), envs, (e) => {
    const name = td(e.env);
    name.prepend(swatch(e.color));
    return [name, td(integer(e.episodes), 'num'), td(integer(e.failures), 'num'),
      td(e.trajectories ? e.success_rate.toFixed(3) : '–', 'num'),
      td(e.trajectories ? e.mean_reward.toFixed(3) : '–', 'num'),
      td(e.trajectories ? e.mean_turns.toFixed(2) : '–', 'num')];
  }, 'No episodes yet.');

  barChart($('chart-latency'), s.turn_latency, msLabel);
  barChart($('chart-length'), s.episode_turns, String);

  rows($('failure-kinds'), s.failure_kinds, (k) => [td(k.kind), td(integer(k.count), 'num')], 'None.');
  rows($('failure-latest'), s.latest_failures.slice(0, LATEST_SHOWN), (f) =>
    [td(clock(Date.parse(f.time))), td(f.kind), td(f.env || ''), td(f.reason, 'reason')], 'None.');

  const fl = s.fleet;
  rows($('workers'), fl.workers || [], (w) => [td(w.kind), td(w.id), td(integer(w.in_flight), 'num'),
    td(integer(w.held), 'num'), td(`v${w.version}${w.paused ? ' paused' : ''}`, 'num'),
    td(w.health, 'health-' + w.health)], fl.polled.startsWith('0001') ? 'Not polled yet.' : 'No worker answered.');
  const eps = (fl.workers || []).flatMap((w) => (w.endpoints || []).map((e) => ({ ...e, worker: w.id })));
  rows($('endpoints'), eps, (e) => [td(e.url), td(e.worker), td(integer(e.in_flight), 'num'),
    td(integer(e.max_in_flight), 'num'), td(e.healthy ? 'ok' : 'down', e.healthy ? 'health-ok' : 'health-down')],
    'No LLM worker reported its endpoints.');
  $('workers-note').textContent = fl.workers_error ? `(${fl.workers_error})` :
    (fl.polled.startsWith('0001') ? '' : `(polled ${clock(Date.parse(fl.polled))})`);
  rows($('streams'), fl.streams || [], (st) => {
    const full = st.max_bytes > 0 ? (100 * st.bytes / st.max_bytes).toFixed(1) + '%' : '–';
    const cons = (st.consumers || []).map((c) => `${c.name} ${integer(c.pending)} / ${integer(c.ack_pending)}`);
    if (st.more_consumers) cons.push(`… ${st.more_consumers} more`);
    return [td(st.name), td(integer(st.messages), 'num'), td(compact(st.bytes), 'num'), td(full, 'num'),
      td(cons.join(', ') || 'none')];
  }, 'Not read yet.');
  $('streams-note').textContent = fl.streams_error ? `(${fl.streams_error})` : '';

  updates++;
  document.body.dataset.updates = String(updates);
  document.body.dataset.snapshotTime = s.time;
}

let source = null;
let updates = 0;

function connect() {
  if (source) source.close();
  source = new EventSource('events?range=' + encodeURIComponent($('range').value));
  source.addEventListener('snapshot', (e) => {
    render(JSON.parse(e.data));
    $('status').textContent = 'Live, updated ' + clock(Date.now());
  });
  source.addEventListener('error', () => {
    $('status').textContent = 'Disconnected: reconnecting…';
  });
}

$('range').addEventListener('change', connect);
connect();
