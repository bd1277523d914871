"use strict";
// tirl view: paginated, lazily rendered trajectory list. All text goes in through textContent; only
// Pygments' highlighted code (escaped on the Python side) is inserted as HTML.
(function () {
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const records = data.records;
  const pageSize = data.meta.page_size;
  const $ = (id) => document.getElementById(id);
  const state = { page: 0, shown: records };
  let haystacks = null;

  function clone(id) { return $(id).content.firstElementChild.cloneNode(true); }
  function setText(root, sel, text) { const el = root.querySelector(sel); if (el) el.textContent = text; return el; }
  function fmt(x, digits) { return (x === null || x === undefined) ? "–" : (typeof x === "number" ? x.toFixed(digits) : String(x)); }
  function value(id) { const el = $(id); return el ? el.value : ""; }

  function haystack(r) {
    const parts = [r.problem, r.gold, r.answer || "", r.head];
    for (const t of r.turns) { parts.push(t.text); for (const c of t.calls) parts.push(c.output, c.response, c.raw); }
    return parts.join("\n").toLowerCase();
  }

  function matches(r, f, i) {
    if (f.verdict && r.verdict !== f.verdict) return false;
    if (f.finish === "truncated" && !r.truncated) return false;
    if (f.finish === "complete" && r.truncated) return false;
    if (f.tool === "none" && r.classes.length) return false;
    if (f.tool && f.tool !== "none" && !r.classes.includes(f.tool)) return false;
    if (f.kept === "kept" && r.kept !== true) return false;
    if (f.kept === "dropped" && r.kept !== false) return false;
    if (f.step && String(r.step) !== f.step) return false;
    if (f.audit === "flagged" && !r.audit.length) return false;
    if (f.audit === "clean" && r.audit.length) return false;
    if (f.audit && f.audit !== "flagged" && f.audit !== "clean" && !r.audit.includes(f.audit)) return false;
    if (f.search) {
      if (haystacks === null) haystacks = records.map(haystack);
      if (!haystacks[i].includes(f.search)) return false;
    }
    return true;
  }

  function applyFilters() {
    const f = { verdict: value("f-verdict"), finish: value("f-finish"), tool: value("f-tool"),
      kept: value("f-kept"), step: value("f-step"), audit: value("f-audit"), search: value("f-search").trim().toLowerCase() };
    state.shown = records.filter((r, i) => matches(r, f, i));
    state.page = 0;
    render();
  }

  function summaryFacts(r) {
    const calls = r.classes.length ? `${r.classes.length} tool calls (${r.classes.join(", ")})` : "no tool call";
    const parts = [`reward ${fmt(r.reward, 0)}`, `${r.turns.length} turns`, calls, `finish ${r.finish}`,
      `answer ${r.answer === null ? "none" : r.answer}`];
    if (r.kept !== null && r.kept !== undefined) parts.push(`p_err ${fmt(r.p_err, 2)} p_format ${fmt(r.p_format, 2)}`);
    if (r.audit.length) parts.push(`audit: ${r.audit.join(", ")}`);
    return parts.join(" · ");
  }

  function entropyColour(e) {
    const x = Math.max(0, Math.min(1, e / 3)); // 0..3 nats
    return `hsl(${Math.round(220 - 220 * x)}, 85%, ${Math.round(92 - 35 * x)}%)`;
  }

  function renderEntropy(root, r) {
    const box = root.querySelector(".entropy-views");
    for (const label of Object.keys(r.entropy)) {
      const h = document.createElement("h4");
      h.textContent = `response tokens coloured by entropy under ${label} (blue low, red high; hover for nats; brown = injected)`;
      const pre = document.createElement("pre");
      pre.className = "entropy";
      for (const [tok, e, m] of r.entropy[label]) {
        const span = document.createElement("span");
        span.textContent = tok;
        if (m && e !== null) { span.style.background = entropyColour(e); span.title = `${e.toFixed(3)} nats`; }
        else span.className = "tok-inj";
        pre.appendChild(span);
      }
      box.append(h, pre);
    }
  }

  function renderCall(c) {
    const el = clone("tpl-call");
    const badge = setText(el, ".cls", c.cls);
    badge.classList.add(c.cls);
    const facts = [c.name, c.tool && c.tool !== "python" ? `tool ${c.tool}` : "", c.session, `status ${c.status}`];
    if (c.duration !== null && c.duration !== undefined) facts.push(`${c.duration.toFixed(3)} s`);
    if (c.exit !== null && c.exit !== undefined) facts.push(`exit ${c.exit}`);
    if (c.parse_error) facts.push(c.parse_error);
    setText(el, ".call-facts", facts.filter(Boolean).join(" · "));
    const code = el.querySelector(".code");
    if (c.code_html) code.innerHTML = c.code_html; else if (c.raw) code.textContent = c.raw; else code.classList.add("hidden");
    if (c.input) setText(el, ".stdin pre", c.input); else el.querySelector(".stdin").classList.add("hidden");
    if (c.output) setText(el, ".output pre", c.output); else el.querySelector(".output").classList.add("hidden");
    if (c.response) setText(el, ".response pre", c.response); else el.querySelector(".response").classList.add("hidden");
    return el;
  }

  function renderBody(item, r) {
    const body = clone("tpl-body");
    setText(body, ".problem", r.problem);
    setText(body, ".gold", r.gold);
    setText(body, ".answer", r.answer === null ? "(none extracted)" : r.answer);
    setText(body, ".verdict-text", `${r.verdict}, reward ${fmt(r.reward, 1)} (verifier status ${r.verify_status})`);
    setText(body, ".lengths", `${r.finish}; ${fmt(r.model_tokens)} model tokens, ${fmt(r.injected_tokens)} injected, ${fmt(r.response_tokens)} response tokens in all`);
    if (r.kept === null || r.kept === undefined) body.querySelector(".roc").classList.add("hidden");
    else setText(body, ".roc-text", `${r.reason}; p_err ${fmt(r.p_err, 3)}, p_format ${fmt(r.p_format, 3)}, group ${r.selection}`);
    if (r.audit_details.length) setText(body, ".audit-text", r.audit_details.join("; "));
    else body.querySelector(".audit").classList.add("hidden");
    if (r.prompt) setText(body, ".prompt", r.prompt); else body.querySelector(".prompt-box").classList.add("hidden");
    renderEntropy(body, r);
    const ol = body.querySelector(".turns");
    r.turns.forEach((t, k) => {
      const li = clone("tpl-turn");
      setText(li, ".turn-head", `turn ${k + 1} · ${fmt(t.n)} model tokens · ended by ${t.finish} · ${t.calls.length} tool calls`);
      setText(li, ".model", t.text);
      const calls = li.querySelector(".calls");
      for (const c of t.calls) calls.appendChild(renderCall(c));
      ol.appendChild(li);
    });
    item.querySelector(".body").appendChild(body);
  }

  function renderItem(r) {
    const item = clone("tpl-item");
    item.dataset.id = r.id;
    const badge = setText(item, ".verdict", r.verdict);
    badge.classList.add(r.verdict);
    if (r.kept !== null && r.kept !== undefined) {
      const k = document.createElement("span");
      k.className = `badge ${r.kept ? "kept" : "dropped"}`;
      k.textContent = r.kept ? "kept" : "dropped";
      badge.after(" ", k);
    }
    setText(item, ".head", r.head);
    setText(item, ".facts", summaryFacts(r));
    let done = false;
    item.addEventListener("toggle", () => { if (item.open && !done) { done = true; renderBody(item, r); } });
    return item;
  }

  function render() {
    const pages = Math.max(1, Math.ceil(state.shown.length / pageSize));
    state.page = Math.max(0, Math.min(state.page, pages - 1));
    const list = $("list");
    list.replaceChildren(...state.shown.slice(state.page * pageSize, (state.page + 1) * pageSize).map(renderItem));
    $("count").textContent = `${state.shown.length} of ${records.length} trajectories`;
    $("page").textContent = `page ${state.page + 1} of ${pages}`;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
  }

  for (const id of ["f-verdict", "f-finish", "f-tool", "f-kept", "f-step", "f-audit"]) { const el = $(id); if (el) el.addEventListener("change", applyFilters); }
  $("f-search").addEventListener("input", applyFilters);
  $("prev").addEventListener("click", () => { state.page -= 1; render(); window.scrollTo(0, 0); });
  $("next").addEventListener("click", () => { state.page += 1; render(); window.scrollTo(0, 0); });
  render();
}());
