// A device's page: its facts, pipelines with start/stop, previews, state and events, live.
"use strict";

(() => {
  const device = decodeURIComponent(location.pathname.split("/").pop());
  const result = document.getElementById("action-result");
  const encodedKey = (key) => key.split("/").map(encodeURIComponent).join("/");

  async function run(body, question) {
    result.textContent = "…";
    const started = performance.now();
    try {
      const answer = await Dash.action(body, question);
      const response = answer.response || {};
      const took = Math.round(performance.now() - started);
      result.textContent = response.ok ? `${body.action}: ok in ${took} ms` : `${body.action} failed: ${response.error?.message ?? "?"}`;
    } catch (error) {
      result.textContent = error.message;
    }
  }

  function renderPipelines(view) {
    const rows = view.pipelines.map((p) => {
      const tr = document.createElement("tr");
      const button = Dash.el("button", p.running ? "Stop" : "Start");
      button.type = "button";
      button.disabled = Dash.readOnly || !view.online;
      button.addEventListener("click", () => {
        const verb = p.running ? "stop" : "start";
        run({ action: verb, device, pipeline: p.name }, `${verb} pipeline ${p.name} on ${device}?`);
      });
      for (const value of [p.name, p.running ? "yes" : "no", Dash.fixed(p.fps, 1),
        `${Dash.fixed(p.p50, 1)} / ${Dash.fixed(p.p99, 1)}`, p.frames ?? "-", p.dropped ?? "-"]) {
        tr.append(Dash.el("td", value));
      }
      const td = document.createElement("td");
      td.append(button);
      tr.append(td);
      return tr;
    });
    document.querySelector("#pipelines tbody").replaceChildren(...rows);
  }

  function renderPreviews(previews) {
    const box = document.getElementById("previews");
    const keys = Object.keys(previews).sort();
    if (!keys.length) return;
    for (const old of [...box.children]) if (!keys.includes(old.dataset?.key)) old.remove();
    for (const key of keys) {
      let figure = [...box.children].find((node) => node.dataset.key === key);
      if (!figure) {
        figure = document.createElement("figure");
        figure.dataset.key = key;
        figure.append(document.createElement("img"), Dash.el("figcaption", key));
        box.append(figure);
      }
      const src = `/api/preview/${encodeURIComponent(device)}/${encodedKey(key)}?v=${previews[key]}`;
      const img = figure.querySelector("img");
      if (img.getAttribute("src") !== src) {
        img.src = src;
        img.alt = `preview of ${key}`;
      }
    }
  }

  function render(view) {
    document.title = `edge_sdk fleet: ${view.id}`;
    document.getElementById("device-name").textContent = view.id;
    const labels = Object.entries(view.labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    const facts = document.getElementById("device-facts");
    facts.textContent = `${view.online ? "online" : "offline"} · profile ${view.profile ?? "-"} · version ` +
      `${view.version ?? "-"} · health ${view.health ?? "-"} · sdk ${view.sdk ?? "-"} · labels ${labels || "-"} · ` +
      `last seen ${Dash.ago(view.last_seen)}`;
    facts.className = view.online ? "online" : "offline";
    document.getElementById("ping").disabled = Dash.readOnly || !view.online;
    renderPipelines(view);
    renderPreviews(view.previews || {});
    document.getElementById("reported").textContent = JSON.stringify(view.reported, null, 2);
    document.getElementById("desired").textContent = JSON.stringify(view.desired, null, 2);
    const events = (view.events || []).slice().reverse().map((e) => {
      const when = new Date(e.timestamp * 1000).toLocaleTimeString();
      return Dash.el("li", `${when} ${e.pipeline}: ${e.kind} ${e.subject} ${e.message}`);
    });
    document.getElementById("events").replaceChildren(...events);
  }

  document.getElementById("ping").addEventListener("click", () => run({ action: "ping", device }, `Ping ${device}?`));
  fetch(`/api/device/${encodeURIComponent(device)}`, { credentials: "same-origin" })
    .then((response) => response.json())
    .then((view) => (view.error ? Dash.banner(view.error) : render(view)));
  Dash.stream(`/api/events?device=${encodeURIComponent(device)}`, { device: render });
})();
