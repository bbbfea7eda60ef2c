#!/usr/bin/env bash
# Start web, worker, beat and the demo's facility service on the embedded default (SQLite + filesystem broker) in the foreground.
# Ctrl-C stops all three. Called by `make up` after migrate and kiln_demo.
set -euo pipefail
HOST="${1:-127.0.0.1}"
PORT="${2:-8000}"
BIN=".venv/bin"
# The demo's simulated nodes run on the local transport (commands on this host), which Kiln refuses
# unless the server allows it (docs/security.md). `make up` is the single-host demo: allow it here.
export KILN_ALLOW_LOCAL_TRANSPORT="${KILN_ALLOW_LOCAL_TRANSPORT:-1}"
# The data directory as the settings see it (environment, else .env, else ./data).
DATA_DIR="$("$BIN/python" -c 'import os; os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
from django.conf import settings; print(settings.DATA_DIR)')"
LOG_DIR="$DATA_DIR/logs"
mkdir -p "$LOG_DIR"

pids=()
cleanup() {
  trap '' INT TERM  # a second Ctrl-C does not cut the stopping short
  trap - EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
# Ctrl-C (a SIGINT to the whole group) or a TERM is how the demo stops: exit 0 once the children are
# stopped, so make reports no "Error 130/143" (the Makefile execs this script: no shell in between).
trap 'cleanup; exit 0' INT TERM
trap cleanup EXIT

# The demo's PDUs and CDU (Redfish, readings that follow the simulated nodes' load), for the heat soak
# and the capacity page: kiln_demo wrote its config (portal/facility/demo.py).
DEMO_DIR="$DATA_DIR/demo"
"$BIN/python" -m testbed.sim.redfish_facility --config "$DEMO_DIR/facility.json" --state-dir "$DEMO_DIR/nodes" \
  --port "${KILN_DEMO_FACILITY_PORT:-8470}" >"$LOG_DIR/facility.log" 2>&1 &
pids+=($!)

# The settings' pool: threads, KILN_WORKER_CONCURRENCY node tasks at once (portal/settings.py).
"$BIN/celery" -A worker worker --loglevel=INFO >"$LOG_DIR/worker.log" 2>&1 &
pids+=($!)
"$BIN/celery" -A worker beat --loglevel=INFO >"$LOG_DIR/beat.log" 2>&1 &
pids+=($!)
"$BIN/gunicorn" portal.wsgi:application --bind "$HOST:$PORT" --workers 2 --threads 4 --access-logfile - \
  >"$LOG_DIR/web.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 50); do
  if "$BIN/python" - "$HOST" "$PORT" <<'PY' 2>/dev/null; then break; fi
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5).close()
PY
  sleep 0.2
done

"$BIN/python" manage.py kiln_demo --soak || echo "(the demo heat soak was not queued; see above)"
echo
echo "Kiln is running at http://$HOST:$PORT/"
"$BIN/python" manage.py kiln_admin
echo "The demo cluster is at http://$HOST:$PORT/clusters/demo/ (start a run with 'Start a run')."
echo "Capacity (power and cooling): http://$HOST:$PORT/clusters/demo/capacity/ once the demo heat soak is done."

# How Prometheus scrapes this Kiln: the token, a curl line, a scrape config.
bash scripts/metrics_hint.sh "$HOST" "$PORT"
echo "Logs: $LOG_DIR/{web,worker,beat,facility}.log. Press Ctrl-C to stop."
wait -n "${pids[@]}"
