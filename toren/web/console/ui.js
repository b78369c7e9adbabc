// DOM helpers and the cards shared by views. Data only ever goes in as text (append of a
// string, textContent, value), never as HTML.
import { request } from "./api.js";

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "value") el.value = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined && child !== false) el.append(child);
  }
  return el;
}

let ids = 0;
export const uid = (prefix) => `${prefix}-${++ids}`;
export const enc = encodeURIComponent;

export function flash(text, bad = false) {
  const box = document.getElementById("flash");
  box.textContent = text;
  box.className = bad ? "flash bad" : "flash";
}

export function when(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return String(iso);
  const s = Math.round((Date.now() - at.getTime()) / 1000);
  const ago = s < 60 ? `${s}s` : s < 3600 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3600)}h`;
  return `${at.toLocaleString()} (${s >= 0 ? `${ago} ago` : "in the future"})`;
}

export const json = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

// Keep `container`'s children in the order of `items`, one node per key, reusing nodes (so a
// half-typed comment survives a refresh) and dropping those whose item went away.
export function sync(container, nodes, items, key, make) {
  const keep = new Set();
  items.forEach((item, i) => {
    const k = key(item);
    keep.add(k);
    if (!nodes.has(k)) nodes.set(k, make(item));
    const node = nodes.get(k);
    if (container.children[i] !== node) container.insertBefore(node, container.children[i] || null);
  });
  for (const [k, node] of nodes) {
    if (!keep.has(k)) {
      node.remove();
      nodes.delete(k);
    }
  }
}

function field(label, control) {
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control);
}

function facts(pairs) {
  return h("dl", { class: "facts" },
    pairs.filter(([, v]) => v !== undefined && v !== null && v !== "")
      .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

// A call waiting for a person: approve (with edited arguments) or deny, with a comment.
// `base` is `/v1/runs/<id>` or `/v1/threads/<id>`.
export function callCard(base, call, agent) {
  const original = call.args || {};
  const args = h("textarea", { id: uid("args"), rows: 4, spellcheck: "false", class: "code" });
  args.value = JSON.stringify(original, null, 2);
  const comment = h("input", { id: uid("comment"), type: "text", autocomplete: "off" });
  const result = h("p", { class: "result", role: "status" });
  const approve = h("button", { type: "button", class: "approve", onclick: () => decide(true) }, "Approve");
  const deny = h("button", { type: "button", class: "deny", onclick: () => decide(false) }, "Deny");
  async function decide(yes) {
    const body = { call_id: call.call_id, approve: yes, comment: comment.value };
    if (yes) {
      let edited;
      try {
        edited = JSON.parse(args.value);
      } catch (err) {
        result.textContent = `Not sent: the arguments are not valid JSON (${err.message}).`;
        result.className = "result bad";
        args.focus();
        return;
      }
      if (JSON.stringify(edited) !== JSON.stringify(original)) body.args = edited;
    }
    approve.disabled = deny.disabled = true;
    result.textContent = "Sending…";
    result.className = "result";
    const r = await request("POST", `${base}/decisions`, body);
    if (r.ok) {
      const what = `${yes ? "Approved" : "Denied"} ${call.tool} (${call.call_id}) as ${r.data.by}` +
        (body.args ? " with edited arguments" : "") + ".";
      result.textContent = what;
      flash(what);
    } else {
      approve.disabled = deny.disabled = false;
      result.textContent = `Refused: ${r.error}`;
      result.className = "result bad";
      flash(`Refused: ${r.error}`, true);
    }
  }
  const approvers = call.approvers ? call.approvers.join(", ") : "";
  return h("article", { class: "card call", "data-call": call.call_id },
    h("h3", {}, call.tool, " ", h("span", { class: "muted" }, call.call_id)),
    facts([["agent", agent], ["reason", call.reason], ["rule", call.rule],
      ["approvers", approvers], ["waiting since", when(call.requested_at)],
      ["expires", call.expires_at ? when(call.expires_at) : "never"],
      ["where", call.path ? call.path.join(" → ") : ""]]),
    field("Arguments (JSON; edit to approve with changes)", args),
    field("Comment (the model reads it on a denial)", comment),
    h("div", { class: "actions" }, approve, deny), result);
}

// A question a run asks a person (`ask_human`, `ctx.ask`).
export function questionCard(base, q, agent) {
  const text = h("input", { id: uid("answer"), type: "text", autocomplete: "off" });
  const result = h("p", { class: "result", role: "status" });
  async function send(answer) {
    if (!answer) {
      result.textContent = "Not sent: write an answer first.";
      result.className = "result bad";
      return;
    }
    const r = await request("POST", `${base}/answers`, { question_id: q.question_id, text: answer });
    result.textContent = r.ok ? `Answered “${answer}” as ${r.data.by}.` : `Refused: ${r.error}`;
    result.className = r.ok ? "result" : "result bad";
    flash(result.textContent, !r.ok);
  }
  const choices = (q.choices || []).map((c) =>
    h("button", { type: "button", onclick: () => send(c) }, c));
  return h("article", { class: "card question" },
    h("h3", {}, q.question),
    facts([["agent", agent], ["tool", q.tool], ["asked", when(q.asked_at)],
      ["expires", q.expires_at ? when(q.expires_at) : "never"]]),
    choices.length ? h("div", { class: "actions" }, choices)
      : h("form", { class: "actions", onsubmit: (e) => { e.preventDefault(); send(text.value.trim()); } },
        field("Answer", text), h("button", { type: "submit" }, "Answer")),
    result);
}

export function agentSelect(agents, id, any) {
  const select = h("select", { id });
  if (any) select.append(h("option", { value: "" }, any));
  for (const a of agents) select.append(h("option", { value: a }, a));
  return select;
}
