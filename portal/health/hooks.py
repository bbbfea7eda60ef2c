"""Scheduler hooks: the fixed commands Kiln runs on a Slurm or Kubernetes controller, and where.

An operator decides *whether* Kiln acts (the cluster's hook mode) and on which controller host. The
server decides *what* runs: the program (KILN_SCONTROL_PATH, KILN_KUBECTL_PATH) and the transport
(KILN_CONTROLLER_TRANSPORT). Each action is one fixed argv with the node's hostname, validated, as
an argument:

    drain     scontrol update nodename=HOST state=drain reason=kiln: WHY
    resume    scontrol update nodename=HOST state=resume
    cordon    kubectl [--context CTX] cordon HOST
    uncordon  kubectl [--context CTX] uncordon HOST

No environment from the database reaches the process (the local transport gives it the worker's
own environment less its secrets). The argv is rebuilt from these rules when an action runs, so a
`SchedulerAction` row edited in the database cannot change what executes. What the command printed
is shown to viewers, so it is kept short and scrubbed of anything that looks like a secret.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError

from portal.health import conf
from portal.health.models import HookAction, kube_context_validator
from portal.inventory.models import (
    Scheduler,
    hostname_validator,
    username_validator,
    validate_address,
    validate_key_path,
)

if TYPE_CHECKING:
    from portal.health.models import ClusterHealthSettings, SchedulerAction
    from worker.ssh import NodeTarget

# Which scheduler each action belongs to (the cluster's `scheduler` field).
# Keyed by HookAction; looked up with the plain str an action is stored and passed as.
SCHEDULER_OF: dict[str, Scheduler] = {
    HookAction.DRAIN: Scheduler.SLURM,
    HookAction.RESUME: Scheduler.SLURM,
    HookAction.CORDON: Scheduler.KUBERNETES,
    HookAction.UNCORDON: Scheduler.KUBERNETES,
}
# scontrol keeps a node's reason as one string; Slurm truncates nothing this short, and a reason
# longer than a line only clutters `sinfo -R`.
REASON_WORD_MAX = 250
# Characters of a hook command's output kept and shown (scontrol prints nothing on success,
# kubectl one line; an error is a few lines).
OUTPUT_MAX = 1000


class HookRefused(ValueError):
    """This action cannot be run as asked (wrong scheduler, invalid hostname, no controller)."""


def _valid(validator: object, value: str, what: str) -> None:
    try:
        validator(value)  # type: ignore[operator]
    except ValidationError as exc:
        raise HookRefused(f"{what} {value!r}: {' '.join(exc.messages)}") from None


def reason_word(reason: str) -> str:
    """`reason=kiln: WHY` as one argv word: control characters flattened, bounded."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in reason).split())
    return f"reason=kiln: {flat}"[:REASON_WORD_MAX]


def hook_argv(*, action: str, hostname: str, reason: str = "", kubectl_context: str = "") -> list[str]:
    """The one argv an action runs, from server configuration; HookRefused for anything else."""
    _valid(hostname_validator, hostname, "node hostname")
    scheduler = SCHEDULER_OF.get(action)
    if scheduler == Scheduler.SLURM:
        argv = [conf.scontrol_path(), "update", f"nodename={hostname}"]
        if action == HookAction.DRAIN:
            return [*argv, "state=drain", reason_word(reason)]
        return [*argv, "state=resume"]
    if scheduler == Scheduler.KUBERNETES:
        context: list[str] = []
        if kubectl_context:
            _valid(kube_context_validator, kubectl_context, "kubectl context")
            context = ["--context", kubectl_context]
        return [conf.kubectl_path(), *context, action, hostname]
    raise HookRefused(f"unknown scheduler action {action!r}")


def action_argv(*, action: SchedulerAction, cfg: ClusterHealthSettings) -> list[str]:
    """The argv of a stored action, rebuilt now: its kind must match its cluster's scheduler."""
    scheduler = action.node.cluster.scheduler
    if SCHEDULER_OF.get(action.action) != scheduler:
        raise HookRefused(f"{action.action!r} is not an action of the cluster's scheduler ({scheduler})")
    return hook_argv(
        action=action.action, hostname=action.node.hostname, reason=action.reason, kubectl_context=cfg.kubectl_context
    )


def controller_target(cfg: ClusterHealthSettings) -> NodeTarget:
    """Where the command runs: the cluster's controller host over SSH, or this worker host when
    the server says KILN_CONTROLLER_TRANSPORT=local. Never a local environment from the database."""
    from worker.ssh import NodeTarget

    transport = conf.controller_transport()
    host = cfg.controller_host.strip()
    if transport == "ssh":
        if not host:
            raise HookRefused("no controller host in this cluster's health settings")
        _valid(validate_address, host, "controller host")
        _valid(username_validator, cfg.controller_user, "controller user")
        if not 1 <= cfg.controller_port <= 65535:
            raise HookRefused(f"controller port {cfg.controller_port} is out of range")
        if cfg.controller_key_path:
            _valid(validate_key_path, cfg.controller_key_path, "controller key path")
    return NodeTarget(
        hostname=host or "localhost",
        transport=transport,
        port=cfg.controller_port,
        user=cfg.controller_user,
        key_path=cfg.controller_key_path,
        known_hosts=cfg.controller_known_hosts,
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
        local_env={},
    )


_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|\Z)", re.DOTALL)
_BEARER = re.compile(r"(?i)\b(bearer)\s+\S+")
_ASSIGNED = re.compile(
    r"(?i)\b([\w.-]*(?:password|passwd|secret|token|api[_-]?key|private[_-]?key|credentials?|authorization))"
    r"(\s*[=:]\s*)(\S+)"
)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):[^/\s@]+@")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _known_secrets() -> list[str]:
    """This server's own secrets, as they would appear in text (8 characters at least)."""
    values = [
        settings.SECRET_KEY,
        conf.metrics_token(),
        getattr(settings, "EMAIL_HOST_PASSWORD", ""),
        str(settings.DATABASES.get("default", {}).get("PASSWORD") or ""),
    ]
    return sorted({v for v in values if v and len(v) >= 8}, key=len, reverse=True)


def hook_output(text: str) -> str:
    """What a hook command printed, as shown to viewers: redacted (see `redact`), at most
    OUTPUT_MAX characters (the rest is counted, not kept)."""
    text = redact(text)
    if len(text) > OUTPUT_MAX:
        text = f"{text[:OUTPUT_MAX]} … [{len(text) - OUTPUT_MAX} more characters not kept]"
    return text


def redact(text: str) -> str:
    """Key blocks, tokens, passwords (`password=…`, `Bearer …`, `scheme://user:pw@`) and this
    server's own secrets replaced by [redacted]; terminal escapes and control characters dropped."""
    text = _PEM.sub("[redacted key material]", text)
    for secret in _known_secrets():
        text = text.replace(secret, "[redacted]")
    text = _BEARER.sub(r"\1 [redacted]", text)
    text = _ASSIGNED.sub(r"\1\2[redacted]", text)
    text = _URL_PASSWORD.sub(r"\1:[redacted]@", text)
    return "".join(c for c in _ANSI.sub("", text) if c.isprintable() or c in "\n\t").strip()
