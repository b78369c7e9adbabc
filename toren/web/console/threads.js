// Threads: start one, send messages, watch the answer stream, approve inline, page back.
import { follow, request } from "./api.js";
import { agents } from "./runs.js";
import { agentSelect, callCard, enc, flash, h, questionCard, sync } from "./ui.js";

const PAGE = 30;

export async function threadsView(root) {
  const agent = agentSelect(await agents(), "thread-agent");
  const result = h("p", { class: "result", role: "status" });
  async function start(event) {
    event.preventDefault();
    const r = await request("POST", "/v1/threads", { agent: agent.value });
    if (!r.ok) {
      result.textContent = `Refused: ${r.error}`;
      result.className = "result bad";
      return;
    }
    flash(`Started thread ${r.data.thread_id} with ${r.data.agent}.`);
    location.hash = `#/threads/${enc(r.data.thread_id)}`;
  }
  root.append(h("h1", { tabindex: -1 }, "Threads"),
    h("p", {}, "A thread is a conversation with an agent; find earlier ones under ",
      h("a", { href: "#/runs" }, "Runs"), " (type: threads)."),
    h("form", { class: "start", onsubmit: start },
      h("div", { class: "field" }, h("label", { for: agent.id }, "Agent"), agent),
      h("button", { type: "submit" }, "Start a thread"), result));
}

function bubble(m) {
  if (m.role === "tool") {
    return h("li", { class: "msg tool" }, h("span", { class: "who" }, `tool ${m.name || ""}`), h("pre", {}, String(m.content ?? "")));
  }
  const calls = (m.tool_calls || []).map((c) =>
    h("pre", { class: "call" }, `${c.name}(${typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.args ?? c.arguments ?? {})})`));
  const who = m.role === "assistant" ? m.agent || "assistant" : m.role;
  return h("li", { class: `msg ${m.role}` }, h("span", { class: "who" }, who),
    m.content ? h("p", {}, typeof m.content === "string" ? m.content : JSON.stringify(m.content)) : "", calls);
}

// How many messages the thread holds: `messages` answers by absolute index (across
// continue-as-new) and not with a total, so probe for the end in a few small requests.
async function count(base) {
  const has = async (i) => {
    const r = await request("GET", `${base}/messages?start=${i}&limit=1`);
    return r.ok && r.data.messages.length > 0;
  };
  let low = 0;
  let high = 1;
  while (await has(high - 1)) [low, high] = [high, high * 2];
  while (low < high) {
    const mid = Math.floor((low + high) / 2);
    if (await has(mid)) low = mid + 1;
    else high = mid;
  }
  return low;
}

export async function threadView(root, ctx, id) {
  const base = `/v1/threads/${enc(id)}`;
  const meta = h("p", { class: "muted", role: "status" });
  const earlier = h("button", { type: "button", hidden: true, onclick: () => loadEarlier() }, "Load earlier messages");
  const chat = h("ol", { class: "chat", "aria-label": "Conversation" });
  const streaming = h("li", { class: "msg assistant streaming", hidden: true, "data-state": "idle", "aria-live": "polite" });
  const waiting = h("div", { class: "cards" });
  const input = h("textarea", { id: "thread-input", rows: 3 });
  const sendResult = h("p", { class: "result", role: "status" });
  root.append(h("h1", { tabindex: -1 }, "Thread ", h("code", {}, id)), meta, earlier, chat, streaming, waiting,
    h("form", { class: "send", onsubmit: send },
      h("div", { class: "field" }, h("label", { for: input.id }, "Message"), input),
      h("button", { type: "submit" }, "Send"), sendResult));
  const status = await request("GET", base);
  if (!status.ok) return (meta.textContent = `Refused: ${status.error}`);
  meta.textContent = `Thread with ${status.data.agent}: ${status.data.status}`;
  let first = Math.max(0, (await count(base)) - PAGE);
  let next = first;
  async function page(start, limit) {
    const r = await request("GET", `${base}/messages?start=${start}${limit ? `&limit=${limit}` : ""}`);
    if (!r.ok) flash(`Messages: ${r.error}`, true);
    return r.ok ? r.data.messages : [];
  }
  async function loadEarlier() {
    const from = Math.max(0, first - PAGE);
    const older = await page(from, first - from);
    chat.prepend(...older.map(bubble));
    first = from;
    earlier.hidden = first === 0;
    flash(`Loaded ${older.length} earlier message(s).`);
  }
  let chain = Promise.resolve();
  function pull() {
    // One after another, so two pulls never append the same messages twice.
    chain = chain.then(async () => {
      const found = await page(next);
      chat.append(...found.map(bubble));
      next += found.length;
    });
    return chain;
  }
  async function send(event) {
    event.preventDefault();
    const content = input.value.trim();
    if (!content) return (sendResult.textContent = "Not sent: write a message first.");
    const r = await request("POST", `${base}/messages`, { content, wait: false });
    sendResult.textContent = r.ok ? "Sent; the answer streams below." : `Refused: ${r.error}`;
    sendResult.className = r.ok ? "result" : "result bad";
    if (r.ok) input.value = "";
  }
  await pull();
  earlier.hidden = first === 0;
  const cards = new Map();
  const calls = new Map();
  const renderCalls = () => sync(waiting, cards, [...calls.values()], (c) => c.key, (c) =>
    (c.question ? questionCard(base, c.question, status.data.agent) : callCard(base, c.call, status.data.agent)));
  const stream = follow(`${base}/stream`, (item) => {
    const t = item.type;
    if (t === "message_received") {
      streaming.dataset.state = "waiting";
      streaming.dataset.message = item.message_id || "";
      pull();
    } else if (t === "text_delta") {
      streaming.hidden = false;
      streaming.dataset.state = "streaming";
      streaming.append(item.text || "");
    } else if (t === "superseded" || t === "tool_call_started") {
      streaming.replaceChildren();
    } else if (t === "approval_requested") {
      calls.set(item.call_id, { key: item.call_id, call: { ...item, tool: item.name, requested_at: null } });
    } else if (t === "approval_decided") {
      calls.delete(item.call_id);
    } else if (t === "question_asked") {
      calls.set(item.question_id, { key: item.question_id, question: item });
    } else if (t === "question_answered") {
      calls.delete(item.question_id);
    } else if (t === "handed_off") {
      flash(`Handed off from ${item.from} to ${item.to}: ${item.reason || ""}`);
    } else if (t === "message_completed") {
      streaming.dataset.state = "done";
      if (item.error) flash(`The message failed: ${item.error}`, true);
      pull().then(() => {
        if (streaming.dataset.state !== "done") return;
        streaming.replaceChildren();
        streaming.hidden = true;
      });
    } else if (t === "thread_closed") {
      meta.textContent = `Thread with ${status.data.agent}: closed by ${item.closed_by || "someone"}`;
      return false;
    }
    renderCalls();
    return true;
  }, (s) => { if (s.error) meta.textContent = `Live updates: ${s.error}`; });
  ctx.cleanup.push(stream.stop);
}
