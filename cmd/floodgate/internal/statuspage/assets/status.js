// Floodgate status page: polls status.json once a second and redraws.
// The chart starts from the server's history of the last hour
// (history.json), then grows a point a poll. Everything that comes from the
// feed is inserted with textContent, never as HTML: rejected keys are
// chosen by clients.
"use strict";
(function () {
  var POLL_MS = 1000, HISTORY = 3600;
  var history = []; // {t (ms), ok, rej} per second, oldest first
  var failures = 0;

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmtNum(n) {
    if (n === undefined || n === null || isNaN(n)) return "–";
    if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
    if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
    if (n >= 100) return Math.round(n).toString();
    if (n >= 10) return n.toFixed(1);
    return n.toFixed(n === 0 ? 0 : 2);
  }
  function fmtInt(n) { return (n || 0).toLocaleString("en-US"); }
  function fmtDur(s) {
    s = Math.floor(s || 0);
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60), r = s % 60;
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + r + "s";
    return r + "s";
  }
  function fmtMs(ms) {
    if (!ms) return "–";
    if (ms < 1) return (ms * 1000).toFixed(0) + " µs";
    return ms.toFixed(2) + " ms";
  }
  function setText(id, text) { $(id).textContent = text; }
  function replaceRows(tbody, rows, emptyCols, emptyText) {
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    if (!rows.length) {
      var tr = el("tr"), td = el("td", "empty", emptyText);
      td.colSpan = emptyCols; tr.appendChild(td); tbody.appendChild(tr);
      return;
    }
    rows.forEach(function (r) { tbody.appendChild(r); });
  }

  function renderCards(m) {
    var q = m.requests || {};
    setText("rps", fmtNum(q.per_s));
    setText("rps-sub", fmtInt((q.allowed || 0) + (q.rejected || 0) + (q.unmatched || 0) + (q.errors || 0)) + " since start");
    setText("rejps", fmtNum(q.rejected_per_s));
    $("rejps").className = "value" + (q.rejected_per_s > 0 ? " rej" : "");
    setText("rej-sub", fmtInt(q.rejected) + " rejected, " + fmtInt(q.errors) + " errors");
    setText("latency", fmtMs(q.mean_latency_ms));
    var p99 = q.p99_latency_ms;
    setText("lat-sub", (p99 > 0 ? "p99 ≤ " + fmtMs(p99) + " · " : p99 < 0 ? "p99 over 1 s · " : "") +
      "last " + Math.round(m.rate_window_s || 0) + " s");
    var s = m.store || {};
    setText("store", (s.type || "?") + (s.up ? "" : " down"));
    $("store").className = "value" + (s.up ? "" : " rej");
    var sub = [];
    if (s.arrangement) sub.push(s.arrangement);
    if (s.breaker) sub.push("breaker " + s.breaker);
    if (s.sync_lag_ns) sub.push("sync lag " + fmtMs(s.sync_lag_ns / 1e6));
    sub.push(fmtInt(s.errors) + " errors");
    setText("store-sub", sub.join(" · "));
    setText("keys", fmtInt(s.keys));
    var ksub = [];
    if (s.keys_scope) ksub.push(s.keys_scope);
    if (s.pending) ksub.push(fmtInt(s.pending) + " counts pending sync");
    if (s.detail) ksub.push(s.detail);
    setText("keys-sub", ksub.length ? ksub.join(" · ") : "\u00a0");
    // Requests no rule applied to pass unlimited: a mistyped domain or a
    // rule on an entry no client sends shows here, in amber (a warning: they
    // were not rejected).
    setText("unmatched", fmtInt(q.unmatched));
    $("unmatched").className = "value" + (q.unmatched > 0 ? " warn" : "");
    var um = (q.unmatched_by_domain || []).map(function (u) {
      return (u.domain === "other" ? "unknown domains" : "domain " + u.domain) + ": " + fmtInt(u.count);
    }).join(" · ") || "every request matched a rule";
    setText("unmatched-sub", um);
    $("unmatched-sub").title = um;
    var rl = m.reloads || {};
    setText("reloads", fmtInt(rl.ok));
    setText("reload-sub", (rl.failed ? rl.failed + " failed · " : "") + (rl.last ? "last " + new Date(rl.last).toLocaleTimeString() : "none since start"));
    var pill = $("health");
    pill.textContent = s.up ? "store up" : "store down";
    pill.className = "pill " + (s.up ? "pill-ok" : "pill-bad");
    setText("uptime", fmtDur(m.uptime_s));
    setText("updated", new Date(m.time).toLocaleTimeString());
  }

  function renderRules(rules, stats) {
    var byName = {};
    (stats || []).forEach(function (s) { byName[s.rule] = s; });
    setText("rule-count", rules.length + (rules.length === 1 ? " rule" : " rules") +
      (rules.length ? " · domain " + rules[0].domain : ""));
    var rows = rules.map(function (r) {
      var s = byName[r.name] || {};
      var tr = el("tr");
      var name = el("td"); name.appendChild(el("strong", null, r.name));
      if (r.shadow) name.appendChild(el("span", "tag tag-shadow", "shadow"));
      if (r.block) name.appendChild(el("span", "tag tag-block", "blocks"));
      if (r.unlimited) name.appendChild(el("span", "tag tag-unl", "unlimited"));
      tr.appendChild(name);
      tr.appendChild(el("td", null, r.match));
      tr.appendChild(el("td", null, r.key));
      var lim = r.unlimited ? "∞" : r.block ? "0" : fmtInt(r.limit) + " / " + r.window;
      tr.appendChild(el("td", "num", lim));
      tr.appendChild(el("td", null, r.algorithm || "–"));
      tr.appendChild(el("td", "num", fmtNum(s.allowed_per_s || 0)));
      // Shadow rejections (not enforced) are shown in amber.
      var rej = (s.rejected_per_s || 0) + (s.shadow_rejected_per_s || 0);
      var rejCls = s.rejected_per_s > 0 ? " rej" : s.shadow_rejected_per_s > 0 ? " shadowc" : "";
      tr.appendChild(el("td", "num" + rejCls, fmtNum(rej)));
      tr.appendChild(el("td", "num", fmtInt(s.allowed)));
      var rejTotal = el("td", "num", fmtInt((s.rejected || 0) + (s.shadow_rejected || 0)));
      if (s.shadow_rejected) rejTotal.title = fmtInt(s.shadow_rejected) + " by shadow (not enforced)";
      tr.appendChild(rejTotal);
      tr.appendChild(el("td", null, r.failure || "–"));
      return tr;
    });
    replaceRows($("rules").tBodies[0], rows, 10, "no rules loaded");
  }

  function renderTop(top) {
    var max = top.length ? top[0].count : 1;
    var rows = top.map(function (k, i) {
      var tr = el("tr");
      tr.appendChild(el("td", "num", i + 1));
      tr.appendChild(el("td", "key", k.key));
      var rule = el("td", null, k.rule);
      if (k.shadow) rule.appendChild(el("span", "tag tag-shadow", "shadow"));
      tr.appendChild(rule);
      tr.appendChild(el("td", "num", fmtInt(k.count)));
      var bc = el("td"), bar = el("div", "bar" + (k.shadow ? " shadow" : ""));
      bar.style.width = Math.max(1, Math.round(100 * k.count / max)) + "%";
      bc.appendChild(bar); tr.appendChild(bc);
      return tr;
    });
    replaceRows($("top").tBodies[0], rows, 5, "no rejections yet");
  }

  function renderChart() {
    var c = $("chart"), ctx = c.getContext && c.getContext("2d");
    if (!ctx) return;
    var w = c.width, h = c.height, pad = 28;
    ctx.clearRect(0, 0, w, h);
    var max = 1;
    history.forEach(function (p) { max = Math.max(max, p.ok + p.rej); });
    var step = (w - pad - 8) / (HISTORY - 1);
    ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#687085"; ctx.strokeStyle = "#e3e6ec";
    for (var g = 0; g <= 2; g++) {
      var y = 8 + (h - 24) * g / 2;
      ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 8, y); ctx.stroke();
      ctx.fillText(fmtNum(max * (2 - g) / 2), 2, y + 4);
    }
    function area(get, color) {
      if (history.length < 2) return;
      ctx.beginPath();
      var x0 = w - 8 - (history.length - 1) * step;
      ctx.moveTo(x0, h - 16);
      history.forEach(function (p, i) { ctx.lineTo(x0 + i * step, h - 16 - (h - 24) * get(p) / max); });
      ctx.lineTo(x0 + (history.length - 1) * step, h - 16);
      ctx.closePath(); ctx.fillStyle = color; ctx.fill();
    }
    area(function (p) { return p.ok + p.rej; }, "rgba(47,158,110,.55)");
    area(function (p) { return p.rej; }, "rgba(217,83,79,.8)");
    var span = history.length > 1 ? (history[history.length - 1].t - history[0].t) / 1000 : 0;
    var label = "last " + fmtDur(span);
    setText("chart-span", label);
    ctx.fillStyle = "#687085";
    ctx.fillText(label, w - 8 - ctx.measureText(label).width, h - 3);
    document.body.setAttribute("data-history-points", String(history.length));
    document.body.setAttribute("data-history-rejected", String(history.reduce(function (a, p) { return a + p.rej; }, 0)));
  }

  function render(feed) {
    var m = feed.metrics || {};
    renderCards(m);
    renderRules(feed.rules || [], m.rules);
    renderTop(m.top_rejected || []);
    var q = m.requests || {};
    history.push({ t: Date.parse(m.time), ok: Math.max(0, (q.per_s || 0) - (q.rejected_per_s || 0)), rej: q.rejected_per_s || 0 });
    while (history.length > HISTORY) history.shift();
    renderChart();
    // The unmatched card's text is shown whole (it wraps): a layout check
    // for the browser tests.
    var sub = $("unmatched-sub");
    document.body.setAttribute("data-unmatched-cut", String(sub.scrollWidth > sub.clientWidth + 1));
    document.body.setAttribute("data-polls", String((+document.body.getAttribute("data-polls") || 0) + 1));
  }

  // loadHistory fills the chart with the server's last hour, if it keeps
  // one, before the first poll.
  function loadHistory() {
    return fetch("history.json", { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (hf) {
        var step = hf.step_s || 1;
        history = (hf.points || []).slice(-HISTORY).map(function (p) {
          return { t: p.t, ok: Math.max(0, p.n - p.rej) / step, rej: p.rej / step };
        });
      })
      .catch(function () { history = []; });
  }

  function poll() {
    fetch("status.json", { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (feed) { failures = 0; render(feed); })
      .catch(function (e) {
        failures++;
        var pill = $("health");
        pill.textContent = "feed unreachable (" + e.message + ")";
        pill.className = "pill pill-bad";
      })
      .then(function () { setTimeout(poll, failures ? Math.min(10000, POLL_MS * failures) : POLL_MS); });
  }
  loadHistory().then(poll);
})();
