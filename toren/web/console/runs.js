// The runs list (search, start a run) and one run's timeline, live while it runs.
import { follow, request } from "./api.js";
import { agentSelect, callCard, enc, flash, h, json, sync, when } from "./ui.js";

const STATUSES = ["running", "waiting", "completed", "failed", "canceled", "terminated", "timed_out"];
const FINAL = new Set(["run_completed", "run_failed"]);
const DELTAS = new Set(["text_delta", "tool_call_delta"]);

export async function agents() {
  const r = await request("GET", "/v1/agents");
  return r.ok ? r.data.agents : [];
}

function labelled(label, control) {
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control);
}

export async function runsView(root) {
  const known = await agents();
  const agent = agentSelect(known, "runs-agent", "any agent");
  const status = agentSelect(STATUSES, "runs-status", "any status");
  const type = agentSelect(["run", "thread"], "runs-type", "runs and threads");
  const rows = h("tbody");
  const state = h("p", { class: "muted", role: "status" });
  const more = h("button", { type: "button", hidden: true, onclick: () => load(false) }, "More");
  let next = null;
  async function load(fresh) {
    const q = new URLSearchParams({ limit: "50" });
    for (const [k, el] of [["agent", agent], ["status", status], ["type", type]]) if (el.value) q.set(k, el.value);
    if (!fresh && next) q.set("next", next);
    state.textContent = "Searching…";
    const r = await request("GET", `/v1/runs?${q}`);
    if (!r.ok) return (state.textContent = `Refused: ${r.error}`);
    if (fresh) rows.replaceChildren();
    for (const run of r.data.runs) {
      const href = `#/${run.workflow_type === "AgentThread" ? "threads" : "runs"}/${enc(run.run_id)}`;
      rows.append(h("tr", {},
        h("td", {}, h("a", { href }, run.run_id)), h("td", {}, run.agent),
        h("td", {}, run.waiting ? `${run.status} (waiting)` : run.status),
        h("td", {}, run.workflow_type === "AgentThread" ? "thread" : "run"),
        h("td", {}, when(run.started_at)), h("td", { class: "prompt" }, run.prompt || "")));
    }
    next = r.data.next;
    more.hidden = !next;
    state.textContent = `${rows.children.length} shown${next ? "; more below" : ""}.`;
  }
  const startAgent = agentSelect(known, "start-agent");
  const prompt = h("textarea", { id: "start-prompt", rows: 3 });
  const result = h("p", { class: "result", role: "status" });
  async function start(event) {
    event.preventDefault();
    const r = await request("POST", "/v1/runs", { agent: startAgent.value, prompt: prompt.value });
    if (!r.ok) {
      result.textContent = `Refused: ${r.error}`;
      result.className = "result bad";
      return;
    }
    flash(`Started run ${r.data.run_id} of ${r.data.agent}.`);
    location.hash = `#/runs/${enc(r.data.run_id)}`;
  }
  root.append(h("h1", { tabindex: -1 }, "Runs"),
    h("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); load(true); } },
      labelled("Agent", agent), labelled("Status", status), labelled("Type", type),
      h("button", { type: "submit" }, "Search")),
    state,
    h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Run", "Agent", "Status", "Type", "Started", "Prompt"].map((c) => h("th", { scope: "col" }, c)))),
      rows)),
    more,
    h("h2", {}, "Start a run"),
    h("form", { class: "start", onsubmit: start },
      labelled("Agent", startAgent), labelled("Prompt", prompt),
      h("button", { type: "submit" }, "Start run"), result));
  await load(true);
}

// What each event shows besides its type and time (everything else stays in `toren events`).
const SHOWN = {
  RunStarted: ["agent", "prompt"], ThreadStarted: ["agent", "userId"],
  LlmCallCompleted: ["step", "attempt", "text", "toolCalls", "usage", "costUSD"],
  LlmCallFailed: ["step", "attempt", "error"],
  ToolCallStarted: ["tool", "callId", "args"], ToolCallCompleted: ["tool", "callId", "result", "isError"],
  ToolCallFailed: ["tool", "callId", "error"],
  ApprovalRequested: ["tool", "callId", "args", "reason", "rule", "approvers"],
  ApprovalResolved: ["callId", "approved", "by", "comment", "via", "rule", "argsBefore", "argsAfter"],
  QuestionAsked: ["question", "choices"], QuestionAnswered: ["text", "by"],
  MessageReceived: ["content"], MessageAnswered: ["text", "agent"],
  RunCompleted: ["text", "output"], RunFailed: ["error", "kind"],
};
const FORMAT = {
  toolCalls: (calls) => calls.map((c) => `${c.name}(${c.arguments ?? JSON.stringify(c.args ?? {})})`).join("\n"),
  usage: (u) => `${u.input_tokens ?? "?"} in, ${u.output_tokens ?? "?"} out`,
};
const HIDDEN = new Set(["type", "at", "depth", "parentRun"]);

function eventItem(e, started) {
  const keys = SHOWN[e.type] || Object.keys(e).filter((k) => !HIDDEN.has(k));
  const facts = h("dl", { class: "facts" });
  for (const k of keys) {
    const v = e[k];
    if (v === undefined || v === null || v === "" || (Array.isArray(v) && !v.length)) continue;
    const shown = FORMAT[k] ? FORMAT[k](v) : v;
    facts.append(h("dt", {}, k), h("dd", {}, typeof shown === "object" ? h("pre", {}, json(shown)) : String(shown)));
  }
  const begun = started.get(`${e.type.replace("Completed", "Started")}:${e.callId ?? e.step}`);
  const took = begun && e.type.endsWith("Completed") ? `${new Date(e.at) - new Date(begun)} ms` : "";
  const li = h("li", { class: `event ${e.type}${e.depth ? " nested" : ""}`, "data-type": e.type },
    h("div", { class: "event-head" }, h("strong", {}, e.type),
      h("time", { datetime: e.at }, new Date(e.at).toLocaleTimeString()),
      took && h("span", { class: "took" }, took), e.depth ? h("span", { class: "muted" }, `child run, depth ${e.depth}`) : ""),
    facts);
  li.style.setProperty("--depth", String(e.depth || 0));
  return li;
}

export async function runView(root, ctx, id) {
  const base = `/v1/runs/${enc(id)}`;
  const meta = h("p", { class: "muted", role: "status" });
  const result = h("div");
  const waiting = h("div", { class: "cards" });
  const live = h("pre", { class: "live", hidden: true, "aria-label": "Text as the model writes it" });
  const timeline = h("ol", { class: "timeline", "aria-label": "Event log" });
  root.append(h("h1", { tabindex: -1 }, "Run ", h("code", {}, id)), meta, result, waiting, live, timeline);
  const cards = new Map();
  let busy = false;
  let again = false;
  async function refresh() {
    if (busy) return (again = true);
    busy = true;
    const status = await request("GET", base);
    if (!status.ok) {
      meta.textContent = `Refused: ${status.error}`;
      busy = false;
      return false;
    }
    const run = status.data;
    meta.textContent = `${run.workflow_type === "AgentThread" ? "Thread" : "Run"} of ${run.agent}: ${run.status}`;
    const text = run.result && typeof run.result === "object" ? run.result.text : run.result;
    result.replaceChildren(...(text ? [h("h2", {}, "Result"), h("p", { class: "answer" }, String(text))] : []));
    const events = await request("GET", `${base}/events`);
    if (events.ok) {
      const started = new Map();
      timeline.replaceChildren();
      for (const e of events.data.events) {
        if (e.type === "LlmCallStarted" || e.type === "ToolCallStarted") started.set(`${e.type}:${e.callId ?? e.step}`, e.at);
        if (e.type !== "LlmCallStarted") timeline.append(eventItem(e, started));
      }
    }
    const pending = run.status === "running" ? await request("GET", `${base}/pending`) : null;
    sync(waiting, cards, pending && pending.ok ? pending.data.pending : [], (c) => c.call_id,
      (c) => callCard(base, c, run.agent));
    busy = false;
    if (again) {
      again = false;
      await refresh();
    }
    return run.status === "running";
  }
  if (!(await refresh())) return;
  let step = null;
  const stream = follow(`${base}/stream`, (item) => {
    if (item.step !== step) live.replaceChildren();
    step = item.step;
    if (DELTAS.has(item.type)) {
      if (item.type === "text_delta") {
        live.hidden = false;
        live.append(item.text || "");
      }
      return true;
    }
    if (item.type === "superseded" || item.type === "tool_call_started") live.replaceChildren();
    live.hidden = !live.textContent;
    refresh();
    return !FINAL.has(item.type);
  }, (s) => { if (s.error) meta.textContent = `Live updates: ${s.error}`; });
  ctx.cleanup.push(stream.stop);
}
