// The console: a router over hash routes, the header (who you are, the token box) and the inbox.
import { follow, request, token } from "./api.js";
import { runsView, runView } from "./runs.js";
import { threadsView, threadView } from "./threads.js";
import { callCard, enc, flash, h, questionCard, sync } from "./ui.js";

const view = document.getElementById("view");
const tokenBox = document.getElementById("token-box");
const tokenInput = document.getElementById("token-input");
let cleanup = [];

function showTokenBox(show) {
  tokenBox.hidden = !show;
  if (show) tokenInput.focus();
}

async function whoAmI() {
  const who = document.getElementById("who");
  const r = await request("GET", "/v1/me");
  if (!r.ok) {
    who.textContent = r.status === 401 ? "no token" : `error: ${r.error}`;
    return false;
  }
  const me = r.data;
  const agents = me.agents ? me.agents.join(", ") : "all agents";
  who.textContent = me.open ? "open server (no tokens)" : `${me.identity || "unnamed token"} · ${agents}`;
  document.getElementById("token-toggle").hidden = me.open;
  return true;
}

function inboxView(root, ctx) {
  const state = h("p", { class: "muted", role: "status" }, "Connecting…");
  const calls = h("div", { class: "cards" });
  const questions = h("div", { class: "cards" });
  const noCalls = h("p", { class: "muted" }, "No call waits for a decision.");
  const noQuestions = h("p", { class: "muted" }, "No question waits for an answer.");
  root.append(h("h1", { tabindex: -1 }, "Inbox"), state,
    h("h2", {}, "Calls waiting for a decision"), noCalls, calls,
    h("h2", {}, "Questions"), noQuestions, questions);
  const callNodes = new Map();
  const questionNodes = new Map();
  const stream = follow("/v1/inbox/stream", (data) => {
    const items = data.inbox || [];
    const asked = data.questions || [];
    sync(calls, callNodes, items, (e) => `${e.run_id}/${e.call.call_id}`, (e) => {
      const card = callCard(`/v1/runs/${enc(e.run_id)}`, e.call, e.agent);
      card.querySelector("h3").append(" in ", h("a", { href: `#/runs/${enc(e.run_id)}` }, e.run_id));
      return card;
    });
    sync(questions, questionNodes, asked, (q) => `${q.run_id}/${q.question.question_id}`, (q) => {
      const card = questionCard(`/v1/runs/${enc(q.run_id)}`, q.question, q.agent);
      card.querySelector("h3").append(" ", h("a", { href: `#/runs/${enc(q.run_id)}` }, q.run_id));
      return card;
    });
    noCalls.hidden = items.length > 0;
    noQuestions.hidden = asked.length > 0;
    state.textContent = `Live: ${items.length} call(s) and ${asked.length} question(s) waiting.`;
  }, (s) => {
    if (s.error) state.textContent = `Inbox stream: ${s.error}`;
    else if (s.retrying) state.textContent = "Reconnecting…";
  });
  ctx.cleanup.push(stream.stop);
}

async function route() {
  for (const stop of cleanup) stop();
  cleanup = [];
  const ctx = { cleanup };
  const [, name = "inbox", id] = location.hash.replace(/^#\/?/, "/").split("/").map(decodeURIComponent);
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === (name || "inbox")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  view.replaceChildren();
  if (name === "runs" && id) await runView(view, ctx, id);
  else if (name === "runs") await runsView(view, ctx);
  else if (name === "threads" && id) await threadView(view, ctx, id);
  else if (name === "threads") await threadsView(view, ctx);
  else inboxView(view, ctx);
  const heading = view.querySelector("h1");
  if (heading && document.activeElement === document.body) heading.focus();
}

tokenBox.addEventListener("submit", async (event) => {
  event.preventDefault();
  token.set(tokenInput.value.trim());
  tokenInput.value = "";
  if (await whoAmI()) {
    showTokenBox(false);
    flash("Token accepted.");
    route();
  } else {
    flash("That token was refused: the server answered 401.", true);
  }
});
document.getElementById("token-forget").addEventListener("click", () => {
  token.set("");
  flash("Token forgotten.");
  whoAmI();
  route();
});
document.getElementById("token-toggle").addEventListener("click", () => showTokenBox(tokenBox.hidden));
window.addEventListener("toren:unauthorized", () => showTokenBox(true));
window.addEventListener("hashchange", route);
whoAmI().then(route);
