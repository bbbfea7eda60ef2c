"""Settings of the health app, read from django.conf.settings (portal/settings.py reads each from
the environment and documents its default):

    KILN_METRICS_TOKEN               bearer token for /metrics (default: the data folder's metrics_token;
                                     neither: /metrics answers 403)
    KILN_METRICS_DETAIL              every scrape carries each node's per-GPU values (False: only
                                     ?detail=1 with ?cluster=)
    KILN_ALERT_FROM_EMAIL            sender of alert emails (default: DEFAULT_FROM_EMAIL)
    KILN_ALERT_MAX_ATTEMPTS          delivery attempts per alert before it is `failed` (5)
    KILN_ALERT_RETRY_BASE_S          first retry delay; doubles each attempt (30)
    KILN_WEBHOOK_TIMEOUT_S           webhook POST timeout (10)
    KILN_PORTAL_URL                  base URL put in alerts, e.g. https://kiln.example.org (empty: none)
    KILN_HEALTH_TREND_SWEEPS         how many recent results the "at risk" trend rule looks at (5)
    KILN_SCHEDULER_HOOK_TIMEOUT_S    timeout of one scontrol / kubectl command (30)
    KILN_SCHEDULER_HOOK_MAX_ATTEMPTS attempts of one drain/resume before it is `failed` (5)
    KILN_SCHEDULER_HOOK_RETRY_BASE_S first retry delay of a failed drain/resume; doubles each attempt (30)
    KILN_SCONTROL_PATH               the scontrol program the Slurm hooks run (scontrol)
    KILN_KUBECTL_PATH                the kubectl program the Kubernetes hooks run (kubectl)
    KILN_CONTROLLER_TRANSPORT        where they run: ssh (a cluster's controller host) or local (this host)

The last three are server configuration on purpose: a program, a path or a transport that runs on
a Kiln host is never a field an operator can edit (docs/security.md).
"""

from __future__ import annotations

from django.conf import settings


def _get(name: str) -> str:
    return str(getattr(settings, name))


def metrics_token() -> str:
    return _get("KILN_METRICS_TOKEN").strip()


def metrics_detail() -> bool:
    return bool(settings.KILN_METRICS_DETAIL)


def alert_from_email() -> str:
    return _get("KILN_ALERT_FROM_EMAIL") or settings.DEFAULT_FROM_EMAIL


def alert_max_attempts() -> int:
    return max(1, int(_get("KILN_ALERT_MAX_ATTEMPTS")))


def alert_retry_base_s() -> float:
    return float(_get("KILN_ALERT_RETRY_BASE_S"))


def webhook_timeout_s() -> float:
    return float(_get("KILN_WEBHOOK_TIMEOUT_S"))


def portal_url() -> str:
    return _get("KILN_PORTAL_URL").rstrip("/")


def trend_sweeps() -> int:
    return max(3, int(_get("KILN_HEALTH_TREND_SWEEPS")))


def hook_timeout_s() -> float:
    return float(_get("KILN_SCHEDULER_HOOK_TIMEOUT_S"))


def hook_max_attempts() -> int:
    # 5 attempts, 30 s doubling: retries span ~15 min (30+60+120+240 s), enough to ride out a
    # slurmctld/API-server restart or failover; a longer outage is shown as `failed`.
    return max(1, int(_get("KILN_SCHEDULER_HOOK_MAX_ATTEMPTS")))


def hook_retry_base_s() -> float:
    return float(_get("KILN_SCHEDULER_HOOK_RETRY_BASE_S"))


class HookConfigError(ValueError):
    """The server's scheduler-hook configuration is unusable; the message names the setting."""


def scontrol_path() -> str:
    return _program("KILN_SCONTROL_PATH")


def kubectl_path() -> str:
    return _program("KILN_KUBECTL_PATH")


def controller_transport() -> str:
    value = _get("KILN_CONTROLLER_TRANSPORT").strip().lower()
    if value not in ("ssh", "local"):
        raise HookConfigError(f"KILN_CONTROLLER_TRANSPORT={value!r}: expected ssh or local")
    return value


def _program(name: str) -> str:
    """A program name or path: one word, no control characters, not an option."""
    value = _get(name).strip()
    if not value or value.startswith("-") or any(c.isspace() or ord(c) < 32 or c == "\x7f" for c in value):
        raise HookConfigError(f"{name}={value!r}: expected a program name or path (one word)")
    return value
