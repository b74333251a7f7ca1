// The ledger page: /api/v1/ledger drawn as SVG charts and tables. Plain JavaScript, no library;
// everything from the API goes on the page as text, never as HTML.
"use strict";

(() => {
  const API = document.body.dataset.api || "/api/v1";
  const main = document.getElementById("ledger");
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = {confirmed: "#c0392b", recurred: "#8e44ad", overturned: "#f39c12",
                  open: "#7f8c8d", measured: "#2c7be5", estimated: "#9fc3f5",
                  saved: "#27ae60", spent: "#c0392b", balance: "#2c3e50"};

  function el(tag, attrs, ...kids) {
    const svg = tag.startsWith("svg:");
    const node = svg ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
    for (const c of kids.flat()) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const n = (v, d = 2) => (v === null || v === undefined ? "-" : Number(v).toFixed(d));
  const range = (p) => `${n(p[0], 1)} to ${n(p[1], 1)}`;

  // Horizontal bars: rows [{label, parts: [{value, color, name}]}].
  function bars(id, title, rows, unit) {
    const width = 640, rowH = 22, left = 200, top = 24;
    const max = Math.max(1e-9, ...rows.map((r) => r.parts.reduce((s, p) => s + p.value, 0)));
    const svg = el("svg:svg", {id, class: "chart", width, height: top + rows.length * rowH + 8,
                               role: "img", "aria-label": title});
    svg.append(el("svg:text", {x: 0, y: 14, "font-weight": "bold", text: title}));
    rows.forEach((r, i) => {
      const y = top + i * rowH;
      svg.append(el("svg:text", {x: 0, y: y + 14, "font-size": 12, text: r.label}));
      let x = left;
      for (const p of r.parts) {
        const w = (p.value / max) * (width - left - 90);
        const rect = el("svg:rect", {x, y: y + 3, width: Math.max(0, w), height: rowH - 6,
                                     fill: p.color, "data-name": p.name, "data-value": p.value});
        rect.append(el("svg:title", {text: `${p.name}: ${n(p.value, 3)} ${unit}`}));
        svg.append(rect);
        x += w;
      }
      const total = r.parts.reduce((s, p) => s + p.value, 0);
      svg.append(el("svg:text", {x: x + 4, y: y + 14, "font-size": 12,
                                 text: `${n(total, 3)} ${unit}`}));
    });
    return svg;
  }

  // Ranges on one axis: [{label, low, high, color}].
  function ranges(id, title, rows, unit) {
    const width = 640, rowH = 26, left = 120, top = 24;
    const lo = Math.min(0, ...rows.map((r) => r.low));
    const hi = Math.max(1e-9, ...rows.map((r) => r.high));
    const xs = (v) => left + ((v - lo) / (hi - lo)) * (width - left - 20);
    const svg = el("svg:svg", {id, class: "chart", width, height: top + rows.length * rowH + 10,
                               role: "img", "aria-label": title});
    svg.append(el("svg:text", {x: 0, y: 14, "font-weight": "bold", text: title}));
    svg.append(el("svg:line", {x1: xs(0), x2: xs(0), y1: top, y2: top + rows.length * rowH,
                               stroke: "#999"}));
    rows.forEach((r, i) => {
      const y = top + i * rowH;
      svg.append(el("svg:text", {x: 0, y: y + 16, "font-size": 12, text: r.label}));
      const rect = el("svg:rect", {x: xs(r.low), y: y + 5, width: Math.max(2, xs(r.high) - xs(r.low)),
                                   height: rowH - 10, fill: r.color, "data-name": r.label,
                                   "data-low": r.low, "data-high": r.high});
      rect.append(el("svg:title", {text: `${r.label}: ${range([r.low, r.high])} ${unit}`}));
      svg.append(rect);
    });
    return svg;
  }

  function table(head, rows) {
    return el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {text: h})))),
              el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {text: c}))))));
  }

  function render(doc) {
    const c = doc.cost, f = doc.caught, v = doc.value, a = doc.advice;
    const spent = c.in_checks_gpu_hours;
    const held = c.held_out.by_failed_checks_node_hours + c.held_out.by_recovery_node_hours;
    const o = f.outcomes;
    const kids = [
      el("h2", {text: `Ledger: ${doc.window.days} days, ${doc.nodes} nodes, ${doc.gpus} GPUs`}),
      el("p", {id: "ledger-cost", text: `Cost: ${n(spent.measured, 3)} GPU-hours in checks ` +
        `measured (+${n(spent.estimated, 3)} estimated); ${n(held, 3)} node-hours held out.`}),
      el("p", {id: "ledger-caught", text: `Caught: ${f.failures} failures: ${o.confirmed} ` +
        `confirmed, ${o.recurred} recurred, ${o.overturned} overturned, ${o.open} open.`}),
      el("p", {id: "ledger-balance", text: `Balance: ${range(v.balance_gpu_hours_per_month)} ` +
        "GPU-hours per month (a range from the model's inputs, below)."}),
      el("p", {class: "muted", text: `jobs: ${doc.sources.jobs}; recovery: ${doc.sources.recovery}`}),
      bars("chart-cost", "GPU-hours in checks, by stage and level", c.in_checks.map((r) => ({
        label: `${r.stage} ${r.level}`,
        parts: [{value: r.gpu_hours, color: r.estimated ? COLORS.estimated : COLORS.measured,
                 name: r.estimated ? "estimated" : "measured"}]})), "GPU-h"),
      bars("chart-caught", "Failures by check and outcome", Object.entries(f.by_check).map(
        ([check, row]) => ({label: check, parts: ["confirmed", "recurred", "overturned", "open"]
          .map((k) => ({value: row[k], color: COLORS[k], name: k}))})), "failures"),
      ranges("chart-balance", "GPU-hours per month (low to high)", [
        {label: "saved", low: v.saved_gpu_hours_per_month[0],
         high: v.saved_gpu_hours_per_month[1], color: COLORS.saved},
        {label: "spent", low: v.spent_gpu_hours_per_month[0],
         high: v.spent_gpu_hours_per_month[1], color: COLORS.spent},
        {label: "balance", low: v.balance_gpu_hours_per_month[0],
         high: v.balance_gpu_hours_per_month[1], color: COLORS.balance}], "GPU-h"),
      el("h3", {text: "Boot to service"}),
      table(["part", "median", "p95", "n"], ["before_suite", "isolation_wait", "checks",
        "group_tests", "total_recorded"].map((p) => [p, `${n(c.boot_to_service[p].median, 1)} s`,
        `${n(c.boot_to_service[p].p95, 1)} s`, c.boot_to_service[p].n])),
      el("p", {class: "muted", text: `Slurm latency: ${c.boot_to_service.slurm_latency_note}`}),
      el("h3", {text: "False-positive estimate per check"}),
      table(["check", "overturned", "resolved", "estimate", "95% interval"],
        Object.entries(f.false_positive).map(([check, r]) => [check, r.overturned, r.resolved,
          r.estimate === null ? "-" : `${n(r.estimate * 100, 0)}%`,
          `${n(r.low * 100, 0)}-${n(r.high * 100, 0)}%`])),
      el("h3", {text: "The model's inputs"}),
      table(["input", "low", "high", "source"], Object.entries(v.inputs).map(
        ([k, i]) => [k, i.low, i.high, i.source])),
      el("p", {class: "muted", text: `Public rates predict ${n(v.expected.catchable_per_month)} ` +
        `catchable interruptions per month on ${v.expected.fleet_gpus} GPUs (${v.expected.source}).`}),
      el("h3", {text: "Advice"}),
      el("p", {id: "ledger-advice", text: `${a.advice || "none"}: ${a.why}`}),
      el("p", {text: `What would change it: ${a.would_change}`}),
    ];
    main.replaceChildren(...kids);
  }

  async function load() {
    const since = document.getElementById("since").value;
    const banner = document.getElementById("banner");
    const token = sessionStorage.getItem("airlock.token") || "";
    const headers = token ? {Authorization: `Bearer ${token}`} : {};
    try {
      const res = await fetch(`${API}/ledger?since=${encodeURIComponent(since)}`, {headers});
      const data = await res.json().catch(() => null);
      if (!res.ok) {
        throw new Error(res.status === 401 ? "a token is needed: enter it on the console's " +
          "first page, then come back" : (data && data.error) || `HTTP ${res.status}`);
      }
      banner.hidden = true;
      render(data);
    } catch (e) {
      banner.hidden = false;
      banner.textContent = `ledger: ${e.message}`;
      main.replaceChildren(el("p", {class: "muted", text: "No ledger."}));
    }
  }
  document.getElementById("since").addEventListener("change", load);
  load();
})();
