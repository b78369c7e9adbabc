// The HTTP API: JSON requests and Server-Sent Events, both with the bearer token.
// EventSource cannot send an Authorization header, so streams are read with fetch().

const KEY = "toren.token";

export const token = {
  get: () => sessionStorage.getItem(KEY) || "",
  set: (value) => (value ? sessionStorage.setItem(KEY, value) : sessionStorage.removeItem(KEY)),
};

function headers(extra = {}) {
  const out = { ...extra };
  const t = token.get();
  if (t) out.Authorization = `Bearer ${t}`;
  return out;
}

export function errorText(status, data) {
  const message = data && typeof data.error === "string" ? data.error : `HTTP ${status}`;
  return data && data.field ? `${message} (field: ${data.field})` : message;
}

// A 401 asks for a token, unless the request went out with a token since replaced.
function unauthorized(status, sent) {
  if (status === 401 && (sent.Authorization || "") === (headers().Authorization || "")) {
    window.dispatchEvent(new Event("toren:unauthorized"));
  }
}

// One API call: {ok, status, data, error}. `error` is the API's own `error` text.
export async function request(method, path, body) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    return { ok: false, status: 0, data: null, error: `the server did not answer (${err.message})` };
  }
  const data = await res.json().catch(() => null);
  unauthorized(res.status, init.headers);
  if (!res.ok) return { ok: false, status: res.status, data, error: errorText(res.status, data) };
  return { ok: true, status: res.status, data };
}

function parseBlock(block) {
  const event = { data: undefined, id: undefined };
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "data") data.push(value);
    else if (field === "id") event.id = value;
  }
  if (data.length) event.data = data.join("\n");
  return event;
}

// Follow an SSE endpoint: `onItem(item)` per event (return false to stop), `onState({live |
// error | retrying})` as the connection changes. After a drop it reconnects with Last-Event-ID,
// so nothing is missed and nothing comes twice. Returns {stop()}.
export function follow(path, onItem, onState = () => {}) {
  const abort = new AbortController();
  let lastId = null;
  let stopped = false;
  const stop = () => {
    stopped = true;
    abort.abort();
  };
  (async () => {
    let delay = 500;
    while (!stopped) {
      try {
        const extra = { Accept: "text/event-stream" };
        if (lastId !== null) extra["Last-Event-ID"] = lastId;
        const sent = headers(extra);
        const res = await fetch(path, { headers: sent, signal: abort.signal });
        if (!res.ok) {
          const data = await res.json().catch(() => null);
          unauthorized(res.status, sent);
          onState({ error: errorText(res.status, data), status: res.status });
          if (res.status >= 400 && res.status < 500) return; // refused: retrying will not help
        } else {
          onState({ live: true });
          delay = 500;
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buffer = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buffer += value;
            let end;
            while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
              const event = parseBlock(buffer.slice(0, end));
              buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
              if (event.id !== undefined) lastId = event.id;
              if (event.data === undefined) continue;
              let item;
              try {
                item = JSON.parse(event.data);
              } catch {
                continue;
              }
              if (onItem(item) === false) return stop();
            }
          }
        }
      } catch (err) {
        if (stopped) return;
        onState({ error: `connection lost (${err.message})` });
      }
      if (stopped) return;
      onState({ retrying: true });
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10000);
    }
  })();
  return { stop };
}
