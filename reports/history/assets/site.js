/* rlbench publish: renders a benchmark page's charts from its JSON block with plotly, each chart when it scrolls
   into view (IntersectionObserver), and filters the index table. No network, no other library. */
(function () {
  'use strict';
  var root = document.documentElement;
  root.dataset.tScript = performance.now().toFixed(1); // when this script (after plotly) started, ms since navigation

  // --- index: filter rows by text ---
  var filter = document.getElementById('filter');
  if (filter) {
    filter.addEventListener('input', function () {
      var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      document.querySelectorAll('table.series tbody tr').forEach(function (tr) {
        var text = tr.textContent.toLowerCase();
        tr.style.display = words.every(function (w) { return text.indexOf(w) >= 0; }) ? '' : 'none';
      });
    });
  }

  var block = document.getElementById('rlbench-data');
  if (!block) {
    root.dataset.tReady = performance.now().toFixed(1);
    root.dataset.chartsReady = '0';
    return;
  }
  if (typeof Plotly === 'undefined') {
    console.error('rlbench: assets/plotly.min.js did not load; charts cannot be drawn');
    return;
  }
  var D = JSON.parse(block.textContent);
  D.charts.forEach(function (ch) {
    if (ch.of !== undefined) ch.traces = D.charts[ch.of].traces;  // a share chart draws its stack chart's data
  });
  D.charts.forEach(function (ch) {  // a sample count the same at every commit is stored once
    (ch.traces || []).forEach(function (t) {
      if (typeof t.n === 'number') {
        var k = t.n;
        t.n = t.y.map(function (y) { return y === null ? 0 : k; });
      }
      if (!t.lo) t.lo = t.y;
      if (!t.hi) t.hi = t.y;
    });
  });

  // plotly reads a subset of HTML in names and hover text: user text is escaped
  function esc(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  }
  function trunc(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }
  function num(v) {
    if (v === null || v === undefined) return '–';
    var a = Math.abs(v);
    return a !== 0 && (a >= 1e6 || a < 1e-3) ? v.toExponential(3) : String(Number(v.toPrecision(5)));
  }

  var heads = D.machines.map(function (m) {
    return m.x.map(function (i) {
      var c = D.commits[i];
      return '<b>' + esc(c[0].slice(0, 8)) + '</b> ' + esc(c[1]) + (c[3] ? ' (dirty tree)' : '') +
        '<br>' + esc(trunc(c[2] || '', 90));
    });
  });

  function axis(m) {
    var n = m.x.length, step = Math.max(1, Math.ceil(n / 8)), vals = [];
    for (var i = 0; i < n; i += step) vals.push(i);
    if (vals[vals.length - 1] !== n - 1) vals.push(n - 1);
    return {
      tickvals: vals,
      ticktext: vals.map(function (i) { return esc(D.commits[m.x[i]][0].slice(0, 7)); }),
      range: [-0.5, n - 0.5], title: { text: 'commit (oldest → newest)' }, showgrid: false, zeroline: false
    };
  }

  function gapShapes(m) {
    return m.gaps.slice(0, 300).map(function (g) {
      return {
        type: 'line', xref: 'x', yref: 'paper', x0: g[0], x1: g[0], y0: 0, y1: 1,
        line: { color: g[1] === 'failed' ? 'rgba(179,38,30,0.55)' : 'rgba(120,120,120,0.45)', width: 1, dash: 'dot' }
      };
    });
  }

  // the interval of each commit as a shaded band (one polygon per run of measured commits: a gap breaks it)
  function band(t, color) {
    var xs = [], ys = [], i = 0, n = t.y.length;
    while (i < n) {
      if (t.y[i] === null || t.lo[i] === null) { i++; continue; }
      var j = i;
      while (j < n && t.y[j] !== null && t.lo[j] !== null) j++;
      var k;
      for (k = i; k < j; k++) { xs.push(k); ys.push(t.hi[k]); }
      for (k = j - 1; k >= i; k--) { xs.push(k); ys.push(t.lo[k]); }
      if (j - i === 1) { xs.push(i); ys.push(t.hi[i]); }
      xs.push(null); ys.push(null);
      i = j;
    }
    return {
      type: 'scatter', mode: 'lines', x: xs, y: ys, fill: 'toself', fillcolor: color, line: { width: 0 },
      hoverinfo: 'skip', showlegend: false, meta: 'band'
    };
  }

  var COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  function rgba(hex, a) {
    var v = parseInt(hex.slice(1), 16);
    return 'rgba(' + (v >> 16) + ',' + ((v >> 8) & 255) + ',' + (v & 255) + ',' + a + ')';
  }

  function lineTraces(ch, m, head) {
    var x = m.x.map(function (_, i) { return i; });
    var out = [];
    ch.traces.forEach(function (t, k) {
      var color = COLORS[k % COLORS.length];
      var measured = t.y.filter(function (y) { return y !== null; }).length;
      var cd = t.y.map(function (y, i) {
        if (y === null) return null;
        var iv = t.n[i] > 1 ? (t.n[i] >= 6 ? '95% CI ' : 'range ') + num(t.lo[i]) + ' – ' + num(t.hi[i]) : 'one sample';
        return [head[i], iv, t.n[i], esc(ch.unit || '')];
      });
      if (!ch.exact) out.push(band(t, rgba(color, 0.22)));
      out.push({
        type: 'scatter', mode: measured > 300 ? 'lines' : 'lines+markers', name: esc(t.name), x: x, y: t.y,
        customdata: cd, connectgaps: false, marker: { size: 4, color: color }, line: { width: 1.4, color: color },
        meta: 'series',
        hovertemplate: '%{customdata[0]}<br>median %{y:.5g} %{customdata[3]}<br>%{customdata[1]}' +
          '<br>%{customdata[2]} sample(s)<extra>%{fullData.name}</extra>'
      });
    });
    return out;
  }

  function barTraces(ch, m, head) {
    var x = m.x.map(function (_, i) { return i; });
    var share = ch.kind === 'share';
    return ch.traces.map(function (t) {
      return {
        type: 'bar', meta: 'series', name: esc(t.name), x: x, y: t.y, customdata: head,
        hovertemplate: '%{customdata}<br>' + esc(t.name) + ': ' + (share ? '%{y:.1f}%' : '%{y:.4g} s') + '<extra></extra>'
      };
    });
  }

  function draw(el) {
    var ch = D.charts[+el.dataset.chart], m = D.machines[ch.m], head = heads[ch.m];
    var line = ch.kind === 'line';
    var layout = {
      height: 290, margin: { l: 60, r: 12, t: 8, b: 48 }, xaxis: axis(m),
      yaxis: { title: { text: esc(line ? ch.unit || '' : ch.kind === 'share' ? '% of phase total' : 's') },
        rangemode: line ? 'normal' : 'tozero', ticksuffix: ch.kind === 'share' ? '%' : '' },
      showlegend: ch.traces.length > 1 || !line, legend: { orientation: 'h', y: -0.25 }, hovermode: 'closest',
      shapes: gapShapes(m), font: { size: 11 }
    };
    if (!line) {
      layout.barmode = 'stack';
      layout.bargap = 0.05;
      if (ch.kind === 'share') layout.barnorm = 'percent';
      layout.hovermode = 'x';
    }
    if (layout.showlegend) layout.height = 330;
    el.style.height = layout.height + 'px';
    var traces = line ? lineTraces(ch, m, head) : barTraces(ch, m, head);
    return Plotly.newPlot(el, traces, layout, { displaylogo: false, responsive: true }).then(function () {
      el.dataset.rendered = '1';
    });
  }

  var pending = [];
  function render(el) {
    if (el.dataset.rendering) return Promise.resolve();
    el.dataset.rendering = '1';
    var p = draw(el);
    pending.push(p);
    return p;
  }

  var charts = Array.prototype.slice.call(document.querySelectorAll('div.chart[data-chart]'));
  var first = true;
  function settle() {
    Promise.all(pending).then(function () {
      root.dataset.tReady = performance.now().toFixed(1);
      root.dataset.chartsReady = String(document.querySelectorAll('div.chart[data-rendered]').length);
    });
  }
  if ('IntersectionObserver' in window) {
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (e.isIntersecting) {
          observer.unobserve(e.target);
          render(e.target);
        }
      });
      if (first) { first = false; settle(); }
    }, { rootMargin: '0px' });
    charts.forEach(function (el) { observer.observe(el); });
    if (!charts.length) settle();
  } else {
    charts.forEach(render);
    settle();
  }

  // for tests and for printing: draw every chart now
  window.rlbenchSite = {
    renderAll: function () { return Promise.all(charts.map(render)); },
    charts: charts
  };
})();
