// The devices page: one row per device, updated in place from the event stream.
"use strict";

(() => {
  const body = document.querySelector("#devices tbody");
  const rows = new Map(); // device id -> { tr, view }
  const stamps = new Map(); // "device/pipeline" -> stats time last shown
  let sortKey = "id";
  let sortDown = false;
  let source = null;
  // Seconds from a device's stats message to its row on screen (the bench reads this).
  window.__domLatency = [];

  function pipelinesText(pipelines) {
    return pipelines.map((p) => {
      if (p.fps === undefined) return `${p.name} ${p.running ? "running" : "stopped"}`;
      return `${p.name} ${Dash.fixed(p.fps, 1)} fps, ${Dash.fixed(p.p50, 0)}/${Dash.fixed(p.p99, 0)} ms, ${p.dropped} dropped`;
    }).join("; ");
  }

  function texts(view) {
    const labels = Object.entries(view.labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    return [view.id, view.online ? "online" : "offline", view.profile ?? "-", labels, view.version ?? "-",
      view.health ?? "-", pipelinesText(view.pipelines), Dash.ago(view.last_seen)];
  }

  // Only the cells whose text changed are touched: a stats message changes two of eight.
  function render(tr, view) {
    const values = texts(view);
    if (!tr.cells.length) {
      for (let i = 0; i < values.length; i++) tr.insertCell();
      const link = document.createElement("a");
      link.href = `/device/${encodeURIComponent(view.id)}`;
      tr.cells[0].append(link);
      tr.dataset.device = view.id;
    }
    values.forEach((text, i) => {
      const target = i === 0 ? tr.cells[0].firstChild : tr.cells[i];
      if (target.textContent !== String(text)) target.textContent = String(text);
    });
    const state = view.online ? "online" : "offline";
    if (tr.className !== state) tr.className = state;
  }

  // Updates the row; true when the row is new or its place in the sort order may have changed.
  function upsert(view) {
    let row = rows.get(view.id);
    let moved = !row;
    if (!row) {
      row = { tr: document.createElement("tr"), view };
      rows.set(view.id, row);
      body.append(row.tr);
    } else {
      moved = value(row.view, sortKey) !== value(view, sortKey);
    }
    row.view = view;
    render(row.tr, view);
    const now = Date.now() / 1000;
    for (const p of view.pipelines) {
      const key = `${view.id}/${p.name}`;
      if (p.at !== undefined && stamps.get(key) !== p.at) {
        stamps.set(key, p.at);
        if (window.__domLatency.length < 100000) window.__domLatency.push(now - p.at);
      }
    }
    return moved;
  }

  function value(view, key) {
    const v = view[key];
    if (key === "labels") return Object.entries(v || {}).map(([k, x]) => `${k}=${x}`).join(" ");
    if (key === "pipelines") return v.length;
    return v ?? "";
  }

  function sort() {
    const ordered = [...rows.values()].sort((a, b) => {
      const x = value(a.view, sortKey);
      const y = value(b.view, sortKey);
      const order = x < y ? -1 : x > y ? 1 : 0;
      return sortDown ? -order : order;
    });
    body.append(...ordered.map((row) => row.tr));
  }

  function connect(select) {
    if (source) source.close();
    rows.clear();
    body.replaceChildren();
    const query = select ? `?select=${encodeURIComponent(select)}` : "";
    source = Dash.stream(`/api/events${query}`, {
      devices: (data) => {
        if (data.full) { rows.clear(); body.replaceChildren(); }
        let moved = false;
        for (const view of data.devices) moved = upsert(view) || moved;
        if (moved) sort();
        document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
      },
    });
  }

  for (const th of document.querySelectorAll("#devices th")) {
    th.addEventListener("click", () => {
      sortDown = sortKey === th.dataset.key ? !sortDown : false;
      sortKey = th.dataset.key;
      sort();
    });
  }

  document.getElementById("filter-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const select = document.getElementById("filter").value.trim();
    const error = document.getElementById("filter-error");
    const check = await fetch(`/api/devices?select=${encodeURIComponent(select)}`, { credentials: "same-origin" });
    if (!check.ok) {
      error.textContent = (await check.json()).error;
      return;
    }
    error.textContent = "";
    connect(select);
  });

  setInterval(() => {
    for (const row of rows.values()) {
      const text = Dash.ago(row.view.last_seen);
      if (row.tr.lastChild.textContent !== text) row.tr.lastChild.textContent = text;
    }
  }, 5000);
  connect("");
})();
