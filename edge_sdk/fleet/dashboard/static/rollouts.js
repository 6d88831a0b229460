// The rollouts page: every recent rollout's waves and per-device outcomes, live; deploy, resume, rollback.
"use strict";

(() => {
  const result = document.getElementById("action-result");

  async function run(body, question) {
    result.textContent = "…";
    try {
      const answer = await Dash.action(body, question);
      result.textContent = `${body.action}: ${answer.rollout ?? "ok"}`;
    } catch (error) {
      result.textContent = error.message;
    }
  }

  function button(text, onClick) {
    const node = Dash.el("button", text);
    node.type = "button";
    node.disabled = Dash.readOnly;
    node.addEventListener("click", onClick);
    return node;
  }

  function renderRollout(r) {
    const section = document.createElement("section");
    section.className = "rollout";
    section.dataset.rollout = r.id;
    section.append(Dash.el("h2", `${r.id}: ${r.deployment_id} version ${r.version}`));
    const state = Dash.el("p", `${r.state}${r.reason ? ` (${r.reason})` : ""} · failed ${(100 * r.failed_share).toFixed(0)}% ` +
      `of devices, abort threshold ${(100 * r.abort_threshold).toFixed(0)}% per wave` +
      (r.aborted_wave !== null ? ` · aborted at wave ${r.aborted_wave}` : ""), `state state-${r.state}`);
    const counts = Dash.el("p", Object.entries(r.counts).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(", "), "counts");
    const actions = document.createElement("p");
    actions.append(
      button("Resume", () => run({ action: "resume", rollout: r.id }, `Resume rollout ${r.id}?`)),
      button("Roll back", () => run({ action: "rollback", rollout: r.id }, `Roll back every device of ${r.id}?`)),
    );
    section.append(state, counts, actions);
    const waves = new Map();
    for (const d of r.devices) {
      if (!waves.has(d.wave)) waves.set(d.wave, []);
      waves.get(d.wave).push(d);
    }
    for (const [wave, devices] of [...waves.entries()].sort((a, b) => a[0] - b[0])) {
      const table = document.createElement("table");
      table.className = "wave";
      table.append(Dash.el("caption", `wave ${wave}`));
      for (const d of devices) {
        const tr = document.createElement("tr");
        tr.dataset.device = d.device;
        tr.append(Dash.el("td", d.device), Dash.el("td", d.outcome, `outcome outcome-${d.outcome}`),
          Dash.el("td", d.via ?? ""), Dash.el("td", d.reason ?? ""));
        table.append(tr);
      }
      section.append(table);
    }
    return section;
  }

  function render(data) {
    const select = document.getElementById("manifest");
    const chosen = select.value;
    select.replaceChildren(...data.manifests.map((name) => Dash.el("option", name)));
    if (data.manifests.includes(chosen)) select.value = chosen;
    document.getElementById("jobs").replaceChildren(...data.jobs.slice().reverse().map((job) =>
      Dash.el("p", `${job.action} ${job.rollout}: ${job.state}${job.message ? ` (${job.message})` : ""}`, "job")));
    document.getElementById("rollouts").replaceChildren(...data.rollouts.map(renderRollout));
  }

  document.getElementById("deploy-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const manifest = document.getElementById("manifest").value;
    const select = document.getElementById("select").value.trim();
    run({
      action: "deploy",
      manifest,
      select,
      first_wave: Number(document.getElementById("first-wave").value),
      rate_per_min: Number(document.getElementById("rate").value),
      abort_threshold: Number(document.getElementById("threshold").value),
    }, `Deploy ${manifest} to ${select || "every device"}?`);
  });
  Dash.stream("/api/events?page=rollouts", { rollouts: render });
})();
