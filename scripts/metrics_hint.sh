#!/usr/bin/env bash
# Print how Prometheus scrapes this Kiln: the /metrics bearer token, a curl line and a scrape config
# to paste. `make up` (portal/cli/up.py) runs it after kiln_init; tests/health/test_metrics_token.py too.
# The token is the settings' (KILN_METRICS_TOKEN from the environment or .env, else the one kiln_init
# generated into the data folder, which the scrape config then reads from its file).
set -euo pipefail
HOST="${1:-127.0.0.1}"
PORT="${2:-8000}"
BIN="${BIN:-.venv/bin}"
mapfile -t found < <("$BIN/python" - <<'PY'
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
from django.conf import settings

from portal.datadir import METRICS_TOKEN_FILE, metrics_token_read

token = settings.KILN_METRICS_TOKEN
print(token)
print(settings.DATA_DIR / METRICS_TOKEN_FILE if token and token == metrics_token_read(settings.DATA_DIR) else "")
PY
)
TOKEN="${found[0]:-}"
TOKEN_FILE="${found[1]:-}"
if [ -z "$TOKEN" ]; then
  echo "Prometheus: /metrics is off (no token): run 'manage.py kiln_init' or set KILN_METRICS_TOKEN."
  exit 0
fi
if [ -n "$TOKEN_FILE" ]; then
  CREDENTIALS="credentials_file: $TOKEN_FILE"
else
  CREDENTIALS="credentials: '<your KILN_METRICS_TOKEN>'"
fi
cat <<HINT

Prometheus: /metrics takes the bearer token $TOKEN
  curl -H 'Authorization: Bearer $TOKEN' http://$HOST:$PORT/metrics
Scrape config for prometheus.yml (deploy/prometheus/ has a full example and the alert rules,
deploy/grafana/kiln-dashboard.json the dashboard):
  scrape_configs:
    - job_name: kiln
      metrics_path: /metrics
      authorization:
        type: Bearer
        $CREDENTIALS
      static_configs:
        - targets: ['$HOST:$PORT']
HINT
