"""Kiln settings. Everything comes from the environment; see .env.example."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in ("1", "true", "yes", "on")


DATA_DIR = Path(os.environ.get("KILN_DATA_DIR", BASE_DIR / "data")).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("KILN_DEBUG", False)
_secret = os.environ.get("KILN_SECRET_KEY", "")
if not _secret:
    # Embedded default: a random key generated once into the data directory, never a constant in git.
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        import secrets

        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    _secret = key_file.read_text().strip()
SECRET_KEY = _secret

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("KILN_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("KILN_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "axes",  # login throttling: see "Web hardening" below
    "portal.inventory",
    "portal.catalog",
    "portal.runs",
    "portal.certificates",
    "portal.health",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "portal.middleware.ContentSecurityPolicyMiddleware",
    # 400 for a NUL, another control character or non-UTF-8 bytes in a path, parameter or form field.
    "portal.middleware.RejectUnreadableInputMiddleware",
    # Serves plotly.js, htmx and CSS from the app itself: air-gapped sites load nothing from a CDN.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
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
        "DIRS": [BASE_DIR / "templates"],
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

_database_url = os.environ.get("DATABASE_URL", "")
if _database_url:
    # Persistent connections (60 s: a worker or web process reuses one across tasks and requests),
    # checked before their first use in each request or task: a connection that PostgreSQL dropped
    # meanwhile (restart, failover, pg_terminate_backend, a pooler's idle timeout) is replaced
    # instead of failing the request with a 500. Writes of results also retry across a connection
    # lost mid-task (portal/runs/dbretry.py).
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60, conn_health_checks=True)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "kiln.sqlite3",
            # Worker and web share one SQLite file: wait for locks instead of failing at once.
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("KILN_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
# Serve straight from the app's static folders too, so a checkout works before collectstatic.
WHITENOISE_USE_FINDERS = True

# --- Celery -------------------------------------------------------------------------------------
_broker = os.environ.get("CELERY_BROKER_URL", "")
if _broker:
    CELERY_BROKER_URL = _broker
    CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
else:
    # No-server default: kombu's filesystem transport. In and out must be the same folder.
    _queue_dir = DATA_DIR / "broker"
    (_queue_dir / "queue").mkdir(parents=True, exist_ok=True)
    (_queue_dir / "control").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir / "queue"),
        "data_folder_out": str(_queue_dir / "queue"),
        "control_folder": str(_queue_dir / "control"),
        "polling_interval": 0.05,
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# The worker's pool, read by a plain `celery -A worker worker` (Celery takes worker_pool and
# worker_concurrency from here when no --pool / --concurrency is given; an explicit --pool=prefork
# is overridden by this setting, a Celery quirk: use KILN_WORKER_POOL=prefork instead).
# Threads: a node task is seconds to hours of waiting on SSH around milliseconds of Python, so a
# thread per node is enough, where a prefork process per node cost ~60 MB each (64 slots: 3.9 GB
# PSS, issue 10). Celery time limits are not enforced on threads; what bounds a task instead is in
# worker/timeouts.py.
CELERY_WORKER_POOL = os.environ.get("KILN_WORKER_POOL", "threads")
# Nodes one worker process drives at once. 64: one worker keeps a 64-node sweep fully parallel, as
# pdsh and clush fan out to every node at once. Past that the process's Python (one core under the
# GIL) is the limit: the quick plan costs the worker ~0.09 s of CPU per node (SSH, parsing,
# recording; bench/bench_fanout.py), so one process keeps up with 64 nodes whose checks take more
# than ~6 s; add worker processes (README, "Sizing") rather than threads. Prefork: the CPU count.
CELERY_WORKER_CONCURRENCY = int(
    os.environ.get("KILN_WORKER_CONCURRENCY", "64" if CELERY_WORKER_POOL in ("threads", "gevent", "eventlet") else "0")
) or (os.cpu_count() or 1)
# Database connections one worker process holds at most, whatever its concurrency: node tasks do
# their database work in short phases (claim, record a result, close the run; ~2-20 ms each) and
# hand the connection back between them (worker/db.py). 4: one process runs Python on one core, so
# more phases at once do not finish sooner (bench_fanout at 64 nodes: 8 or 16 were no faster than
# 4); 15 worker processes then hold 60 of PostgreSQL's default max_connections=100 beside the web.
KILN_WORKER_DB_CONNECTIONS = int(os.environ.get("KILN_WORKER_DB_CONNECTIONS", "4"))
# Slack, in seconds, between a node's summed command budgets and its task's soft time limit
# (connects, recording results). See worker/timeouts.py.
KILN_TASK_SLACK_S = int(os.environ.get("KILN_TASK_SLACK_S", "60"))
# The broker must not redeliver a task while it is still legitimately running: the visibility
# timeout is the outermost of the nested timeouts. Default 25 h: a 24 h burn-in plus slack.
# It is also how long a task of a killed worker waits before another worker picks it up.
if CELERY_BROKER_URL.startswith("redis"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": int(os.environ.get("KILN_BROKER_VISIBILITY_TIMEOUT", str(25 * 3600)))
    }

# --- Kiln ---------------------------------------------------------------------------------------
# Seconds to wait for an SSH TCP connect + handshake before calling a node unreachable.
KILN_SSH_CONNECT_TIMEOUT = float(os.environ.get("KILN_SSH_CONNECT_TIMEOUT", "10"))
# Node pairs run at once by pairwise localisation, from one SSH connection to the launcher: below
# OpenSSH's MaxSessions default of 10 sessions per connection (sshd_config(5)), with room to spare.
KILN_PAIR_PARALLELISM = int(os.environ.get("KILN_PAIR_PARALLELISM", "8"))
# Characters of the display copy of a result's stdout/stderr (pages, exports): enough for a probe or
# a tool table, bounded. The exact bytes as read (worker/ssh.py caps those at 16 MiB per stream) are
# stored compressed beside it and downloadable (portal/runs/rawoutput.py).
KILN_OUTPUT_CAP = int(os.environ.get("KILN_OUTPUT_CAP", "262144"))
# Most nodes one typed node set may name (forms, filters, commands); larger ones are refused before
# anything is expanded (portal/inventory/nodesets.py). 100,000 GPUs, the largest single clusters
# announced in 2024, at 8 GPUs per HGX node is 12,500 nodes; 20,000 leaves headroom. Expanding
# 20,000 names takes about 6 ms (bench/bench_nodeset.py).
KILN_MAX_NODESET = int(os.environ.get("KILN_MAX_NODESET", "20000"))
# What runs on the portal and worker hosts is server configuration, never a form field
# (docs/security.md). The `local` transport runs a cluster's checks on the worker host itself (a
# single GPU server, the demo's simulated nodes): refused unless this is set (`make up` sets it).
KILN_ALLOW_LOCAL_TRANSPORT = env_bool("KILN_ALLOW_LOCAL_TRANSPORT", False)
# Scheduler hooks: the programs they run, and where: `ssh` (the controller host named in a
# cluster's health settings) or `local` (this worker host, where scontrol/kubectl are installed).
KILN_SCONTROL_PATH = os.environ.get("KILN_SCONTROL_PATH", "scontrol")
KILN_KUBECTL_PATH = os.environ.get("KILN_KUBECTL_PATH", "kubectl")
KILN_CONTROLLER_TRANSPORT = os.environ.get("KILN_CONTROLLER_TRANSPORT", "ssh")
# Liveness (portal/runs/leases.py, portal/runs/reaper.py, worker/keepalive.py). A running task's
# results hold a lease that one heartbeat thread per worker process renews in one UPDATE every
# KILN_HEARTBEAT_S; the same beat reads back which held results were cancelled, so 3 s leaves 7 s of
# the 10 s cancel bound for SIGTERM, its 5 s grace and SIGKILL.
KILN_HEARTBEAT_S = float(os.environ.get("KILN_HEARTBEAT_S", "3"))
# A lease not renewed for this long means its worker is gone: 10 heartbeats, so a worker whose
# beats stall for up to ~25 s (a database restart or failover, a long pause) keeps its work. A dead
# worker's checks are acted on within TTL + one reaper interval: 60 s (the issue asks < 2 min).
KILN_LEASE_TTL_S = float(os.environ.get("KILN_LEASE_TTL_S", "30"))
if KILN_LEASE_TTL_S < 3 * KILN_HEARTBEAT_S:
    raise ImproperlyConfigured("KILN_LEASE_TTL_S must be at least 3 x KILN_HEARTBEAT_S (a few missed beats)")
# How often the reaper runs (django-celery-beat, PeriodicTask kiln-reaper): with the 30 s lease,
# a lost worker is acted on 30-60 s after its last heartbeat.
KILN_REAPER_INTERVAL_S = int(os.environ.get("KILN_REAPER_INTERVAL_S", "30"))
# A queued check nobody claimed this long after its task was sent is looked for in the broker and
# sent again when the broker no longer holds it (Redis flushed or restarted). 2 min: long enough
# for any worker with a free slot to pick a message up, short enough that a lost run recovers in
# under 3 min. A long queue behind busy workers is recognised as such, not re-sent.
KILN_LOST_MESSAGE_S = float(os.environ.get("KILN_LOST_MESSAGE_S", "120"))
# SSH keepalives while a command runs: a request every KILN_SSH_KEEPALIVE_S of silence, and the
# connection is dead after KILN_SSH_KEEPALIVE_COUNT intervals without a reply: ssh(1)'s
# ServerAliveInterval / ServerAliveCountMax (CountMax defaults to 3 there too). A frozen sshd is
# noticed within 5 + 3 x 5 = 20 s, and one check's wait, not every check's timeout, is lost.
KILN_SSH_KEEPALIVE_S = float(os.environ.get("KILN_SSH_KEEPALIVE_S", "5"))
KILN_SSH_KEEPALIVE_COUNT = int(os.environ.get("KILN_SSH_KEEPALIVE_COUNT", "3"))

# --- Email (alerts) -------------------------------------------------------------------------------
EMAIL_BACKEND = os.environ.get("KILN_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("KILN_EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("KILN_EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("KILN_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("KILN_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("KILN_EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("KILN_DEFAULT_FROM_EMAIL", "kiln@localhost")

# --- Web hardening (docs/security.md, "Web hardening") ----------------------------------------------
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# KILN_HTTPS=1: the portal is reached over HTTPS only. Cookies are sent over HTTPS only, plain HTTP
# is redirected, and browsers are told to use HTTPS for the next year (HSTS).
KILN_HTTPS = env_bool("KILN_HTTPS", False)
# Behind a proxy that terminates TLS, Django sees plain HTTP: set KILN_TRUST_PROXY_SSL_HEADER=1 so
# that `X-Forwarded-Proto: https` marks a request secure (without it, SECURE_SSL_REDIRECT redirects
# forever). Only when the proxy sets or strips that header on every request: a client that reaches
# the portal directly, or through a proxy that passes the header on, could claim HTTPS with it.
KILN_TRUST_PROXY_SSL_HEADER = env_bool("KILN_TRUST_PROXY_SSL_HEADER", False)
if KILN_TRUST_PROXY_SSL_HEADER:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if KILN_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    # One year (31536000 s): the shortest max-age hstspreload.org accepts, and the OWASP HTTP Strict
    # Transport Security Cheat Sheet's example (max-age=31536000; includeSubDomains).
    SECURE_HSTS_SECONDS = int(os.environ.get("KILN_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("KILN_HSTS_INCLUDE_SUBDOMAINS", True)
    # Preloading puts the domain in the browsers' built-in HSTS lists, which is the site owner's
    # decision to submit (hstspreload.org) and hard to undo; internal names cannot be preloaded. Off
    # unless asked for, and Django's reminder (security.W021) is silenced for that reason.
    SECURE_HSTS_PRELOAD = env_bool("KILN_HSTS_PRELOAD", False)
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
AXES_FAILURE_LIMIT = int(os.environ.get("KILN_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("KILN_LOGIN_COOLOFF_MINUTES", "30")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False  # no banner on every manage.py command; lockouts are still logged (warning)
# The client address: REMOTE_ADDR, or behind KILN_PROXY_COUNT proxies that each append to
# X-Forwarded-For, the address the outermost one saw (portal/middleware.py). 0 without a proxy: a
# client could otherwise write any address into the header and never be locked out.
KILN_PROXY_COUNT = int(os.environ.get("KILN_PROXY_COUNT", "0"))
AXES_CLIENT_IP_CALLABLE = "portal.middleware.client_ip"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("KILN_LOG_LEVEL", "INFO")},
}

if DATABASES["default"]["ENGINE"].endswith("sqlite3") and os.environ.get("KILN_REQUIRE_POSTGRES"):
    raise ImproperlyConfigured("KILN_REQUIRE_POSTGRES is set but DATABASE_URL is empty")
