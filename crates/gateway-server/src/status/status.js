// Gateway live status page logic (served at GET /ui/status.js).
// Polls /v1/gateway/status every 2 s and counts retry deadlines down locally every 250 ms.
// All JSON data is inserted with textContent / setAttribute only (never innerHTML).
"use strict";
(function () {
  var STATUS_URL = "/v1/gateway/status";
  var POLL_MS = 2000, TICK_MS = 250, FETCH_TIMEOUT_MS = 10000;
  var DASH = "\u2014";
  var lastData = null;
  var receivedAt = 0; // performance.now() when lastData arrived
  var lastOkWall = 0; // Date.now() when lastData arrived

  function $(id) { return document.getElementById(id); }

  // el("td", "num", "text") or el("td", {className: "num", title: "x"}, [child, "text"])
  function el(tag, attrs, content) {
    var node = document.createElement(tag);
    if (typeof attrs === "string") node.className = attrs;
    else if (attrs) Object.keys(attrs).forEach(function (k) {
      if (k === "className") node.className = attrs[k];
      else if (k === "hidden") node.hidden = attrs[k];
      else node.setAttribute(k, String(attrs[k]));
    });
    if (content !== undefined && content !== null) {
      (Array.isArray(content) ? content : [content]).forEach(function (c) {
        if (c === null || c === undefined) return;
        node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
      });
    }
    return node;
  }

  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function fmtNum(v) { return !isNum(v) ? DASH : (Number.isInteger(v) ? String(v) : v.toFixed(1)); }
  function fmt1(v) { return isNum(v) ? v.toFixed(1) : DASH; }
  function fmtTime(ms) { return isNum(ms) ? new Date(ms).toLocaleTimeString() : DASH; }
  function fmtDateTime(ms) { return isNum(ms) ? new Date(ms).toLocaleString() : DASH; }
  function safeClass(s) { return String(s).replace(/[^A-Za-z0-9_-]/g, "_"); }
  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  function bar(fraction, extraClass) {
    var f = isNum(fraction) ? Math.max(0, Math.min(1, fraction)) : 0;
    var fill = el("span");
    fill.style.width = (f * 100).toFixed(1) + "%";
    return el("span", "bar" + (extraClass ? " " + extraClass : ""), fill);
  }

  function table(scopeName, kind, headers, rows) {
    var thead = el("thead", null, el("tr", null, headers.map(function (h) {
      return el("th", h.num ? { className: "num", scope: "col" } : { scope: "col" }, h.label);
    })));
    var tbody = el("tbody", null, rows);
    return el("div", { className: "table-wrap", "data-key": scopeName + "/" + kind },
      el("table", kind + "-table", [thead, tbody]));
  }

  function tenantCell(t) {
    return t === null || t === undefined ? el("td", "tenant shared", "shared") : el("td", "tenant", t);
  }

  function retryRemaining(src) {
    if (src.state !== "OPEN" || !isNum(src.retry_after_s) || src.retry_after_s <= 0) return 0;
    return Math.max(0, src.retry_after_s - (performance.now() - receivedAt) / 1000);
  }
  function retryText(src) {
    var r = retryRemaining(src);
    return r > 0 ? r.toFixed(1) + " s" : DASH;
  }

  function sourcesTable(scope) {
    var rows = (scope.sources || []).map(function (s) {
      var retry = el("td", "num retry", retryText(s));
      retry._src = s; // read by tick()
      var h = isNum(s.health) ? s.health : null;
      var hClass = "health-bar" + (h === null ? "" : h < 0.34 ? " low" : h < 0.67 ? " mid" : "");
      return el("tr", { className: "source-row", "data-source": s.source == null ? "" : s.source, "data-state": s.state }, [
        el("td", "source", s.source),
        el("td", "state", el("span", "badge state-" + safeClass(s.state), s.state)),
        retry,
        tenantCell(s.tenant),
        el("td", "health", [bar(h, hClass), h === null ? DASH : Math.round(h * 100) + "%"]),
        el("td", "account", s.account === null || s.account === undefined ? DASH : s.account),
        el("td", "num aimd-limit", fmt1(s.aimd_limit)),
        el("td", "num streak", fmtNum(s.streak)),
        el("td", "num epoch", fmtNum(s.epoch)),
        el("td", "num inflight", fmtNum(s.inflight))
      ]);
    });
    if (!rows.length) return el("p", "empty", "no sources");
    return table(scope.scope, "sources", [
      { label: "source" }, { label: "state" }, { label: "retry in", num: true }, { label: "tenant" },
      { label: "health" }, { label: "account" }, { label: "AIMD limit", num: true },
      { label: "reopen streak", num: true }, { label: "epoch", num: true }, { label: "in flight", num: true }
    ], rows);
  }

  function accountsTable(scope) {
    var rows = (scope.accounts || []).map(function (a) {
      var rl = a.rate_limited || {};
      var frac = isNum(a.limit) && isNum(a.ceiling) && a.ceiling > 0 ? a.limit / a.ceiling : 0;
      return el("tr", { className: "account-row", "data-account": a.account == null ? "" : a.account }, [
        el("td", "account", a.account === null || a.account === undefined ? DASH : a.account),
        el("td", "limit-bar", [bar(frac), fmt1(a.limit) + " / " + fmtNum(a.ceiling)]),
        el("td", "num learned-ceiling", fmtNum(a.learned_ceiling)),
        el("td", "num inflight", fmtNum(a.inflight)),
        el("td", "num rl-background", fmtNum(rl.background)),
        el("td", "num rl-own", fmtNum(rl.own))
      ]);
    });
    if (!rows.length) return el("p", "empty", "no paced accounts");
    return table(scope.scope, "accounts", [
      { label: "account" }, { label: "learned limit / ceiling" },
      { label: "learned ceiling", num: true }, { label: "in flight", num: true },
      { label: "429s background", num: true }, { label: "429s own", num: true }
    ], rows);
  }

  function tenantsTable(scope) {
    var rows = (scope.tenants || []).map(function (t) {
      return el("tr", { className: "tenant-row" }, [
        tenantCell(t.tenant), el("td", "num weight", fmtNum(t.weight)), el("td", "num waiting", fmtNum(t.waiting))
      ]);
    });
    return table(scope.scope, "tenants", [
      { label: "tenant" }, { label: "weight", num: true }, { label: "waiting", num: true }
    ], rows);
  }

  function recentChart(scope) {
    var recent = scope.recent || {};
    var classes = recent.classes || [];
    var buckets = recent.buckets || [];
    var seconds = Math.max(isNum(recent.seconds) ? recent.seconds : 60, buckets.length);
    var totals = classes.map(function () { return 0; });
    var max = 0;
    buckets.forEach(function (b) {
      var sum = 0;
      classes.forEach(function (_, i) { var n = isNum(b[i]) ? b[i] : 0; totals[i] += n; sum += n; });
      if (sum > max) max = sum;
    });
    var chart = el("div", { className: "chart", role: "img",
      "aria-label": "attempt outcomes per second over the last " + seconds + " s" });
    for (var pad = seconds - buckets.length; pad > 0; pad--) chart.appendChild(el("div", "chart-col"));
    buckets.forEach(function (b, idx) {
      var col = el("div", "chart-col");
      var parts = [];
      classes.forEach(function (c, i) {
        var n = isNum(b[i]) ? b[i] : 0;
        if (n <= 0 || max <= 0) return;
        var seg = el("div", "chart-seg cls-" + safeClass(c));
        seg.style.height = (n / max * 100).toFixed(2) + "%";
        col.appendChild(seg);
        parts.push(n + " " + c);
      });
      col.title = (buckets.length - idx) + " s ago: " + (parts.join(", ") || "no attempts");
      chart.appendChild(col);
    });
    var legend = el("ul", "legend", classes.map(function (c) {
      return el("li", null, [el("span", "swatch cls-" + safeClass(c)), c]);
    }));
    var summaryParts = [];
    classes.forEach(function (c, i) { if (totals[i] > 0) summaryParts.push(totals[i] + " " + c); });
    var summary = el("p", "recent-summary",
      "last " + seconds + " s: " + (summaryParts.length ? summaryParts.join(", ") : "no attempts"));
    return el("div", "recent", [chart, legend, summary]);
  }

  function renderScope(scope) {
    var section = el("section", { className: "scope", "data-scope": scope.scope });
    section.appendChild(el("div", "scope-head", [
      el("h2", "scope-name", scope.scope),
      el("span", "waiting", fmtNum(scope.waiting) + " waiting")
    ]));
    section.appendChild(el("h3", null, "Sources"));
    section.appendChild(sourcesTable(scope));
    section.appendChild(el("h3", null, "Accounts"));
    section.appendChild(accountsTable(scope));
    if (scope.tenants && scope.tenants.length) {
      section.appendChild(el("h3", null, "Tenants"));
      section.appendChild(tenantsTable(scope));
    }
    section.appendChild(el("h3", null, "Last minute"));
    section.appendChild(recentChart(scope));
    return section;
  }

  function render(data) {
    var cfg = data.config || {};
    $("config-line").textContent = "config loaded " + fmtDateTime(cfg.loaded_at_ms) + ", " +
      plural(isNum(cfg.reloads) ? cfg.reloads : 0, "reload");
    var refused = $("config-refused");
    if (cfg.last_refused) {
      refused.textContent = "last reload refused: " + cfg.last_refused.reason +
        " (at " + fmtDateTime(cfg.last_refused.at_ms) + ")";
      refused.hidden = false;
    } else {
      refused.textContent = "";
      refused.hidden = true;
    }
    var main = $("scopes");
    var scroll = {}; // keep each table's horizontal scroll across re-renders
    Array.prototype.forEach.call(main.querySelectorAll(".table-wrap[data-key]"), function (w) {
      scroll[w.getAttribute("data-key")] = w.scrollLeft;
    });
    while (main.firstChild) main.removeChild(main.firstChild);
    var scopes = data.scopes || [];
    if (!scopes.length) main.appendChild(el("p", "empty", "no scopes configured"));
    scopes.forEach(function (s) { main.appendChild(renderScope(s)); });
    Array.prototype.forEach.call(main.querySelectorAll(".table-wrap[data-key]"), function (w) {
      var k = w.getAttribute("data-key");
      if (scroll[k]) w.scrollLeft = scroll[k];
    });
  }

  function showBanner(msg) { var b = $("banner"); b.textContent = msg; b.hidden = false; }
  function hideBanner() { var b = $("banner"); b.textContent = ""; b.hidden = true; }

  function tick() {
    if (!lastData) return;
    Array.prototype.forEach.call(document.querySelectorAll("#scopes td.retry"), function (td) {
      if (td._src) td.textContent = retryText(td._src);
    });
    var upd = $("updated");
    var age = Math.floor((Date.now() - lastOkWall) / 1000);
    upd.textContent = fmtTime(lastData.now_ms) + (age >= 1 ? " (" + age + " s ago)" : "");
  }

  async function poll() {
    var ctrl = typeof AbortController === "function" ? new AbortController() : null;
    var timer = ctrl ? setTimeout(function () { ctrl.abort(); }, FETCH_TIMEOUT_MS) : null;
    try {
      var resp = await fetch(STATUS_URL, {
        credentials: "same-origin", cache: "no-store",
        headers: { Accept: "application/json" }, signal: ctrl ? ctrl.signal : undefined
      });
      if (resp.status === 401) {
        showBanner("status unavailable: HTTP 401 \u2014 this page needs the admin or metrics key");
      } else if (!resp.ok) {
        showBanner("status unavailable: HTTP " + resp.status + (resp.statusText ? " " + resp.statusText : ""));
      } else {
        var data = await resp.json();
        lastData = data;
        receivedAt = performance.now();
        lastOkWall = Date.now();
        $("updated").setAttribute("datetime", new Date(isNum(data.now_ms) ? data.now_ms : lastOkWall).toISOString());
        render(data);
        hideBanner();
        tick();
      }
    } catch (err) {
      var msg = err && err.name === "AbortError" ? "request timed out" : (err && err.message) || String(err);
      showBanner("status unavailable: " + msg);
    } finally {
      if (timer) clearTimeout(timer);
      setTimeout(poll, POLL_MS);
    }
  }

  function start() {
    setInterval(tick, TICK_MS);
    poll();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
