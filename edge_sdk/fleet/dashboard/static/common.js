// Shared by the dashboard's pages. Everything a device reports is put into the page with textContent
// (never innerHTML), so a device named "<script>" shows as text.
"use strict";

const Dash = (() => {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content ?? "";
  const readOnly = meta("read-only") === "true";

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function ago(seconds) {
    if (!seconds) return "-";
    const age = Math.max(0, Date.now() / 1000 - seconds);
    if (age < 60) return `${Math.round(age)} s ago`;
    if (age < 3600) return `${Math.round(age / 60)} min ago`;
    return new Date(seconds * 1000).toLocaleString();
  }

  function fixed(value, digits) {
    return value === undefined || value === null ? "-" : Number(value).toFixed(digits);
  }

  // An action after the operator confirmed it; resolves to the JSON answer, rejects with its error text.
  async function action(body, question) {
    if (readOnly) throw new Error("the dashboard is read-only");
    if (!window.confirm(question)) throw new Error("cancelled");
    const response = await fetch("/api/action", {
      method: "POST",
      headers: { "content-type": "application/json", "x-csrf-token": meta("csrf-token") },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
    const answer = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
    if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
    return answer;
  }

  function banner(text) {
    const node = document.getElementById("banner");
    node.textContent = text || "";
    node.hidden = !text;
  }

  // The server-sent event stream of this page; `handlers` maps event names to functions of the data.
  function stream(url, handlers) {
    let lostSince = null;
    const source = new EventSource(url);
    for (const [name, handle] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => handle(JSON.parse(event.data)));
    }
    source.addEventListener("status", (event) => {
      const status = JSON.parse(event.data);
      lostSince = null;
      banner(status.connected ? "" : `MQTT broker ${status.broker} is unreachable: reconnecting (the figures below may be stale)`);
      const summary = document.getElementById("summary");
      summary.textContent = `broker ${status.broker} · ${status.devices} devices · telemetry dropped: ` +
        `${status.rate_limited} rate-limited, ${status.malformed + status.registry_malformed} malformed` +
        (status.read_only ? " · read-only" : "");
    });
    source.onerror = () => {
      lostSince = lostSince || Date.now();
      banner("Lost the dashboard's event stream: reconnecting");
    };
    return source;
  }

  return { el, ago, fixed, action, banner, stream, readOnly };
})();
