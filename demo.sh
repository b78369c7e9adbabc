#!/usr/bin/env bash
# Set everything up and run the demo agent end to end:
#   venv + toren + the `temporal` CLI, the dev server (Web UI on :8233), a worker, and one run
#   of examples/support that looks an order up, parks on a refund approval, and finishes when
#   you approve it (the console at http://localhost:8000/, the Web UI, or `toren approve` in
#   another terminal).
#
# Without a terminal (or with DEMO_AUTO_APPROVE=1) the script approves the refund itself after a
# few seconds, so it also runs unattended. The model is the scripted mock unless OPENAI_API_KEY
# or ANTHROPIC_API_KEY is set.
#
# TEMPORAL_DEV_PORT (gRPC, default 7233) and TEMPORAL_DEV_UI_PORT (Web UI, default 8233) move the
# dev server; the worker, the run and every command printed here use the ports it started.
# DEMO_SKIP_INSTALL=1 skips the pip install into an .venv that is already set up.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [[ ! -x .venv/bin/python ]]; then
  echo "==> creating .venv with $python"
  "$python" -m venv .venv
fi
if [[ "${DEMO_SKIP_INSTALL:-}" != 1 ]]; then
  echo "==> installing toren and its dev tools into .venv"
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
fi

port="${TEMPORAL_DEV_PORT:-7233}"
ui_port="${TEMPORAL_DEV_UI_PORT:-8233}"
echo "==> starting the Temporal dev server (gRPC 127.0.0.1:$port, Web UI $ui_port)"
./temporal-dev.sh
# The worker, the run and the auto-approver talk to the server just started, never to
# whatever else listens on 7233.
export TEMPORAL_ADDRESS="127.0.0.1:$port"
# `toren run` prints its Web UI link from this.
export TOREN_UI_URL="${TOREN_UI_URL:-http://localhost:$ui_port}"
# What a second terminal needs in front of a command to reach this server: `toren` lives in
# .venv/bin, which is not on the PATH (`source .venv/bin/activate` puts it there).
env_prefix=""
stop_prefix=""
if [[ $port != 7233 ]]; then
  env_prefix="TEMPORAL_ADDRESS=$TEMPORAL_ADDRESS "
  stop_prefix="TEMPORAL_DEV_PORT=$port "
fi
toren_cmd="$env_prefix.venv/bin/toren"

if [[ -n "${OPENAI_API_KEY:-}" ]]; then
  model="openai/${DEMO_OPENAI_MODEL:-gpt-4o-mini}"
elif [[ -n "${ANTHROPIC_API_KEY:-}" ]]; then
  model="anthropic/${DEMO_ANTHROPIC_MODEL:-claude-3-5-haiku-latest}"
else
  model="mock/scripted"
fi
echo "==> model: $model$([[ $model == mock/* ]] && echo ' (set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one)')"

# The tools read this through ctx.env; it stays in the worker's environment, never in history.
export SUPPORT_DESK_TOKEN="${SUPPORT_DESK_TOKEN:-demo-desk-token}"
mkdir -p .toren
.venv/bin/toren worker examples/support --model "$model" >.toren/demo-worker.log 2>&1 &
worker=$!
# The console (toren serve) on loopback, open: this machine's user approves from the browser.
console_port="${TOREN_CONSOLE_PORT:-8000}"
console=""
if .venv/bin/python -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $console_port)) == 0)"; then
  env -u TOREN_WEB_TOKENS .venv/bin/toren serve --host 127.0.0.1 --port "$console_port" \
    >.toren/demo-console.log 2>&1 &
  console=$!
else
  echo "==> port $console_port is taken: no console (TOREN_CONSOLE_PORT=8010 ./demo.sh picks another)"
fi
trap 'kill $worker $console 2>/dev/null || true' EXIT

run_id="support-demo-$(date +%s)"
if [[ ! -t 0 || "${DEMO_AUTO_APPROVE:-}" == 1 ]]; then
  (
    for _ in $(seq 1 120); do
      call=$(.venv/bin/toren pending "$run_id" --json 2>/dev/null \
        | .venv/bin/python -c 'import json,sys; c=json.load(sys.stdin); print(c[0]["call_id"] if c else "")' \
        2>/dev/null || true)
      if [[ -n "$call" ]]; then
        sleep 3
        echo "==> (no terminal: approving $call as demo-script)"
        .venv/bin/toren approve "$run_id" "$call" --by demo-script --comment "auto-approved by demo.sh"
        exit 0
      fi
      sleep 0.5
    done
  ) &
fi

if [[ -n "$console" ]]; then
  echo "==> when the run waits, approve it in the console: http://localhost:$console_port/"
  echo "    (the Inbox), or in the Web UI (see docs/guides/approvals.md),"
  echo "    or from another terminal in $PWD with:"
else
  echo "==> run $run_id; when it waits, approve from another terminal in $PWD with:"
fi
echo "      $toren_cmd pending $run_id"
echo "      $toren_cmd approve $run_id CALL_ID --by you"
echo "    (\`toren\` below means .venv/bin/toren; \`source .venv/bin/activate\` puts it on the PATH)"
.venv/bin/toren run examples/support "Order A-1001 arrived broken. Please refund it." --id "$run_id"
echo
echo "==> the run as an event log:   $toren_cmd events $run_id"
echo "==> in the Web UI:             http://localhost:$ui_port/namespaces/default/workflows/$run_id"
echo "==> stop the dev server with:  ${stop_prefix}./temporal-dev.sh stop"
