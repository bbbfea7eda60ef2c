#!/usr/bin/env bash
# Print how Prometheus scrapes this Kiln: the /metrics bearer token, a curl line and a scrape config
# to paste. Called by scripts/up.sh (`make up`) after kiln_init; tests/health/test_metrics_token.py runs it.
# The token: KILN_METRICS_TOKEN when set (the settings prefer it), else the one kiln_init generated
# into the data folder, which the scrape config then reads from its file.
set -euo pipefail
HOST="${1:-127.0.0.1}"
PORT="${2:-8000}"
TOKEN_FILE="${KILN_DATA_DIR:-data}/metrics_token"
if [ -n "${KILN_METRICS_TOKEN:-}" ]; then
  TOKEN="$KILN_METRICS_TOKEN"
  CREDENTIALS="credentials: '<your KILN_METRICS_TOKEN>'"
else
  TOKEN="$(cat "$TOKEN_FILE")"
  CREDENTIALS="credentials_file: $(realpath "$TOKEN_FILE")"
fi
cat <<EOF

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
EOF
