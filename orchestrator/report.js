/*  report.js — the dashboard of `baton report`, drawn in the page from the run data that
    orchestrator/report.c embeds as JSON in the element #baton-data (type application/json).
    CMake makes this file a C string (report_assets.c); it must hold neither the closing tag of
    a script element nor the end of a CDATA section (the page is also well-formed XML and this
    script sits in a CDATA section); test_report counts the page's script tags.
    A chart per numeric field of each group of lines (train, eval/<dataset>, ...), one colour per
    series (run and variant) in every chart, EMA smoothing (debiased as TensorBoard does), the
    x-axis by step, global_step, tokens or seconds, log scale per chart, per-series toggles, hover
    values, events as vertical marks.  tests/test_report_browser.c drives it in Chromium. */
(function () {
  'use strict';
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
                 '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  /* chart geometry in px: the plot area is [L, R] x [T, B] */
  var W = 640, H = 250, L = 78, R = 624, T = 12, B = 214;
  var X_AXES = [['step', 'step'], ['global_step', 'global step'], ['tokens', 'tokens'],
                ['time', 'seconds']];
  var NOT_CHARTED = {step: true, global_step: true};

  var data = JSON.parse(document.getElementById('baton-data').textContent);
  var state = {smooth: 0, x: 'step', hidden: {}, eventsOff: {}, log: {}};
  var charts = [];      /* {id, group, field, lines: [{series, stream}], svg} */
  var trainOf = {};     /* series -> its train stream, for x values eval lines lack */

  function colour(k) { return PALETTE[k % PALETTE.length]; }
  function finite(v) { return typeof v === 'number' && isFinite(v); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var a in attrs) e.setAttribute(a, attrs[a]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svgEl(tag, attrs) {
    var e = document.createElementNS(NS, tag);
    for (var a in attrs) e.setAttribute(a, attrs[a]);
    return e;
  }
  function fmt(v) {
    if (!finite(v)) return '-';
    var a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : String(+v.toPrecision(5));
  }

  /*  ---- the data: streams of rows, charts of fields --------------------------------------- */

  data.streams.forEach(function (s) {
    if (s.group === 'train') trainOf[s.series] = s;
  });
  (function collect() {
    var byId = {};
    data.streams.forEach(function (s) {
      Object.keys(s.cols).forEach(function (f) {
        if (NOT_CHARTED[f]) return;
        var id = s.group + '/' + f, c = byId[id];
        if (!c) {
          c = byId[id] = {id: id, group: s.group, field: f, lines: []};
          charts.push(c);
        }
        c.lines.push({series: s.series, stream: s});
      });
    });
    /* train first, then SFT, then the evaluations, each in the order the lines came */
    function rank(g) { return g === 'train' ? 0 : g === 'sft' ? 1 : /^eval\//.test(g) ? 2 : 3; }
    var groupAt = {};
    charts.forEach(function (c, i) {
      c.order = i;
      if (!(c.group in groupAt)) groupAt[c.group] = i;
    });
    charts.sort(function (a, b) {
      return rank(a.group) - rank(b.group) || groupAt[a.group] - groupAt[b.group] ||
             a.order - b.order;
    });
  })();

  /*  The x of row i of stream s on the chosen axis; an RL evaluation (or an event) without the
      field (an eval line has no tokens) takes it from its series' last train line at or before
      its step (0 tokens, 0 global steps before the first).  SFT's lines count SFT steps: none. */
  function xOf(s, i) {
    var col = s.cols[state.x];
    if (col) return col[i];
    if (s.group !== undefined && !/^eval\//.test(s.group)) return null;
    var step = s.cols.step[i], t = trainOf[s.series];
    if (!t || !t.cols[state.x]) return null;
    var best = null, steps = t.cols.step;
    for (var j = 0; j < steps.length && steps[j] <= step; j++) best = t.cols[state.x][j];
    return best === null && state.x !== 'time' ? 0 : best;
  }

  /*  Exponential moving average over the finite values in order, debiased as TensorBoard does:
      s_t = a*s_{t-1} + (1-a)*y_t from s_0 = 0, shown as s_t / (1 - a^t), t counting finite values
      (so the first shown value is y_1 itself).  Non-finite values stay gaps. */
  function ema(ys, a) {
    var out = [], last = 0, n = 0;
    for (var i = 0; i < ys.length; i++) {
      var y = ys[i];
      if (!finite(y)) { out.push(null); continue; }
      last = a * last + (1 - a) * y;
      n++;
      out.push(last / (1 - Math.pow(a, n)));
    }
    return out;
  }

  function seriesVisible(k) { return !state.hidden[k]; }
  function eventVisible(e) {
    if (state.eventsOff[e.event]) return false;
    if (e.series >= 0) return seriesVisible(e.series);
    return data.series.some(function (s, k) { return s.run === e.run && seriesVisible(k); });
  }

  /*  ---- axes --------------------------------------------------------------------------- */

  /*  Round ticks of 1, 2 or 5 times a power of ten, about five over [lo, hi]. */
  function niceAxis(lo, hi) {
    if (!(hi - lo > 1e-12 * Math.max(1, Math.abs(hi)))) {
      var pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    }
    var raw = (hi - lo) / 5, mag = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10));
    var f = raw / mag, step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
    var a = {lo: Math.floor(lo / step) * step, hi: Math.ceil(hi / step) * step, ticks: [],
             step: step};
    for (var v = a.lo; v <= a.hi + step * 1e-6 && a.ticks.length < 50; v += step)
      a.ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return a;
  }

  /*  A tick's label with as many decimals as the tick step needs (so 0.9999995 and 1 differ). */
  function tickText(v, step) {
    if (v === 0) return '0';
    var dec = Math.max(0, Math.ceil(-Math.log(step) / Math.LN10 - 1e-9));
    if (Math.abs(v) >= 1e6 || (dec > 6 && Math.abs(v) < 1e-3 && v !== 0)) return v.toExponential(2);
    return v.toFixed(Math.min(dec, 12));
  }

  /*  ---- one chart ---------------------------------------------------------------------- */

  function drawChart(c) {
    var svg = c.svg, log = !!state.log[c.id];
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var drawn = [], x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    c.lines.forEach(function (ln) {
      var s = ln.stream, ys = s.cols[c.field], sm = ema(ys, state.smooth), pts = [];
      for (var i = 0; i < ys.length; i++) {
        var x = xOf(s, i), y = ys[i];
        var ok = finite(x) && finite(y) && (!log || y > 0);
        pts.push(ok ? {x: x, y: y, s: sm[i], row: i} : null);
        if (ok && seriesVisible(ln.series)) {
          var v = log ? Math.log(y) / Math.LN10 : y;
          x0 = Math.min(x0, x); x1 = Math.max(x1, x);
          y0 = Math.min(y0, v); y1 = Math.max(y1, v);
        }
      }
      drawn.push({series: ln.series, pts: pts});
    });
    c.drawn = drawn;
    if (!(x0 <= x1)) { /* nothing visible: an empty frame */
      x0 = 0; x1 = 1; y0 = 0; y1 = 1;
    }
    var xa = niceAxis(x0, x1), ya = niceAxis(y0, y1);
    c.xa = xa; c.ya = ya;
    svg.setAttribute('data-x0', xa.lo); svg.setAttribute('data-x1', xa.hi);
    svg.setAttribute('data-y0', ya.lo); svg.setAttribute('data-y1', ya.hi);
    svg.setAttribute('data-scale', log ? 'log' : 'linear');
    svg.setAttribute('data-x', state.x);
    function px(x) { return L + (x - xa.lo) / (xa.hi - xa.lo) * (R - L); }
    function py(y) {
      var v = log ? Math.log(y) / Math.LN10 : y;
      return B - (v - ya.lo) / (ya.hi - ya.lo) * (B - T);
    }
    c.px = px;
    ya.ticks.forEach(function (v) {
      var y = B - (v - ya.lo) / (ya.hi - ya.lo) * (B - T);
      svg.appendChild(svgEl('line', {'class': 'grid', x1: L, y1: y, x2: R, y2: y}));
      var t = svgEl('text', {x: L - 6, y: y + 4, 'text-anchor': 'end'});
      t.textContent = log ? fmt(Math.pow(10, v)) : tickText(v, ya.step);
      svg.appendChild(t);
    });
    xa.ticks.forEach(function (v) {
      var x = px(v);
      svg.appendChild(svgEl('line', {'class': 'axis', x1: x, y1: B, x2: x, y2: B + 5}));
      var t = svgEl('text', {x: x, y: B + 18, 'text-anchor': 'middle'});
      t.textContent = tickText(v, xa.step);
      svg.appendChild(t);
    });
    /* which build and command made each run drawn here, with the chart wherever it goes */
    var title = svgEl('title', {}), runs = [];
    c.lines.forEach(function (ln) {
      var run = data.series[ln.series].run;
      if (seriesVisible(ln.series) && runs.indexOf(run) < 0) runs.push(run);
    });
    title.textContent = c.id + '\n' + runs.map(function (k) { return data.runs[k].identity; })
                                            .join('');
    svg.appendChild(title);
    svg.appendChild(svgEl('line', {'class': 'axis', x1: L, y1: B, x2: R, y2: B}));
    svg.appendChild(svgEl('line', {'class': 'axis', x1: L, y1: T, x2: L, y2: B}));
    var xt = svgEl('text', {'class': 'axis-title', x: (L + R) / 2, y: B + 32,
                            'text-anchor': 'middle'});
    xt.textContent = X_AXES.filter(function (a) { return a[0] === state.x; })[0][1];
    svg.appendChild(xt);
    drawEvents(c, svg, xa, px);
    drawn.forEach(function (d) {
      var g = svgEl('g', {'class': 'series', 'data-series': d.series});
      var raw = svgEl('path', {'class': 'raw', 'data-series': d.series, d: pathOf(d.pts, px, py, 'y'),
                               stroke: colour(d.series)});
      var smooth = svgEl('path', {'class': 'smooth', 'data-series': d.series,
                                  d: pathOf(d.pts, px, py, 's'), stroke: colour(d.series)});
      if (!seriesVisible(d.series)) {
        g.setAttribute('display', 'none');
        raw.setAttribute('display', 'none');
        smooth.setAttribute('display', 'none');
      }
      if (state.smooth > 0) raw.setAttribute('stroke-opacity', '0.3');
      else raw.setAttribute('stroke-opacity', '0');
      g.appendChild(raw);
      g.appendChild(smooth);
      if (/^(sft-)?eval\//.test(c.group)) /* evaluations are sparse: a dot at each */
        d.pts.forEach(function (p) {
          if (p && finite(py(p.y)))
            g.appendChild(svgEl('circle', {'class': 'point', cx: px(p.x).toFixed(3),
                                           cy: py(p.y).toFixed(3), r: 2.5,
                                           fill: colour(d.series)}));
        });
      svg.appendChild(g);
    });
    c.guide = svgEl('line', {'class': 'guide', x1: 0, y1: T, x2: 0, y2: B, display: 'none'});
    svg.appendChild(c.guide);
  }

  /*  "M x,y L x,y ..." of the points' field f (y raw, s smoothed); a gap starts a new M. */
  function pathOf(pts, px, py, f) {
    var d = [], open = false;
    pts.forEach(function (p) {
      if (!p || !finite(p[f]) || !finite(py(p[f]))) { open = false; return; }
      d.push((open ? 'L' : 'M') + px(p.x).toFixed(3) + ',' + py(p[f]).toFixed(3));
      open = true;
    });
    return d.join(' ');
  }

  /*  Events at their step (time on the seconds axis), within the chart's x range. */
  function drawEvents(c, svg, xa, px) {
    var g = svgEl('g', {'class': 'events'});
    data.events.forEach(function (e) {
      var x = state.x === 'time' ? e.time : eventX(e);
      if (!finite(x) || x < xa.lo || x > xa.hi) return;
      var k = e.series >= 0 ? e.series : firstSeries(e.run);
      var line = svgEl('line', {'class': 'event', 'data-event': e.event, 'data-series': k,
                                x1: px(x), y1: T, x2: px(x), y2: B, stroke: colour(k)});
      if (!eventVisible(e)) line.setAttribute('display', 'none');
      var title = svgEl('title', {});
      title.textContent = e.text;
      line.appendChild(title);
      g.appendChild(line);
    });
    svg.appendChild(g);
  }
  function firstSeries(run) {
    for (var k = 0; k < data.series.length; k++)
      if (data.series[k].run === run) return k;
    return 0;
  }
  /*  An event's step on the chosen axis, through its series' train lines. */
  function eventX(e) {
    if (!finite(e.step)) return null;
    if (state.x === 'step') return e.step;
    var t = trainOf[e.series >= 0 ? e.series : firstSeries(e.run)];
    if (!t) return null;
    return xOf({series: t.series, cols: {step: [e.step]}}, 0);
  }

  /*  ---- hover --------------------------------------------------------------------------- */

  var tip = el('div', {id: 'tooltip', 'class': 'tooltip'});
  function hover(c, ev) {
    var box = c.svg.getBoundingClientRect();
    var mx = (ev.clientX - box.left) * W / box.width;
    if (mx < L || mx > R || !c.drawn) { unhover(c); return; }
    var xv = c.xa.lo + (mx - L) / (R - L) * (c.xa.hi - c.xa.lo), rows = [];
    c.drawn.forEach(function (d) {
      if (!seriesVisible(d.series)) return;
      var best = null;
      d.pts.forEach(function (p) {
        if (p && (!best || Math.abs(p.x - xv) < Math.abs(best.x - xv))) best = p;
      });
      if (best) rows.push({series: d.series, p: best});
    });
    if (!rows.length) { unhover(c); return; }
    c.guide.setAttribute('x1', c.px(rows[0].p.x));
    c.guide.setAttribute('x2', c.px(rows[0].p.x));
    c.guide.removeAttribute('display');
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    tip.appendChild(el('div', {'class': 'tip-head'}, c.id));
    rows.forEach(function (r) {
      var line = el('div', {});
      line.appendChild(el('span', {'class': 'swatch', style: 'background:' + colour(r.series)}));
      var text = data.series[r.series].label + ': ' + fmt(r.p.y) +
                 (state.smooth > 0 ? ' (smoothed ' + fmt(r.p.s) + ')' : '') + ' at ' +
                 state.x + ' ' + fmt(r.p.x);
      line.appendChild(document.createTextNode(text));
      tip.appendChild(line);
    });
    tip.style.display = 'block';
    tip.style.left = (ev.clientX + 14) + 'px';
    tip.style.top = (ev.clientY + 14) + 'px';
  }
  function unhover(c) {
    tip.style.display = 'none';
    if (c.guide) c.guide.setAttribute('display', 'none');
  }

  /*  ---- the page ------------------------------------------------------------------------ */

  function redraw() { charts.forEach(drawChart); }

  function controls(root) {
    var bar = el('div', {id: 'controls'});
    var sl = el('input', {type: 'range', id: 'smoothing', min: '0', max: '0.99', step: '0.01',
                          value: '0'});
    var slv = el('span', {id: 'smoothing-value'}, '0');
    sl.addEventListener('input', function () {
      state.smooth = Math.min(0.99, Math.max(0, parseFloat(sl.value) || 0));
      slv.textContent = String(state.smooth);
      document.body.setAttribute('data-smoothing', String(state.smooth));
      redraw();
    });
    var lab = el('label', {}, 'smoothing ');
    lab.appendChild(sl);
    lab.appendChild(slv);
    bar.appendChild(lab);
    var xs = el('select', {id: 'xaxis'});
    X_AXES.forEach(function (a) {
      var any = data.streams.some(function (s) { return !!s.cols[a[0]]; });
      if (any) xs.appendChild(el('option', {value: a[0]}, a[1]));
    });
    xs.addEventListener('change', function () { state.x = xs.value; redraw(); });
    var xl = el('label', {}, ' x-axis ');
    xl.appendChild(xs);
    bar.appendChild(xl);
    var lg = el('input', {type: 'checkbox', id: 'log-all'});
    lg.addEventListener('change', function () {
      charts.forEach(function (c) { state.log[c.id] = lg.checked; c.logBox.checked = lg.checked; });
      redraw();
    });
    var ll = el('label', {}, ' log scale (all) ');
    ll.appendChild(lg);
    bar.appendChild(ll);
    root.appendChild(bar);

    var legend = el('div', {id: 'legend'});
    data.series.forEach(function (s, k) {
      var l = el('label', {'class': 'series-label', 'data-series': k});
      var cb = el('input', {type: 'checkbox', 'class': 'series-toggle', 'data-series': k});
      cb.checked = true;
      cb.addEventListener('change', function () {
        state.hidden[k] = !cb.checked;
        l.setAttribute('class', cb.checked ? 'series-label' : 'series-label off');
        redraw();
      });
      l.appendChild(cb);
      l.appendChild(el('span', {'class': 'swatch', style: 'background:' + colour(k)}));
      l.appendChild(document.createTextNode(s.label));
      var run = data.runs[s.run];
      if (run.build) l.appendChild(el('span', {'class': 'build'}, ' ' + run.build));
      l.setAttribute('title', run.identity);
      legend.appendChild(l);
    });
    root.appendChild(legend);

    var names = [];
    data.events.forEach(function (e) {
      if (names.indexOf(e.event) < 0) names.push(e.event);
    });
    if (names.length) {
      var evs = el('div', {id: 'event-toggles'}, 'events: ');
      names.forEach(function (n) {
        var l = el('label', {});
        var cb = el('input', {type: 'checkbox', 'class': 'event-toggle', 'data-event': n});
        cb.checked = true;
        cb.addEventListener('change', function () { state.eventsOff[n] = !cb.checked; redraw(); });
        l.appendChild(cb);
        l.appendChild(document.createTextNode(n + ' '));
        evs.appendChild(l);
      });
      root.appendChild(evs);
    }
  }

  function build() {
    var root = document.getElementById('dashboard');
    controls(root);
    var group = null, box = null;
    charts.forEach(function (c) {
      if (c.group !== group) {
        group = c.group;
        root.appendChild(el('h3', {}, group));
        box = el('div', {'class': 'charts'});
        root.appendChild(box);
      }
      var card = el('div', {'class': 'chart-card'});
      var head = el('div', {'class': 'chart-head'}, c.field + ' ');
      var lb = el('label', {}, 'log ');
      c.logBox = el('input', {type: 'checkbox', 'class': 'log-toggle', 'data-chart': c.id});
      c.logBox.addEventListener('change', function () {
        state.log[c.id] = c.logBox.checked;
        drawChart(c);
      });
      lb.appendChild(c.logBox);
      head.appendChild(lb);
      card.appendChild(head);
      c.svg = svgEl('svg', {'class': 'chart', 'data-chart': c.id, width: W, height: H,
                            viewBox: '0 0 ' + W + ' ' + H, 'data-left': L, 'data-right': R,
                            'data-top': T, 'data-bottom': B});
      c.svg.addEventListener('mousemove', function (ev) { hover(c, ev); });
      c.svg.addEventListener('mouseleave', function () { unhover(c); });
      card.appendChild(c.svg);
      box.appendChild(card);
    });
    document.body.appendChild(tip);
    document.body.setAttribute('data-charts', String(charts.length));
    redraw();
  }

  build();
})();
