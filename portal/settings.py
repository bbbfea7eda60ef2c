"""Kiln settings. Everything comes from the environment; see .env.example."""

from __future__ import annotations

import os
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
    "portal.inventory",
    "portal.catalog",
    "portal.runs",
    "portal.certificates",
    "portal.health",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves plotly.js, htmx and CSS from the app itself: air-gapped sites load nothing from a CDN.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "cluster_list"
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
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60)}
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
# Raw stdout/stderr kept per result, in characters: enough for a probe or a tool table, bounded.
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

# --- Email (alerts) -------------------------------------------------------------------------------
EMAIL_BACKEND = os.environ.get("KILN_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("KILN_EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("KILN_EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("KILN_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("KILN_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("KILN_EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("KILN_DEFAULT_FROM_EMAIL", "kiln@localhost")

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("KILN_LOG_LEVEL", "INFO")},
}

if DATABASES["default"]["ENGINE"].endswith("sqlite3") and os.environ.get("KILN_REQUIRE_POSTGRES"):
    raise ImproperlyConfigured("KILN_REQUIRE_POSTGRES is set but DATABASE_URL is empty")
