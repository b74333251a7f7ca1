// Airlock console: one page over the JSON API (/api/v1). Plain JavaScript (ES2020), no build
// step, no library, no CDN. Everything from the API is put on the page as text (textContent,
// attributes), never as HTML: node reasons are whatever an admin or Slurm typed.
"use strict";

(() => {
  const body = document.body;
  const API = body.dataset.api || "/api/v1";
  const REFRESH_MS = Math.max(1, parseFloat(body.dataset.refresh) || 10) * 1000;
  const TOKEN_REQUIRED = body.dataset.tokenRequired === "yes";
  const CHECKS_ENABLED = body.dataset.checksEnabled === "yes";
  const view = document.getElementById("view");

  const LABEL = {
    healthy: "healthy", pending: "pending", checking: "checking", failed: "failed",
    error: "own error / needs operator", recovering: "recovering", adopted: "adopted",
    "not-seen": "not seen", "drained-other": "drained by other", down: "down", future: "future", unknown: "unknown",
  };
  const CONDITIONS = Object.keys(LABEL);
  const STATUS_LABEL = {pass: "pass", fail: "fail", skipped: "skipped",
                        inconclusive: "not seen (inconclusive)", error: "not seen (error)"};

  const state = {
    token: sessionStorage.getItem("airlock.token") || "",
    checkToken: sessionStorage.getItem("airlock.checkToken") || "",
    nodes: null, loadedAt: 0, timer: null, route: "", current: null,
    lastOk: 0, retryDelay: 0, retryTimer: null,
    // bad nodes first by default (CONDITION_RANK), by name within a condition
    table: {q: "", condition: "", partition: "", feature: "", sort: "condition", dir: 1, page: 0,
            size: 100},
  };

  // --- small helpers ---------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = tag.startsWith("svg:")
      ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = String(v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  // replaceChildren() would print a null as "null": the views pass optional parts as null.
  const present = (kids) => kids.flat(Infinity).filter((k) => k !== null && k !== undefined &&
                                                             k !== false);
  const show = (...kids) => view.replaceChildren(...present(kids));
  const pad = (n) => String(n).padStart(2, "0");
  function when(ts) {
    if (ts === null || ts === undefined) return "";
    const d = new Date(ts * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  function ago(ts) {
    if (!ts) return "";
    const s = Math.max(0, Date.now() / 1000 - ts);
    if (s < 90) return `${Math.round(s)} s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    if (s < 172800) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }
  function fmt(v) {
    if (v === null || v === undefined || !Number.isFinite(v)) return "";
    const a = Math.abs(v);
    if (Number.isInteger(v)) return String(v);
    return a >= 100 ? v.toFixed(0) : a >= 1 ? v.toFixed(2) : String(Number(v.toPrecision(3)));
  }
  const took = (s) => (s === null || s === undefined ? "" : `${Number(s).toFixed(1)} s`);
  const badge = (cls, text) => el("span", {class: `badge ${cls}`, text});
  const condBadge = (c) => badge(`c-${c}`, LABEL[c] || c);
  const verdictBadge = (v) => badge(`v-${v || "none"}`, v ? v.toUpperCase() : "none");
  // A reason explains the node only while it is out of service: Slurm 23.11+ without an
  // accounting plugin keeps the old reason on a node it resumed (airlock.slurm.reason_in_force).
  const inForce = (n) => /(^|\+)(DRAIN|DRAINED|DRAINING|FAIL)(\+|$)|^DOWN/.test(n.slurm_state);
  const reasonText = (n) => !n.reason ? "" : inForce(n) ? n.reason
    : `${n.reason} (kept by Slurm after a resume; not in force)`;
  const nodeLink = (name) => el("a", {href: `#/node/${encodeURIComponent(name)}`, text: name});
  function banner(message, cls) {
    const b = document.getElementById("banner");
    b.hidden = !message;
    b.className = `banner ${cls || ""}`;
    b.textContent = message || "";
  }

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path, options) {
    const opts = Object.assign({headers: {}}, options || {});
    const token = opts.token !== undefined ? opts.token : state.token;
    if (token) opts.headers.Authorization = `Bearer ${token}`;
    const res = await fetch(API + path, opts);
    let data = null;
    const text = await res.text();
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (res.status === 401 && opts.token === undefined) {
      askToken();
      throw new ApiError(401, (data && data.error) || "a token is needed");
    }
    if (!res.ok) throw new ApiError(res.status, (data && data.error) || `HTTP ${res.status}`);
    return {data, res};
  }

  function askToken() {
    const dlg = document.getElementById("login");
    if (!dlg.open) dlg.showModal();
  }
  document.getElementById("login-form").addEventListener("submit", () => {
    state.token = document.getElementById("login-token").value.trim();
    sessionStorage.setItem("airlock.token", state.token);
    route(true);
  });

  // --- the header: counts per condition, "updated" ------------------------------------------
  function renderSummary(doc) {
    const box = document.getElementById("summary");
    box.replaceChildren();
    for (const c of CONDITIONS) {
      const n = (doc.conditions || {})[c] || 0;
      if (!n && !["healthy", "failed", "error", "pending", "not-seen"].includes(c)) continue;
      const b = condBadge(c);
      b.textContent = `${n} ${LABEL[c]}`;
      b.title = `show the ${LABEL[c]} nodes`;
      b.addEventListener("click", () => {
        state.table.condition = c; state.table.page = 0; location.hash = "#/";
        route(true);
      });
      box.append(b);
    }
  }
  function updated() {
    const u = document.getElementById("updated");
    u.textContent = state.loadedAt ? `updated ${ago(state.loadedAt)}` : "";
  }
  setInterval(updated, 1000);

  async function loadNodes() {
    const {data, res} = await api("/nodes");
    state.nodes = data;
    state.loadedAt = data.generated_at;
    const err = res.headers.get("x-airlock-status-error");
    banner(err ? `Last refresh failed, showing the previous one: ${err}` : "", "stale");
    renderSummary(data);
    updated();
    return data;
  }

  // --- the node table ------------------------------------------------------------------------
  const COLUMNS = [
    {key: "node", label: "node"},
    {key: "slurm_state", label: "Slurm state"},
    {key: "condition", label: "condition"},
    {key: "failed_check", label: "check"},
    {key: "reason", label: "reason (Slurm)"},
    {key: "last_check_at", label: "last check"},
    {key: "recovery", label: "recovery"},
    {key: "partitions", label: "partitions"},
  ];
  const CONDITION_RANK = Object.fromEntries(
    ["error", "failed", "not-seen", "recovering", "checking", "pending", "drained-other", "down",
     "unknown", "adopted", "future", "healthy"].map((c, i) => [c, i]));
  const natural = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});

  function sortValue(row, key) {
    if (key === "condition") return CONDITION_RANK[row.condition] ?? 99;
    if (key === "partitions") return (row.partitions || []).join(",");
    const v = row[key];
    return v === null || v === undefined ? "" : v;
  }

  function filtered(rows) {
    const t = state.table;
    const q = t.q.trim().toLowerCase();
    return rows.filter((r) =>
      (!t.condition || r.condition === t.condition) &&
      (!t.partition || (r.partitions || []).includes(t.partition)) &&
      (!t.feature || (r.features || []).includes(t.feature)) &&
      (!q || r.node.toLowerCase().includes(q) || (r.reason || "").toLowerCase().includes(q) ||
       (r.failed_check || "").toLowerCase().includes(q) ||
       (r.message || "").toLowerCase().includes(q)));
  }

  function sorted(rows) {
    const {sort, dir} = state.table;
    return rows.slice().sort((a, b) => {
      const x = sortValue(a, sort), y = sortValue(b, sort);
      const c = typeof x === "number" && typeof y === "number" ? x - y
        : natural.compare(String(x), String(y));
      return c !== 0 ? c * dir : natural.compare(a.node, b.node);
    });
  }

  function nodesView() {
    const t = state.table;
    const search = el("input", {type: "search", placeholder: "filter: node, reason, check…",
                                "aria-label": "filter", value: t.q});
    const cond = el("select", {"aria-label": "condition"});
    const part = el("select", {"aria-label": "partition"});
    const feat = el("select", {"aria-label": "feature"});
    const size = el("select", {"aria-label": "rows per page"},
      [50, 100, 500, 1000].map((n) => el("option", {value: n, text: `${n} per page`,
                                                     selected: n === t.size})));
    const table = el("table", {id: "nodes"});
    const pager = el("div", {class: "pager"});
    show(
      el("div", {class: "controls"}, search, cond, part, feat, size),
      table, pager);

    const changed = () => { t.page = 0; draw(); };
    search.addEventListener("input", () => { t.q = search.value; changed(); });
    cond.addEventListener("change", () => { t.condition = cond.value; changed(); });
    part.addEventListener("change", () => { t.partition = part.value; changed(); });
    feat.addEventListener("change", () => { t.feature = feat.value; changed(); });
    size.addEventListener("change", () => { t.size = Number(size.value); changed(); });

    function options(select, label, values, current) {
      select.replaceChildren(el("option", {value: "", text: `all ${label}`}),
        ...values.map((v) => el("option", {value: v.value, text: v.text,
                                           selected: v.value === current})));
    }

    let cache = {key: "", rows: []};
    function draw() {
      const doc = state.nodes;
      if (!doc) return;
      const rows = doc.nodes;
      const counts = doc.conditions || {};
      options(cond, "conditions", CONDITIONS.filter((c) => counts[c])
        .map((c) => ({value: c, text: `${LABEL[c]} (${counts[c]})`})), t.condition);
      const parts = [...new Set(rows.flatMap((r) => r.partitions || []))].sort();
      const feats = [...new Set(rows.flatMap((r) => r.features || []))].sort();
      options(part, "partitions", parts.map((p) => ({value: p, text: p})), t.partition);
      options(feat, "features", feats.map((f) => ({value: f, text: f})), t.feature);

      // Filtering and sorting 10,000 rows is the expensive part: a page turn reuses them.
      const key = JSON.stringify([doc.generated_at, t.q, t.condition, t.partition, t.feature,
                                  t.sort, t.dir]);
      if (cache.key !== key) cache = {key, rows: sorted(filtered(rows))};
      const shown = cache.rows;
      const pages = Math.max(1, Math.ceil(shown.length / t.size));
      t.page = Math.min(t.page, pages - 1);
      const slice = shown.slice(t.page * t.size, (t.page + 1) * t.size);

      const head = el("tr", {}, COLUMNS.map((c) => el("th", {
        scope: "col",
        "aria-sort": t.sort === c.key ? (t.dir > 0 ? "ascending" : "descending") : null,
      }, el("button", {type: "button", text: c.label, onclick: () => {
        t.dir = t.sort === c.key ? -t.dir : 1; t.sort = c.key; draw();
      }}))));
      const frag = document.createDocumentFragment();
      for (const r of slice) {
        const tr = el("tr", {"data-node": r.node, "data-condition": r.condition},
          el("td", {}, nodeLink(r.node)),
          el("td", {class: "mono", text: r.slurm_state}),
          el("td", {}, condBadge(r.condition)),
          el("td", {text: r.failed_check || ""}),
          r.reason && !inForce(r)
            ? el("td", {class: "reason stale", text: r.reason,
                        title: "kept by Slurm after a resume; not in force"})
            : el("td", {class: "reason", title: r.message || "", text: r.reason || ""}),
          el("td", {title: when(r.last_check_at)},
             r.last_check_at ? `${ago(r.last_check_at)} (${r.last_level || ""} ` +
               `${(r.verdict || "").toUpperCase()})` : ""),
          el("td", {text: r.recovery || ""}),
          el("td", {text: (r.partitions || []).join(", ")}));
        frag.append(tr);
      }
      const tbody = el("tbody");
      tbody.append(frag);
      table.replaceChildren(el("thead", {}, head), tbody);
      pager.replaceChildren(
        el("button", {type: "button", text: "‹ previous", disabled: t.page === 0,
                      onclick: () => { t.page -= 1; draw(); }}),
        el("span", {id: "page-info",
                    text: `page ${t.page + 1} of ${pages} · ${shown.length} of ` +
                          `${rows.length} nodes`}),
        el("button", {type: "button", text: "next ›", disabled: t.page >= pages - 1,
                      onclick: () => { t.page += 1; draw(); }}));
    }

    draw();
    return {refresh: async () => { await loadNodes(); draw(); }};
  }

  // --- one node ----------------------------------------------------------------------------
  function keyFigures(figs) {
    if (!figs) return "";
    const out = [];
    for (const k of ["min_tflops", "busbw_gbps", "found", "expected", "floor"]) {
      if (figs[k] !== undefined && figs[k] !== "" && typeof figs[k] !== "object") {
        out.push(`${k} ${typeof figs[k] === "number" ? fmt(figs[k]) : figs[k]}`);
      }
    }
    if (figs.median_tflops && typeof figs.median_tflops === "object") {
      out.push("median TFLOPS " + Object.entries(figs.median_tflops)
        .map(([d, v]) => `${d} ${fmt(Number(v))}`).join(", "));
    }
    return out.join(" · ");
  }

  function checksTable(checks) {
    return el("table", {class: "checks"},
      el("thead", {}, el("tr", {}, ["check", "verdict", "detail", "figures", "took"]
        .map((h) => el("th", {scope: "col", text: h})))),
      el("tbody", {}, (checks || []).map((c) => el("tr", {},
        el("td", {text: c.check}), el("td", {}, verdictBadge(c.verdict)),
        el("td", {text: c.detail || ""}),
        el("td", {class: "figures", text: keyFigures(c.figures)}),
        el("td", {class: "num", text: took(c.duration_s)})))));
  }

  function timelineItem(e) {
    const li = el("li", {class: `k-${e.kind}` + (e.verdict ? ` tv-${e.verdict}` : ""),
                         "data-kind": e.kind},
      el("span", {class: "when", text: when(e.at)}),
      el("span", {class: "kind", text: e.kind}),
      e.verdict ? verdictBadge(e.verdict) : null, " ",
      el("span", {class: "summary", text: e.summary}));
    if (e.checks && e.checks.length) {
      const d = el("details", {}, el("summary", {
        text: `${e.checks.length} check${e.checks.length === 1 ? "" : "s"}`}),
                   checksTable(e.checks));
      if (e.run_id) d.append(el("p", {}, el("a", {href: `#/run/${encodeURIComponent(e.run_id)}`,
                                                   text: `run ${e.run_id}`})));
      li.append(d);
    }
    return li;
  }

  function nodeView(name, before) {
    let last = "";
    async function refresh() {
      const q = `?runs=20${before ? `&before=${encodeURIComponent(before)}` : ""}`;
      const {data} = await api(`/nodes/${encodeURIComponent(name)}${q}`);
      const sig = JSON.stringify(Object.assign({}, data, {generated_at: 0}));
      if (sig === last) return;
      last = sig;
      const n = data.node;
      const facts = [
        ["Slurm state", n.slurm_state],
        ["reason", reasonText(n) + (n.reason && n.reason_owner !== "airlock"
          ? " (not Airlock's)" : "")],
        ["partitions", (n.partitions || []).join(", ")],
        ["features", (n.features || []).join(", ")],
        ["profile", n.profile || ""],
        ["last run", n.last_check_at ? `${(n.verdict || "").toUpperCase()} ${n.last_level} ` +
          `(${n.last_trigger}) at ${when(n.last_check_at)}, took ${took(n.duration_s)}` : ""],
        ["recovery", n.recovery],
        ["stuck", n.stuck],
        ["own errors", Object.entries(n.errors || {}).map(([h, m]) => `${h}: ${m}`).join("; ")],
        ["results", n.results_problem ? `${n.results_source}: ${n.results_problem}`
          : n.results_source],
      ].filter(([, v]) => v);
      // Slurm away: the page comes from disk and the database; Slurm's fields are old
      const stale = data.slurm_stale
        ? el("p", {class: "banner stale", id: "slurm-stale",
                   text: `Slurm did not answer: its fields above are from the last read, ` +
                         `${Math.round(data.slurm_stale.age_s)} s old (${data.slurm_stale.error})`})
        : null;
      const older = data.next_before
        ? el("a", {href: `#/node/${encodeURIComponent(name)}/${encodeURIComponent(
          data.next_before)}`, text: "older runs ›"}) : null;
      const newer = before ? el("a", {href: `#/node/${encodeURIComponent(name)}`,
                                      text: "‹ newest"}) : null;
      show(
        el("p", {}, el("a", {href: "#/", text: "‹ all nodes"})),
        el("h1", {}, `${n.node} `, condBadge(n.condition)),
        n.message ? el("p", {class: "message", text: n.message}) : null,
        el("div", {class: "panel"}, el("dl", {class: "facts"},
          facts.map(([k, v]) => [el("dt", {text: k}), el("dd", {text: v})]))),
        stale,
        el("h2", {text: "Timeline (oldest first)"}),
        el("div", {class: "panel"},
          data.timeline.length
            ? el("ol", {class: "timeline", id: "timeline"}, data.timeline.map(timelineItem))
            : el("p", {class: "muted", text: "nothing recorded yet"}),
          el("div", {class: "pager"}, newer,
             el("span", {class: "muted", text: `${data.runs.length} of ${data.runs_total} ` +
                                               "recorded runs on this page"}), older)));
    }
    return {refresh};
  }

  function runView(runId) {
    async function refresh() {
      const {data} = await api(`/runs/${encodeURIComponent(runId)}`);
      show(
        el("p", {}, el("a", {href: `#/node/${encodeURIComponent(data.node)}`,
                             text: `‹ ${data.node}`})),
        el("h1", {}, `Run ${data.run_id} `, verdictBadge(data.verdict)),
        el("p", {text: `${data.level} (${data.trigger}), ${when(data.started_at)} – ` +
                       `${when(data.finished_at)}, took ${took(data.duration_s)}` +
                       (data.profile ? `, profile ${data.profile}` : "")}),
        data.detail ? el("p", {class: "message", text: data.detail}) : null,
        checksTable(data.checks),
        el("details", {}, el("summary", {text: "the whole document (JSON)"}),
           el("pre", {text: JSON.stringify(data, null, 1)})));
    }
    return {refresh, once: true};
  }

  // --- recovery ------------------------------------------------------------------------------
  function simpleTable(headers, rows, id) {
    return el("table", {id},
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", {scope: "col", text: h})))),
      el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) =>
        el("td", {}, c instanceof Node ? c : String(c ?? "")))))));
  }

  function recoveryView() {
    async function refresh() {
      const {data} = await api("/recovery");
      if (!data.available) {
        show(el("h1", {text: "Recovery"}),
          el("p", {class: "panel", text: data.problem}));
        return;
      }
      const b = data.breaker;
      const beat = data.heartbeat;
      show(
        el("h1", {text: "Recovery"}),
        el("div", {class: "panel"},
          el("p", {class: `breaker ${b.open ? "open" : "closed"}`, id: "breaker",
                   text: b.open ? `Circuit breaker OPEN: ${b.why}` : "Circuit breaker closed"}),
          b.open ? el("p", {class: "muted", text: `since ${when(b.changed)}; reset with ` +
                                                  "airlock recover --reset-breaker"}) : null,
          el("p", {class: "muted", text: beat && beat.polls
            ? `service pid ${beat.pid}: ${beat.polls} polls, last ${ago(beat.last_poll)}`
            : "the recovery service has not polled yet"})),
        el("h2", {text: `Open cases (${data.cases.length})`}),
        simpleTable(["node", "state", "class", "rung", "check", "detail", "note", "since"],
          data.cases.map((c) => [nodeLink(c.node), c.state, c.failure_class,
            `${Math.min(c.step + 1, c.ladder.length)}/${c.ladder.length} ` +
              `${c.next_action || ""}`, c.check, c.detail, c.note, when(c.since)]), "cases"),
        data.stuck.length ? el("h2", {text: "Stuck, or waiting for an operator"}) : null,
        data.stuck.length ? simpleTable(["node", "reason", "since"], data.stuck.map((s) =>
          [nodeLink(s.node), s.reason, when(s.since)])) : null,
        el("h2", {text: "Last actions"}),
        simpleTable(["when", "node", "action", "via", "status", "message"],
          data.actions.map((a) => [when(a.created), nodeLink(a.node), a.kind, a.via, a.status,
                                   a.message]), "actions"),
        el("h2", {text: "History"}),
        simpleTable(["when", "node", "event", "detail"], data.events.map((e) =>
          [when(e.ts), e.node === "*" ? "*" : nodeLink(e.node), e.event, e.detail]),
          "events"),
        data.closed.length ? el("h2", {text: "Closed cases"}) : null,
        data.closed.length ? simpleTable(["node", "state", "class", "check", "note", "since"],
          data.closed.map((c) => [nodeLink(c.node), c.state, c.failure_class, c.check, c.note,
                                  when(c.since)])) : null);
    }
    return {refresh};
  }

  // --- fleet ---------------------------------------------------------------------------------
  // One bar per node against the profile floor (dashed red) and the fleet median (dark line):
  // a bar under the floor is red, one under fraction x median amber.
  // Where a figure stands: below the profile floor, a straggler (below fraction x the fleet
  // median: the burn-in's own rule), or with the fleet.
  function standing(v, floor, median, fraction) {
    if (floor && v < floor) return "fail";
    if (median && fraction && v < fraction * median) return "straggler";
    return "ok";
  }

  // One bar per node reads up to ~60 nodes; beyond, a histogram (nodes per bin of the figure)
  // keeps its text and bars readable at 1,000 or 10,000 nodes, and the list beside it names
  // the stragglers.
  function fleetChart(title, unit, nodes, floor, median, fraction) {
    const chart = nodes.length <= 60 ? barChart(title, unit, nodes, floor, median, fraction)
      : histogram(title, unit, nodes, floor, median, fraction);
    return el("div", {class: "fleet-row"}, chart,
              stragglers(unit, nodes, floor, median, fraction));
  }

  function stragglers(unit, nodes, floor, median, fraction) {
    const low = nodes.filter((n) => Number.isFinite(n.value) &&
                                    standing(n.value, floor, median, fraction) !== "ok")
      .sort((a, b) => a.value - b.value);
    const box = el("div", {class: "stragglers"},
      el("h3", {text: `Stragglers: ${low.length} of ${nodes.length}`}));
    if (!low.length) {
      box.append(el("p", {class: "muted", text: "none below the fleet or the floor"}));
      return box;
    }
    const shown = low.slice(0, 100);
    box.append(el("table", {class: "straggler-list"},
      el("thead", {}, el("tr", {}, ["node", unit, "vs median"].map((h) =>
        el("th", {scope: "col", text: h})))),
      el("tbody", {}, shown.map((n) => el("tr", {"data-node": n.node,
                                                 class: `st-${standing(n.value, floor, median,
                                                                       fraction)}`},
        el("td", {}, nodeLink(n.node)), el("td", {text: fmt(n.value)}),
        el("td", {text: median ? `${fmt(100 * (n.value / median - 1))} %` : ""}))))));
    if (low.length > shown.length) {
      box.append(el("p", {class: "muted", text: `and ${low.length - shown.length} more`}));
    }
    return box;
  }

  function histogram(title, unit, nodes, floor, median, fraction) {
    const W = 720, H = 260, L = 64, R = 120, T = 24, B = 40, BINS = 40;
    const values = nodes.map((n) => n.value).filter((v) => Number.isFinite(v));
    const hi = Math.max(...values, floor || 0, median || 0) * 1.05 || 1;
    const lo = Math.max(0, Math.min(...values, floor || Infinity) * 0.95);
    const width = (hi - lo) / BINS || 1;
    const bins = Array.from({length: BINS}, () => ({count: 0, worst: "ok"}));
    const rank = {ok: 0, straggler: 1, fail: 2};
    for (const v of values) {
      const b = bins[Math.min(BINS - 1, Math.max(0, Math.floor((v - lo) / width)))];
      b.count += 1;
      const st = standing(v, floor, median, fraction);
      if (rank[st] > rank[b.worst]) b.worst = st;
    }
    const most = Math.max(...bins.map((b) => b.count), 1);
    const x = (v) => L + (W - L - R) * (v - lo) / (hi - lo || 1);
    const y = (c) => T + (H - T - B) * (1 - c / most);
    const svg = el("svg:svg", {class: "chart histogram", viewBox: `0 0 ${W} ${H}`, width: W,
                               height: H, role: "img", "aria-label": title});
    svg.append(el("svg:text", {x: L, y: 15,
                               text: `${title} (${unit}): ${values.length} nodes, ` +
                                     "counted per bin"}));
    for (let i = 0; i <= 4; i++) {
      const c = Math.round((most * i) / 4);
      svg.append(el("svg:line", {class: "grid", x1: L, x2: W - R, y1: y(c), y2: y(c)}));
      svg.append(el("svg:text", {class: "axis", x: L - 6, y: y(c) + 4, "text-anchor": "end",
                                 text: String(c)}));
    }
    for (let i = 0; i <= 4; i++) {
      const v = lo + ((hi - lo) * i) / 4;
      svg.append(el("svg:text", {class: "axis", x: x(v), y: H - B + 16, "text-anchor": "middle",
                                 text: fmt(v)}));
    }
    bins.forEach((b, i) => {
      if (!b.count) return;
      const x0 = lo + i * width;
      // a bin of a few stragglers among thousands still shows (3 px at least)
      const h = Math.max(3, y(0) - y(b.count));
      const rect = el("svg:rect", {class: `bar-${b.worst}`, x: x(x0) + 0.5,
                                   y: y(0) - h, width: Math.max(1, x(x0 + width) - x(x0) - 1),
                                   height: h,
                                   "data-bin": i, "data-count": b.count});
      rect.append(el("svg:title", {text: `${b.count} nodes at ${fmt(x0)}–` +
                                         `${fmt(x0 + width)} ${unit}`}));
      svg.append(rect);
    });
    const mark = (v, cls, label, dy) => {
      if (!v) return;
      svg.append(el("svg:line", {class: cls, x1: x(v), x2: x(v), y1: T, y2: H - B}));
      svg.append(el("svg:text", {x: Math.min(x(v) + 4, W - R + 4), y: T + dy,
                                 text: `${label} ${fmt(v)}`}));
    };
    mark(floor, "floor", "floor", 10);
    mark(median, "median", "fleet median", 24);
    return svg;
  }

  function barChart(title, unit, nodes, floor, median, fraction) {
    const W = Math.max(640, Math.min(2400, 26 * nodes.length + 120));
    const H = 260, L = 64, R = 160, T = 24, B = nodes.length <= 60 ? 70 : 24;
    const values = nodes.map((n) => n.value).filter((v) => Number.isFinite(v));
    const top = Math.max(...values, floor || 0, median || 0) * 1.12 || 1;
    const y = (v) => T + (H - T - B) * (1 - v / top);
    const bw = (W - L - R) / Math.max(1, nodes.length);
    const svg = el("svg:svg", {class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H,
                               role: "img", "aria-label": title});
    svg.append(el("svg:text", {x: L, y: 15, text: `${title} (${unit})`}));
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      svg.append(el("svg:line", {class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v)}));
      svg.append(el("svg:text", {class: "axis", x: L - 6, y: y(v) + 4, "text-anchor": "end",
                                 text: fmt(v)}));
    }
    nodes.forEach((n, i) => {
      const v = Number.isFinite(n.value) ? n.value : 0;
      let cls = "bar-ok";
      if (floor && v < floor) cls = "bar-fail";
      else if (median && fraction && v < fraction * median) cls = "bar-straggler";
      const x = L + i * bw + bw * 0.15;
      const rect = el("svg:rect", {class: cls, x, y: y(v), width: Math.max(1, bw * 0.7),
                                   height: Math.max(0, y(0) - y(v)), "data-node": n.node});
      rect.append(el("svg:title", {text: `${n.node}: ${fmt(v)} ${unit} ` +
                                         `(${(n.verdict || "").toUpperCase()})`}));
      svg.append(rect);
      if (nodes.length <= 60) {
        const tx = x + bw * 0.35, ty = H - B + 10;
        svg.append(el("svg:text", {class: "axis", x: tx, y: ty, "text-anchor": "end",
                                   transform: `rotate(-45 ${tx} ${ty})`, text: n.node}));
      }
    });
    const line = (v, cls, label) => {
      if (!v) return;
      svg.append(el("svg:line", {class: cls, x1: L, x2: W - R, y1: y(v), y2: y(v)}));
      svg.append(el("svg:text", {x: W - R + 6, y: y(v) + 4, text: `${label} ${fmt(v)}`}));
    };
    line(floor, "floor", "floor");
    line(median, "median", "fleet median");
    return svg;
  }

  function legend(fraction) {
    return el("div", {class: "legend"},
      el("span", {}, el("span", {class: "swatch ok"}), "at or above the fleet"),
      el("span", {}, el("span", {class: "swatch straggler"}),
         `below ${fraction} × fleet median (straggler)`),
      el("span", {}, el("span", {class: "swatch fail"}), "below the profile floor"));
  }

  function fleetView() {
    async function refresh() {
      const {data} = await api("/fleet");
      const parts = [el("h1", {text: "Fleet"}),
        el("p", {class: "muted", text: "Each node's newest burn-in and all-reduce, against " +
          "its profile's floor and the fleet median (the fleet comparison's reference: the " +
          `latest passing burn-in of at least ${data.fleet_min_nodes} other nodes).`})];
      if (!data.profiles.length) parts.push(el("p", {class: "panel",
        text: "No burn-in or all-reduce recorded yet (they run at the standard and deep " +
              "levels)."}));
      for (const p of data.profiles) {
        parts.push(el("h2", {text: `Profile ${p.profile}`}), legend(data.fleet_fraction));
        for (const d of p.burnin) {
          const nodes = d.nodes.map((n) => ({node: n.node, value: n.tflops,
                                             verdict: n.verdict}))
            .sort((a, b) => natural.compare(a.node, b.node));
          const median = d.fleet_median;
          parts.push(fleetChart(`burn-in ${d.dtype}`, "TFLOPS", nodes, d.floor, median,
                                data.fleet_fraction));
          if (median === null) parts.push(el("p", {class: "muted",
            text: `No fleet median for ${d.dtype}: ${d.fleet_nodes} passing nodes, ` +
                  `${data.fleet_min_nodes} needed.`}));
        }
        if (p.allreduce) {
          const nodes = p.allreduce.nodes.map((n) => ({node: n.node, value: n.busbw_gbps,
                                                       verdict: n.verdict}))
            .sort((a, b) => natural.compare(a.node, b.node));
          parts.push(fleetChart("all-reduce bus bandwidth", "GB/s", nodes, p.allreduce.floor,
                                p.allreduce.median, data.fleet_fraction));
          if (p.allreduce.median === null) parts.push(el("p", {class: "muted",
            text: `No fleet median for the all-reduce: ${p.allreduce.fleet_nodes} passing ` +
                  `nodes, ${data.fleet_min_nodes} needed.`}));
        }
      }
      show(...parts);
    }
    return {refresh};
  }

  // --- on-demand checks ------------------------------------------------------------------------
  function checksView() {
    const kind = el("select", {id: "check-kind", "aria-label": "targets"},
      ["nodes", "partition", "feature"].map((k) => el("option", {value: k, text: k})));
    const target = el("input", {id: "check-target", required: true,
                                placeholder: "node[1-4] | a partition | a feature"});
    const level = el("select", {id: "check-level"},
      ["standard", "deep"].map((l) => el("option", {value: l, text: l})));
    const wait = el("input", {id: "check-wait", type: "number", min: 0, max: 1440, step: "any",
                              value: 10});
    const only = el("input", {id: "check-only", placeholder: "e.g. gpu_count, burnin (optional)"});
    const token = el("input", {id: "check-token", type: "password", autocomplete: "off",
                               value: state.checkToken, placeholder: "[serve] check_token_file"});
    const error = el("p", {class: "form-error wide", id: "check-error", role: "alert"});
    const submit = el("button", {type: "submit", class: "primary", id: "check-submit",
                                 text: "Start check", disabled: !CHECKS_ENABLED});
    const form = el("form", {class: "check panel", id: "check-form"},
      el("label", {for: "check-kind", text: "targets"}), el("div", {class: "target"}, kind, target),
      el("label", {for: "check-level", text: "level"}), level,
      el("label", {for: "check-wait", text: "wait for jobs (min)"}), wait,
      el("label", {for: "check-only", text: "only"}), only,
      el("label", {for: "check-token", text: "check token"}), token,
      el("div", {class: "wide"}, submit), error);
    if (!CHECKS_ENABLED) {
      error.textContent = "On-demand checks through the API are off on this service " +
                          "([serve] check_token_file is not set).";
    }
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      error.textContent = "";
      const req = {level: level.value, wait_jobs: Number(wait.value || 0),
                   only: only.value.split(/[\s,]+/).filter(Boolean)};
      req[kind.value] = target.value.trim();
      state.checkToken = token.value.trim();
      sessionStorage.setItem("airlock.checkToken", state.checkToken);
      submit.disabled = true;
      try {
        const {data} = await api("/checks", {method: "POST", token: state.checkToken,
          headers: {"Content-Type": "application/json"}, body: JSON.stringify(req)});
        location.hash = `#/checks/${data.id}`;
      } catch (e) {
        error.textContent = e.message;
      } finally {
        submit.disabled = !CHECKS_ENABLED;
      }
    });
    const list = el("div", {id: "check-list"});
    show(el("h1", {text: "On-demand checks"}),
      el("p", {class: "muted", text: "Like airlock check --nodes/--partition/--feature: the " +
        "targets are isolated by a maintenance reservation (running jobs finish; jobs " +
        "elsewhere are untouched), checked, and only a node with a verdict of its own is " +
        "drained."}), form, el("h2", {text: "Recent"}), list);
    async function refresh() {
      const {data} = await api("/checks");
      list.replaceChildren(data.checks.length ? simpleTable(
        ["started", "id", "targets", "level", "state", "verdicts"],
        data.checks.map((c) => [when(c.submitted_at),
          el("a", {href: `#/checks/${c.id}`, text: c.id}),
          c.request.nodes || c.request.partition || c.request.feature, c.request.level,
          badge(`s-${c.state}`, c.state), verdictCounts(c)])) :
        el("p", {class: "muted", text: "none yet"}));
    }
    return {refresh};
  }

  function verdictCounts(c) {
    if (!c.result) return c.error || "";
    const counts = {};
    for (const n of c.result.nodes) counts[n.status] = (counts[n.status] || 0) + 1;
    return Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ");
  }

  function checkView(id) {
    let finished = false;
    async function refresh() {
      if (finished) return;
      const {data} = await api(`/checks/${encodeURIComponent(id)}`);
      finished = data.state !== "running";
      const r = data.request;
      const what = r.nodes ? `nodes ${r.nodes}` : r.partition ? `partition ${r.partition}`
        : `feature ${r.feature}`;
      const result = data.result;
      const verdict = result ? {0: "all passed", 1: "some failed",
                                3: "nothing failed; some skipped or not seen"}[result.exit_code]
        : "";
      show(
        el("p", {}, el("a", {href: "#/checks", text: "‹ checks"})),
        el("h1", {}, `Check ${data.id} `, badge(`s-${data.state}`, data.state)),
        el("p", {text: `${what}, level ${r.level}, wait for jobs ${r.wait_jobs} min` +
                       (r.only && r.only.length ? `, only ${r.only.join(", ")}` : "") +
                       `; targets ${data.targets.join(", ")}`}),
        data.error ? el("p", {class: "message form-error", id: "check-message",
                              text: data.error}) : null,
        verdict ? el("p", {class: "message", id: "check-verdict", text: `Verdict: ${verdict}`})
          : (finished ? null : el("p", {class: "muted", text: "running…"})),
        result ? simpleTable(["node", "result", "check", "detail", "group", "took"],
          result.nodes.map((n) => [nodeLink(n.node),
            badge(`s-${n.status}`, STATUS_LABEL[n.status] || n.status), n.failed_check || "",
            n.detail || n.why || "", n.group, took(n.duration_s)]), "check-result") : null,
        el("h2", {text: "Progress"}),
        el("ul", {class: "progress"}, data.progress.map((p) =>
          el("li", {text: `${when(p.at).slice(11)}  ${p.line}`}))));
    }
    return {refresh, interval: 1000};
  }

  // --- routing -------------------------------------------------------------------------------
  function parseRoute() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    return parts[0] ? parts : ["nodes"];
  }

  // A view that failed to load tries again, waiting twice as long each time (2 s to 60 s),
  // and says when a load last worked: a page opened while Slurm was away comes back by itself.
  function loadFailed(e, key) {
    state.retryDelay = Math.min(60, Math.max(2, state.retryDelay * 2));
    const last = state.lastOk ? `last loaded ${ago(state.lastOk)}` : "not loaded yet";
    show(el("p", {class: "banner", id: "load-error",
                  text: `${e.message}. Trying again in ${state.retryDelay} s (${last}).`}));
    state.retryTimer = setTimeout(() => { if (state.route === key) route(true); },
                                  state.retryDelay * 1000);
  }
  function loaded() {
    state.lastOk = Date.now() / 1000;
    state.retryDelay = 0;
  }

  async function route(force) {
    const parts = parseRoute();
    const key = parts.join("/");
    if (!force && key === state.route) return;
    if (key !== state.route) state.retryDelay = 0;
    state.route = key;
    clearInterval(state.timer);
    clearTimeout(state.retryTimer);
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("active", a.dataset.view === parts[0] ||
        (parts[0] === "node" && a.dataset.view === "nodes") ||
        (parts[0] === "run" && a.dataset.view === "nodes"));
    }
    let v;
    try {
      if (!state.nodes || parts[0] === "nodes") await loadNodes();
      if (parts[0] === "node") v = nodeView(parts[1], parts[2]);
      else if (parts[0] === "run") v = runView(parts[1]);
      else if (parts[0] === "recovery") v = recoveryView();
      else if (parts[0] === "fleet") v = fleetView();
      else if (parts[0] === "checks" && parts[1]) v = checkView(parts[1]);
      else if (parts[0] === "checks") v = checksView();
      else v = nodesView();
      state.current = v;
      if (parts[0] !== "nodes") await v.refresh();
      loaded();
    } catch (e) {
      if (e.status !== 401) loadFailed(e, key);
      return;
    }
    const tick = async () => {
      if (!document.getElementById("auto").checked || v.once) return;
      try {
        // the header's counts and "updated" follow every view, the checks pages included
        if (parts[0] !== "nodes") await loadNodes();
        await v.refresh();
        loaded();
      } catch (e) {
        const last = state.lastOk ? `last succeeded ${ago(state.lastOk)}` : "never loaded";
        banner(`Refresh failed: ${e.message} (${last}); trying again`, "stale");
      }
    };
    state.timer = setInterval(tick, v.interval || REFRESH_MS);
  }

  window.addEventListener("hashchange", () => route(false));
  if (TOKEN_REQUIRED && !state.token) askToken();
  route(true);
})();
