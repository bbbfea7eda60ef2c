"""Kiln settings: the one place configuration is read. Every value comes from the environment,
read here once through django-environ (.env.example documents each); apps read django.conf.settings.
Importing this module writes nothing: `manage.py kiln_init` (run by `make up`) makes the data folders
and the generated secret key (portal/datadir.py)."""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import environ
from django.core.exceptions import ImproperlyConfigured

from portal.datadir import broker_dirs, credential_key_read, env_file, metrics_token_read, secret_key_read

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
# `make up`, `kiln web`, `kiln worker` and manage.py all start here: .env's values fill in what the
# environment leaves unset (never override it). A named file that is missing is an error, not a default.
_ENV_FILE = env_file(BASE_DIR, os.environ)
if _ENV_FILE is not None:
    if not _ENV_FILE.is_file():
        raise ImproperlyConfigured(f"KILN_ENV_FILE={_ENV_FILE} does not exist")
    environ.Env.read_env(str(_ENV_FILE), overwrite=False)

DATA_DIR = Path(env.str("KILN_DATA_DIR", default=str(BASE_DIR / "data"))).resolve()

DEBUG = env.bool("KILN_DEBUG", default=False)
# Embedded default: a random key generated once into the data directory by `manage.py kiln_init`,
# never a constant in git. Empty when neither exists: Django then refuses to use it, and the system
# check kiln.E001 says to run kiln_init (portal/datadir.py).
SECRET_KEY = env.str("KILN_SECRET_KEY", default="") or secret_key_read(DATA_DIR)

ALLOWED_HOSTS = [h.strip() for h in env.list("KILN_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"]) if h]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in env.list("KILN_CSRF_TRUSTED_ORIGINS", default=[]) if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "axes",  # login throttling: see "Web hardening" below
    # The core app: role groups (seeded after the last app's migrate) and the shared templates.
    "portal",
    "portal.inventory",
    "portal.facility",
    "portal.catalog",
    "portal.runs",
    "portal.execution",
    "portal.certificates",
    "portal.health",
    "portal.charts",
    "portal.history",
    # The REST API (portal/api) and its OpenAPI schema, docs pages and filters.
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from the app itself: no CDN
    "django_filters",
    "portal.api",
]
# The demo (portal/demo: `kiln demo`, the simulated cluster) needs the simulator (testbed/), which a
# checkout has and the production image leaves out: on where both are importable, unless KILN_DEMO says.
_DEMO_PRESENT = all(importlib.util.find_spec(name) is not None for name in ("testbed", "portal.demo"))
KILN_DEMO = env.bool("KILN_DEMO") if env.str("KILN_DEMO", default="") else _DEMO_PRESENT
if KILN_DEMO and not _DEMO_PRESENT:
    raise ImproperlyConfigured("KILN_DEMO=1, but this installation has no demo (it comes with a checkout of Kiln)")
if KILN_DEMO:
    INSTALLED_APPS.append("portal.demo")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "portal.middleware.ContentSecurityPolicyMiddleware",
    # Serves plotly.js, htmx and CSS from the app itself: air-gapped sites load nothing from a CDN.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    # Nothing above reads a request's body. A certificate verification takes its slots (429 over
    # the limit) before its upload is read; then 413 for a body over KILN_MAX_UPLOAD_MB, on its
    # Content-Length or as it streams (the next one parses forms).
    "portal.api.admission.VerificationAdmissionMiddleware",
    "portal.uploads.UploadLimitMiddleware",
    # 400 for a NUL, another control character or non-UTF-8 bytes in a path, parameter or form field.
    "portal.middleware.RejectUnreadableInputMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A write refused by the certified-evidence triggers answers 403 with the reason, not 500.
    "portal.certificates.middleware.CertifiedEvidenceMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "inventory:cluster_list"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],  # each app's own templates/, the shared ones in the core app's (portal/templates/)
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "portal.wsgi.application"

_database_url = env.str("DATABASE_URL", default="")
KILN_DATABASE_OWNER: dict[str, Any] | None = None
if _database_url:
    # Persistent connections (60 s: a worker or web process reuses one across tasks and requests),
    # checked before their first use in each request or task: a connection that PostgreSQL dropped
    # meanwhile (restart, failover, pg_terminate_backend, a pooler's idle timeout) is replaced
    # instead of failing the request with a 500. Writes of results also retry across a connection
    # lost mid-task (portal/runs/dbretry.py).
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60, conn_health_checks=True)}
    # The role that owns the tables: `migrate` (and so `kiln init`) connects as it, installs the
    # triggers and grants DATABASE_URL's role only what the portal needs (portal/dbroles.py). Unset:
    # one role does both, as in development and tests.
    _owner_url = env.str("KILN_DATABASE_OWNER_URL", default="")
    KILN_DATABASE_OWNER = dict(dj_database_url.parse(_owner_url)) if _owner_url else None
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(DATA_DIR / "kiln.sqlite3"),
            # Worker and web share one SQLite file: wait for locks instead of failing at once.
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("KILN_TIME_ZONE", default="UTC")
USE_I18N = False
USE_TZ = True
# ISO 8601 dates with the zone on every page, not Django's English "Dec. 1, 2026, 12:56 p.m."
FORMAT_MODULE_PATH = ["portal.formats"]

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
STATIC_ROOT = DATA_DIR / "static"  # made by collectstatic (and kiln_init)
# Serve straight from the app's static folders too, so a checkout works before collectstatic.
WHITENOISE_USE_FINDERS = True

# --- Celery -------------------------------------------------------------------------------------
_broker = env.str("CELERY_BROKER_URL", default="")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {}
if _broker:
    CELERY_BROKER_URL = _broker
else:
    # No-server default: kombu's filesystem transport. In and out must be the same folder; kiln_init
    # makes both folders.
    _queue, _control = broker_dirs(DATA_DIR)
    # A host in the URL, though the transport ignores it: without one kombu logs "No hostname was
    # supplied. Reverting to default 'localhost'" on every connection (kombu/connection.py _info),
    # which every `kiln_run` printed.
    CELERY_BROKER_URL = "filesystem://localhost/"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue),
        "data_folder_out": str(_queue),
        "control_folder": str(_control),
        "polling_interval": 0.05,
    }
# Kombu's filesystem transport loses a message a reader takes while it is still being written (and
# the worker then exits on JSONDecodeError): worker/fsbroker.py writes each message whole first.
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT = "worker.fsbroker:Transport"
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
# Where tasks go unless routed to a cluster's queue (Cluster.queue, portal/runs/queues.py), and
# what a plain `celery -A worker worker` (no -Q) or `kiln worker` without --queue consumes. Named
# "default" rather than Celery's "celery" so that a cluster's queue field can name it. A message
# left in "celery" by an older Kiln is not lost work: the reaper sends any queued check it cannot
# find in the broker again.
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# The worker's pool, read by a plain `celery -A worker worker` (Celery takes worker_pool and
# worker_concurrency from here when no --pool / --concurrency is given; an explicit --pool=prefork
# is overridden by this setting, a Celery quirk: use KILN_WORKER_POOL=prefork instead).
# Threads: a node task is seconds to hours of waiting on SSH around milliseconds of Python, so a
# thread per node is enough, where a prefork process per node cost ~60 MB each (64 slots: 3.9 GB
# PSS, measured). Celery time limits are not enforced on threads; what bounds a task instead is in
# worker/timeouts.py.
CELERY_WORKER_POOL = env.str("KILN_WORKER_POOL", default="threads")
# Nodes one worker process drives at once. 256: one worker runs a 256-node sweep in one wave, as
# pdsh and clush fan out to every node at once (64 ran it in four waves, each as long as the
# whole sweep; bench/bench_fanout.py --nodes 256). A node task is a thread waiting on SSH: the quick
# plan costs the worker ~0.2 s of CPU per node (SSH, parsing, recording; the bench prints it) and
# 256 of them ~450 MB of memory, under 4 database connections whatever the count (below). Past
# that the process's Python (one core under the GIL) is the limit: add worker processes
# (docs/operations/workers-and-sizing.md) rather than threads. Prefork: the CPU count.
CELERY_WORKER_CONCURRENCY = env.int(
    "KILN_WORKER_CONCURRENCY", default=256 if CELERY_WORKER_POOL in ("threads", "gevent", "eventlet") else 0
) or (os.cpu_count() or 1)
# Database connections one worker process holds at most, whatever its concurrency: node tasks do
# their database work in short phases (claim, record a result, close the run; ~2-20 ms each) and
# hand the connection back between them (worker/db.py). 4: one process runs Python on one core, so
# more phases at once do not finish sooner (bench_fanout at 64 nodes: 8 or 16 were no faster than
# 4); 15 worker processes then hold 60 of PostgreSQL's default max_connections=100 beside the web.
KILN_WORKER_DB_CONNECTIONS = env.int("KILN_WORKER_DB_CONNECTIONS", default=4)
# Slack, in seconds, between a node's summed command budgets and its task's soft time limit
# (connects, recording results). See worker/timeouts.py.
KILN_TASK_SLACK_S = env.int("KILN_TASK_SLACK_S", default=60)
# The port of the demo's Redfish facility service (`make up` starts it there: portal/demo/up.py).
KILN_DEMO_FACILITY_PORT = env.int("KILN_DEMO_FACILITY_PORT", default=8470)
# The broker must not redeliver a task while it is still legitimately running: the visibility
# timeout is the outermost of the nested timeouts. Default 25 h: a 24 h burn-in plus slack.
# It is also how long a task of a killed worker waits before another worker picks it up.
if CELERY_BROKER_URL.startswith("redis"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env.int("KILN_BROKER_VISIBILITY_TIMEOUT", default=25 * 3600)
    }
    # A worker looks for messages past that timeout only every ~100 s (kombu: every 10th of its 10 s
    # ticks), so a killed worker's task waits up to that much longer: nothing beside 25 h. Set
    # KILN_BROKER_RESTORE_S to look every that many seconds instead (a short timeout: the tests').
    if env.str("KILN_BROKER_RESTORE_S", default=""):
        CELERY_BROKER_TRANSPORT_OPTIONS |= {
            "unacked_restore_interval": env.int("KILN_BROKER_RESTORE_S"),
            "unacked_restore_throttle": 1,
        }

# --- Kiln ---------------------------------------------------------------------------------------
# Seconds to wait for an SSH TCP connect + handshake before calling a node unreachable.
KILN_SSH_CONNECT_TIMEOUT = env.float("KILN_SSH_CONNECT_TIMEOUT", default=10)
# Sub-runs (halves of a slow group, node pairs) run at once by localisation (checks/core/localise.py), from
# one SSH connection to the launcher: below OpenSSH's MaxSessions default of 10 sessions per
# connection (sshd_config(5)), with room to spare. The name is kept from when only pairs ran.
KILN_PAIR_PARALLELISM = env.int("KILN_PAIR_PARALLELISM", default=8)
# Characters of the display copy of a result's stdout/stderr (pages, exports): enough for a probe or
# a tool table, bounded. The exact bytes as read (worker/ssh.py caps those at 16 MiB per stream) are
# stored compressed beside it and downloadable (portal/runs/rawoutput.py).
KILN_OUTPUT_CAP = env.int("KILN_OUTPUT_CAP", default=262144)
# Most nodes one typed node set may name (forms, filters, commands); larger ones are refused before
# anything is expanded (portal/inventory/nodesets.py). 100,000 GPUs, the largest single clusters
# announced in 2024, at 8 GPUs per HGX node is 12,500 nodes; 20,000 leaves headroom. Expanding
# 20,000 names takes about 6 ms (bench/bench_nodeset.py).
KILN_MAX_NODESET = env.int("KILN_MAX_NODESET", default=20000)
# What runs on the portal and worker hosts is server configuration, never a form field
# (docs/security.md). The `local` transport runs a cluster's checks on the worker host itself (a
# single GPU server, the demo's simulated nodes): refused unless this is set (`make up` sets it).
KILN_ALLOW_LOCAL_TRANSPORT = env.bool("KILN_ALLOW_LOCAL_TRANSPORT", default=False)
# Scheduler hooks: the programs they run, and where: `ssh` (the controller host named in a
# cluster's health settings) or `local` (this worker host, where scontrol/kubectl are installed).
KILN_SCONTROL_PATH = env.str("KILN_SCONTROL_PATH", default="scontrol")
KILN_KUBECTL_PATH = env.str("KILN_KUBECTL_PATH", default="kubectl")
KILN_CONTROLLER_TRANSPORT = env.str("KILN_CONTROLLER_TRANSPORT", default="ssh")
# Liveness (portal/runs/leases.py, portal/execution/reaper.py, worker/keepalive.py). A running task's
# results hold a lease that one heartbeat thread per worker process renews in one UPDATE every
# KILN_HEARTBEAT_S; the same beat reads back which held results were cancelled, so 3 s leaves 7 s of
# the 10 s cancel bound for SIGTERM, its 5 s grace and SIGKILL.
KILN_HEARTBEAT_S = env.float("KILN_HEARTBEAT_S", default=3)
# A lease not renewed for this long means its worker is gone: 10 heartbeats, so a worker whose
# beats stall for up to ~25 s (a database restart or failover, a long pause) keeps its work. A dead
# worker's checks are acted on within TTL + one reaper interval: 60 s (the issue asks < 2 min).
KILN_LEASE_TTL_S = env.float("KILN_LEASE_TTL_S", default=30)
# Each worker writes "alive" (health.WorkerBeat, exported by /metrics) every 30 s even when idle: half
# of Prometheus' default 1 m scrape interval, so every scrape sees a fresh beat, and the example
# alert (deploy/prometheus/kiln-rules.yml, 2 min silent) waits out three missed beats.
KILN_WORKER_BEAT_S = env.float("KILN_WORKER_BEAT_S", default=30)
if KILN_LEASE_TTL_S < 3 * KILN_HEARTBEAT_S:
    raise ImproperlyConfigured("KILN_LEASE_TTL_S must be at least 3 x KILN_HEARTBEAT_S (a few missed beats)")
# How often the reaper runs (a thread in each worker and in beat, portal/execution/reaping.py): with
# the 30 s lease, a lost worker is acted on 30-60 s after its last heartbeat, busy slots or not.
# A queued check nobody claimed this long after its task was sent is looked for in the broker and
# sent again when the broker no longer holds it (Redis flushed or restarted). 60 s: a worker with a
# free slot claims a delivered message within seconds, and 60 s + one reaper interval (30 s) sends
# a lost message again within 90 s of its loss, inside the 2 min a dead worker's run gets. A long
# queue behind busy workers is recognised as such, not re-sent.
KILN_LOST_MESSAGE_S = env.float("KILN_LOST_MESSAGE_S", default=60)
# SSH keepalives while a command runs: a request every KILN_SSH_KEEPALIVE_S of silence, and the
# connection is dead after KILN_SSH_KEEPALIVE_COUNT intervals without a reply: ssh(1)'s
# ServerAliveInterval / ServerAliveCountMax (CountMax defaults to 3 there too). A frozen sshd is
# noticed within 5 + 3 x 5 = 20 s, and one check's wait, not every check's timeout, is lost.
KILN_SSH_KEEPALIVE_S = env.float("KILN_SSH_KEEPALIVE_S", default=5)
KILN_SSH_KEEPALIVE_COUNT = env.int("KILN_SSH_KEEPALIVE_COUNT", default=3)

# --- Retention (portal/runs/retention.py, docs/operations/retention.md) ---------------------
# Days a finished run keeps its raw output (the compressed bytes behind the download; the display
# copy is cut to an excerpt) and its full-resolution telemetry (the charts' 1,500-point view stays).
# 90: a quarter outlasts an acceptance campaign (weeks from first run to certificate,
# re-runs included) and leaves time to re-parse old outputs after a parser fix. 0 or empty: keep.
# Runs in a campaign, certified or not, and runs still active are never touched.
KILN_RETENTION_RAW_OUTPUT_DAYS = env.int("KILN_RETENTION_RAW_OUTPUT_DAYS", default=90) or None
KILN_RETENTION_TELEMETRY_DAYS = env.int("KILN_RETENTION_TELEMETRY_DAYS", default=90) or None
# Characters of each display copy (stdout, stderr) kept once the raw output is gone: 4,096, what a
# terminal shows on about two screens (80 x 25 each); head 3/4 and tail 1/4 like the display cut.
KILN_RETENTION_OUTPUT_EXCERPT = env.int("KILN_RETENTION_OUTPUT_EXCERPT", default=4096)
# Months of measurements kept; empty (the default): forever (history and trends
# read them). When set, whole month partitions older than that are dropped on PostgreSQL, never
# one holding a certified or campaign result or an active run's (portal/runs/partitions.py).
KILN_RETENTION_MEASUREMENT_MONTHS = env.int("KILN_RETENTION_MEASUREMENT_MONTHS", default=0) or None
# Rows one retention transaction changes at most. Measured on the 2-core CI machine (busy): 1,000
# results each with a full 256 KiB display copy and 52 KB of raw output took 6.4 s to expire, 1,000
# 4,500-point series 4 s to thin; 200 keeps a worst-case transaction near a second. Only old, finished
# rows are locked, which nothing else writes.
KILN_RETENTION_BATCH = env.int("KILN_RETENTION_BATCH", default=200)
# Monthly measurement partitions made ahead of time: 3, so a missed month or two of the daily task
# still finds its partition (anything else lands in the DEFAULT partition, never lost).
KILN_RETENTION_PARTITIONS_AHEAD = env.int("KILN_RETENTION_PARTITIONS_AHEAD", default=3)
# When the daily task runs (cron, UTC): 03:30, the quiet hour most sites schedule maintenance in, and
# clear of midnight's log rotation and backups.
KILN_RETENTION_CRON = env.str("KILN_RETENTION_CRON", default="30 3 * * *")

# --- Health, alerts, metrics (portal/health/conf.py reads these) --------------------------------
# Bearer token for /metrics (Prometheus). The environment wins; else the token `manage.py kiln_init`
# generated into the data folder (`make up` prints it); neither: /metrics answers 403.
KILN_METRICS_TOKEN = env.str("KILN_METRICS_TOKEN", default="").strip() or metrics_token_read(DATA_DIR)
# Each node's per-GPU values on every scrape (off: only with ?detail=1 on a one-cluster scrape). Off by
# default: they are ~150 series and ~13 KB per 8-GPU node, 170 MB at 12,500 nodes, where health and the
# per-cluster aggregates are ~2 series per node (docs/operations/monitoring.md).
KILN_METRICS_DETAIL = env.bool("KILN_METRICS_DETAIL", default=False)
# Sender of alert e-mails; empty: DEFAULT_FROM_EMAIL.
KILN_ALERT_FROM_EMAIL = env.str("KILN_ALERT_FROM_EMAIL", default="")
# Delivery attempts per alert before it is `failed`, and the first retry delay (doubling, capped at
# 1 h): 5 attempts from 30 s span ~15 min, enough to ride out a mail relay or webhook restart.
KILN_ALERT_MAX_ATTEMPTS = env.int("KILN_ALERT_MAX_ATTEMPTS", default=5)
KILN_ALERT_RETRY_BASE_S = env.float("KILN_ALERT_RETRY_BASE_S", default=30)
# Webhook POST timeout: 10 s, the default of most webhook senders (GitHub, Alertmanager).
KILN_WEBHOOK_TIMEOUT_S = env.float("KILN_WEBHOOK_TIMEOUT_S", default=10)
# Base URL put in alerts, e.g. https://kiln.example.org (empty: no link).
KILN_PORTAL_URL = env.str("KILN_PORTAL_URL", default="")
# The reaper runs every 30 s (in its own threads, never a pool slot): with the 30 s lease TTL a dead
# worker's checks are acted on within a minute. Grace past a result's hard time limit (120 s: a slow
# final write), and how long a result may wait `queued` on top of its run's limits (6 h: a full
# queue behind long burn-ins).
KILN_REAPER_INTERVAL_S = env.int("KILN_REAPER_INTERVAL_S", default=30)
KILN_REAPER_GRACE_S = env.float("KILN_REAPER_GRACE_S", default=120)
KILN_REAPER_QUEUE_ALLOWANCE_S = env.float("KILN_REAPER_QUEUE_ALLOWANCE_S", default=6 * 3600)
# Recent results the "at risk" trend rule looks at (5; at least 3 for a trend to mean anything).
KILN_HEALTH_TREND_SWEEPS = env.int("KILN_HEALTH_TREND_SWEEPS", default=5)
# One scontrol/kubectl call's timeout (30 s: both answer in well under a second when healthy), and
# attempts of one drain/resume with its first retry delay: 5 attempts, 30 s doubling, span ~15 min,
# enough to ride out a slurmctld/API-server restart or failover.
KILN_SCHEDULER_HOOK_TIMEOUT_S = env.float("KILN_SCHEDULER_HOOK_TIMEOUT_S", default=30)
KILN_SCHEDULER_HOOK_MAX_ATTEMPTS = env.int("KILN_SCHEDULER_HOOK_MAX_ATTEMPTS", default=5)
KILN_SCHEDULER_HOOK_RETRY_BASE_S = env.float("KILN_SCHEDULER_HOOK_RETRY_BASE_S", default=30)

# --- Facility (portal/facility/credentials.py reads this) ---------------------------------------
# Fernet key(s) sealing PDU/CDU endpoint credentials at rest. Empty: the one `manage.py kiln_init`
# generated into KILN_DATA_DIR/credential_key. Comma-separated to rotate: the first seals, all open.
KILN_CREDENTIAL_KEY = env.str("KILN_CREDENTIAL_KEY", default="") or credential_key_read(DATA_DIR)

# --- Certificates -------------------------------------------------------------------------------
# Folder of the site's signing keys; empty: DATA_DIR/keys (portal/certificates/keys.py).
KILN_KEY_DIR = env.str("KILN_KEY_DIR", default="")
# RFC 3161 timestamp authority (portal/certificates/signing.py): empty signs with the portal's clock
# only. When set, every certificate's PDF signature carries the TSA's timestamp, or is not issued.
KILN_TSA_URL = env.str("KILN_TSA_URL", default="")
# PEM file of the CA certificate(s) the TSA's certificate chains to: what makes its time trusted, at
# issuing and in `kiln verify`. Keep a former TSA's root in the file: older certificates carry its time.
KILN_TSA_CA = env.str("KILN_TSA_CA", default="")
# Seconds to wait for the TSA: public TSAs answer in well under a second; 10 s rides out a slow link
# and still fails the issuing task long before its 1-hour limit.
KILN_TSA_TIMEOUT_S = env.float("KILN_TSA_TIMEOUT_S", default=10)
# Static charts in the PDF (plotly -> SVG through kaleido and Chromium); off leaves them out. 60 s
# per certificate's charts: a 1,250-node certificate's charts render in a few seconds.
KILN_CERT_CHARTS = env.bool("KILN_CERT_CHARTS", default=True)
KILN_CERT_CHART_TIMEOUT_S = env.float("KILN_CERT_CHART_TIMEOUT_S", default=60)
# Chromium for the charts; empty: looked up on PATH.
BROWSER_PATH = env.str("BROWSER_PATH", default="")
# Limits of the child process that verifies an uploaded PDF (portal/certificates/sandbox.py). A
# 1,250-node certificate verifies in ~1 s and ~300 MB (bench/bench_certificate.py): these leave a
# wide margin and still stop a decompression bomb or a parser loop long before it hurts the host.
KILN_VERIFY_MEMORY_MB = env.int("KILN_VERIFY_MEMORY_MB", default=2048)
KILN_VERIFY_CPU_S = env.int("KILN_VERIFY_CPU_S", default=120)
KILN_VERIFY_WALL_S = env.float("KILN_VERIFY_WALL_S", default=180)
# Verifications at once (portal/certificates/slots.py), for the whole site and per user; more answer
# 429 with Retry-After. Each holds a web thread and a child of up to KILN_VERIFY_MEMORY_MB: 2 at once
# leave 6 of `make up`'s 8 request threads (2 workers x 4 threads, portal/cli/main.py) and 14 of
# docker-compose's 16 to every other page, and cap the children at 2 x 2 GB. One per user: a person
# verifies one file at a time; a script that sends more waits its turn.
KILN_VERIFY_CONCURRENCY = env.int("KILN_VERIFY_CONCURRENCY", default=2)
KILN_VERIFY_PER_USER = env.int("KILN_VERIFY_PER_USER", default=1)
# The Retry-After of that 429: a 1,250-node certificate verifies in ~1 s (bench/bench_certificate.py),
# so a slot is usually free again within a few seconds.
KILN_VERIFY_RETRY_AFTER_S = env.int("KILN_VERIFY_RETRY_AFTER_S", default=5)
# The public verify page (no login: a customer without an account checks a certificate there).
# Its verifications at once, for every anonymous client together, taken from the site's
# KILN_VERIFY_CONCURRENCY: 1 of the 2 leaves logged-in users at least one slot whatever the public
# sends. 0 turns the public page off (404).
KILN_VERIFY_PUBLIC_CONCURRENCY = env.int("KILN_VERIFY_PUBLIC_CONCURRENCY", default=1)
# Public uploads per client address per hour (portal/middleware.py client_ip, so behind proxies set
# KILN_PROXY_COUNT). Conservative default; tune per site: a customer checks a handful of certificates,
# and 30 leaves room for a script that re-checks a delivery's set, while one address can hold the
# public slot for at most 30 x KILN_VERIFY_WALL_S of an hour only if every file is a parser bomb.
KILN_VERIFY_PUBLIC_PER_HOUR = env.int("KILN_VERIFY_PUBLIC_PER_HOUR", default=30)
# The address customers reach the portal at (https://kiln.example.com): each certificate's last page
# prints it with the public verify page's path. Empty: that line is left out (the portal cannot know
# the name it is reached by from outside).
KILN_PUBLIC_URL = env.str("KILN_PUBLIC_URL", default="").strip().rstrip("/")
if KILN_PUBLIC_URL and not KILN_PUBLIC_URL.startswith(("https://", "http://")):
    raise ImproperlyConfigured(f"KILN_PUBLIC_URL={KILN_PUBLIC_URL!r} must start with https:// (or http://)")
# The largest file upload any page or the API accepts (the verify page's certificate, the facility
# CSV): bench/bench_certificate.py holds a 12,500-node certificate under 50 MB. A request body over it plus
# DATA_UPLOAD_MAX_MEMORY_SIZE (Django's 2.5 MB for the other fields) is refused with 413 on its
# Content-Length before a byte is read, and a file that grows past it while it streams is refused
# there (portal/uploads.py).
KILN_MAX_UPLOAD_MB = env.int("KILN_MAX_UPLOAD_MB", default=50)
FILE_UPLOAD_HANDLERS = [
    "portal.uploads.UploadLimitHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

# --- Email (alerts) -------------------------------------------------------------------------------
EMAIL_BACKEND = env.str("KILN_EMAIL_BACKEND", default="django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env.str("KILN_EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("KILN_EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("KILN_EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("KILN_EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("KILN_EMAIL_USE_TLS", default=False)
DEFAULT_FROM_EMAIL = env.str("KILN_DEFAULT_FROM_EMAIL", default="kiln@localhost")

# --- Web hardening (docs/security.md, "Web hardening") ----------------------------------------------
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# KILN_HTTPS=1: the portal is reached over HTTPS only. Cookies are sent over HTTPS only, plain HTTP
# is redirected, and browsers are told to use HTTPS for the next year (HSTS).
KILN_HTTPS = env.bool("KILN_HTTPS", default=False)
# Behind a proxy that terminates TLS, Django sees plain HTTP: set KILN_TRUST_PROXY_SSL_HEADER=1 so
# that `X-Forwarded-Proto: https` marks a request secure (without it, SECURE_SSL_REDIRECT redirects
# forever). Only when the proxy sets or strips that header on every request: a client that reaches
# the portal directly, or through a proxy that passes the header on, could claim HTTPS with it.
KILN_TRUST_PROXY_SSL_HEADER = env.bool("KILN_TRUST_PROXY_SSL_HEADER", default=False)
if KILN_TRUST_PROXY_SSL_HEADER:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if KILN_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    # One year (31536000 s): the shortest max-age hstspreload.org accepts, and the OWASP HTTP Strict
    # Transport Security Cheat Sheet's example (max-age=31536000; includeSubDomains).
    SECURE_HSTS_SECONDS = env.int("KILN_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("KILN_HSTS_INCLUDE_SUBDOMAINS", default=True)
    # Preloading puts the domain in the browsers' built-in HSTS lists, which is the site owner's
    # decision to submit (hstspreload.org) and hard to undo; internal names cannot be preloaded. Off
    # unless asked for, and Django's reminder (security.W021) is silenced for that reason.
    SECURE_HSTS_PRELOAD = env.bool("KILN_HSTS_PRELOAD", default=False)
    if not SECURE_HSTS_PRELOAD:
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
# Content-Security-Policy (portal/middleware.py). Everything is served by the app itself (air-gapped
# sites): no CDN, no inline script, no eval. The exceptions, each needed by what the pages run:
#   style-src 'unsafe-inline': plotly.js adds <style> rules (modebar, hover labels) and style
#     attributes to its SVG at run time, htmx adds its indicator rule, and the templates use style
#     attributes. Styles cannot run script; injecting markup at all would need an escaping bug.
#   img-src data: blob:: plotly draws heatmaps into data: images, and "download plot" uses a blob.
KILN_CSP: dict[str, list[str]] = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:", "blob:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
if KILN_HTTPS:
    KILN_CSP["upgrade-insecure-requests"] = []

# --- REST API (portal/api) -------------------------------------------------------------------------
# Token or session authentication, the pages' roles, JSON only (no browsable API: its pages would
# need inline script), NetBox-style limit/offset pages, django-filter and ?ordering=.
REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",  # the browser; enforces CSRF on writes
    ],
    "DEFAULT_PERMISSION_CLASSES": ["portal.api.permissions.RolePermission"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["portal.api.parsers.StrictJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pagination",
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exceptions.api_exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        # Token endpoints, per user: 30 a minute. Creating and revoking tokens is a rare human act;
        # a client at this rate is a script gone wrong or someone probing.
        "tokens": env.str("KILN_API_TOKEN_RATE", default="30/minute"),
    },
}
SPECTACULAR_SETTINGS: dict[str, Any] = {
    "TITLE": "Kiln REST API",
    "DESCRIPTION": (
        "Clusters, nodes, plans, runs and their results, campaigns, certificates, health and schedules.\n\n"
        "Authenticate with `Authorization: Token <secret>` (or `Bearer <secret>`): create a token on the "
        "API tokens page or with `kiln user token USERNAME`. Roles are the pages': viewer reads, "
        "operator writes inventory and runs, approver waives.\n\n"
        "**There is no signing endpoint.** Signing off a certificate stays a human action of an approver "
        "in the browser, so a leaked API token can never sign a certificate."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",  # served by the app itself: air-gapped sites load nothing from a CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "HealthStateEnum": "portal.health.models.HealthState",
        "ResultStatusEnum": "portal.runs.models.Status",
    },
}

# Login throttling (django-axes): failures are counted per (username, client address); after
# KILN_LOGIN_FAILURE_LIMIT in a row that pair is locked out for KILN_LOGIN_COOLOFF_MINUTES, and a
# success resets the count. 10 and 30 min: PCI DSS v4.0 requirement 8.3.4 (lock out after not more
# than 10 invalid attempts, for at least 30 minutes); NIST SP 800-63B section 5.2.2 allows at most
# 100 consecutive failures per account. Unlock early: `manage.py axes_reset_username NAME`, or
# delete the attempt in the admin (Axes > Access attempts).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("KILN_LOGIN_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("KILN_LOGIN_COOLOFF_MINUTES", default=30))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False  # no banner on every manage.py command; lockouts are still logged (warning)
# The client address: REMOTE_ADDR, or behind KILN_PROXY_COUNT proxies that each append to
# X-Forwarded-For, the address the outermost one saw (portal/middleware.py). 0 without a proxy: a
# client could otherwise write any address into the header and never be locked out.
KILN_PROXY_COUNT = env.int("KILN_PROXY_COUNT", default=0)
AXES_CLIENT_IP_CALLABLE = "portal.middleware.client_ip"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("KILN_LOG_LEVEL", default="INFO")},
}

if DATABASES["default"]["ENGINE"].endswith("sqlite3") and env.bool("KILN_REQUIRE_POSTGRES", default=False):
    raise ImproperlyConfigured("KILN_REQUIRE_POSTGRES is set but DATABASE_URL is empty")
