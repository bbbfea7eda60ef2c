"""Clusters and their nodes."""

from __future__ import annotations

import ipaddress
import math

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from checks.core.profiles import PROFILES
from portal.inventory.queue_names import validate_queue

# \Z, not $: a $ also matches before a trailing newline, and "c1\n" would be stored as a name.
name_validator = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z", "letters, digits, '.', '_' and '-' only")
hostname_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}\Z", "a hostname: letters, digits, '.' and '-' only"
)
# A login name on a remote host (POSIX portable user names, plus upper case): never an option.
username_validator = RegexValidator(
    r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z", "a user name: letters, digits, '_', '.' and '-', not starting with '-'"
)
port_validators = [MinValueValidator(1), MaxValueValidator(65535)]
# The queue of clusters that name none: the one a plain `celery -A worker worker` serves
# (CELERY_TASK_DEFAULT_QUEUE in portal/settings.py says the same name).
DEFAULT_QUEUE = "default"


def validate_address(value: str) -> None:
    """An IP address (v4 or v6) or a hostname: what SSH connects to, never an option or a command."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        hostname_validator(value)


def validate_key_path(value: str) -> None:
    """A private key file on the worker hosts: an absolute path (it is read, never run)."""
    if not value.startswith("/") or any(ord(c) < 32 or c == "\x7f" for c in value):
        raise ValidationError("an absolute path on the worker hosts, without control characters")


def validate_jump_host(value: str) -> None:
    """`[user@]host[:port]`, like ssh -J, each part validated."""
    from worker.ssh import JumpHost

    try:
        jump = JumpHost.parse(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    validate_address(jump.host)
    if jump.user is not None:
        username_validator(jump.user)
    if not 1 <= jump.port <= 65535:
        raise ValidationError(f"jump host {value!r}: port {jump.port} is out of range")


def validate_finite(value: float) -> None:
    """NaN passes any bound (every comparison with it is false): refused on its own."""
    if not math.isfinite(value):
        raise ValidationError("a finite number")


def validate_transport(value: str) -> None:
    """`local` runs checks on the worker host itself: only where the server allows it."""
    if value == Transport.LOCAL and not settings.KILN_ALLOW_LOCAL_TRANSPORT:
        raise ValidationError(
            "the local transport runs commands on the worker host itself and is disabled on this server "
            "(KILN_ALLOW_LOCAL_TRANSPORT)"
        )


class Transport(models.TextChoices):
    SSH = "ssh", "SSH"
    LOCAL = "local", "Local (this host)"


class Scheduler(models.TextChoices):
    NONE = "none", "None"
    SLURM = "slurm", "Slurm"
    KUBERNETES = "k8s", "Kubernetes"


def profile_choices() -> list[tuple[str, str]]:
    return [(key, profile.name) for key, profile in PROFILES.items()]


class Cluster(models.Model):
    """A GPU cluster under acceptance or in service, and how Kiln reaches its nodes.

    Only the *path* of the SSH private key is stored, never the key itself. known_hosts is public
    data (host public keys) and is what host-key verification checks against.
    """

    name = models.CharField(max_length=63, unique=True, validators=[name_validator])
    customer = models.CharField(max_length=200, blank=True)
    site = models.CharField(max_length=200, blank=True)
    profile = models.CharField(max_length=40, default="H100-SXM-8", choices=profile_choices)
    transport = models.CharField(
        max_length=10, choices=Transport.choices, default=Transport.SSH, validators=[validate_transport]
    )
    ssh_user = models.CharField(max_length=64, default="root", validators=[username_validator])
    ssh_port = models.PositiveIntegerField(default=22, validators=port_validators)
    ssh_key_path = models.CharField(
        max_length=500, blank=True, validators=[validate_key_path], help_text="Path on the worker hosts, not the key."
    )
    jump_host = models.CharField(
        max_length=255, blank=True, validators=[validate_jump_host], help_text="[user@]host[:port], like ssh -J"
    )
    known_hosts = models.TextField(blank=True, help_text="known_hosts lines for every node (and the jump host).")
    scheduler = models.CharField(max_length=10, choices=Scheduler.choices, default=Scheduler.NONE)
    queue = models.CharField(
        max_length=63,
        default=DEFAULT_QUEUE,
        validators=[validate_queue],
        help_text=(
            "Celery queue of the workers that reach this cluster's nodes (`celery -A worker worker -Q NAME` at its "
            "site); 'default' is served by a worker started without -Q."
        ),
    )
    threshold_overrides = models.JSONField(
        default=dict, blank=True, help_text='Per check kind, e.g. {"gpu_inventory": {"expected_driver": "550.54.15"}}'
    )
    check_settings = models.JSONField(
        default=dict,
        blank=True,
        help_text='Site facts checks may need, e.g. {"sensors": {"inlet": "Coolant Inlet", "leak": "Leak Detect"}}',
    )
    # What the plan pickers offer first and preselect, and what a new campaign defaults to.
    acceptance_plan = models.ForeignKey(
        "catalog.TestPlan",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The plan this cluster is accepted with: listed first in the plan pickers, and a new campaign's "
        "default. Empty: the quick sweep is preselected.",
    )
    check_overhead_s = models.FloatField(
        null=True,
        blank=True,
        validators=[validate_finite, MinValueValidator(0.0), MaxValueValidator(3600.0)],
        verbose_name="check overhead (s)",
        help_text="Seconds a check takes on these nodes besides the duration its params set (connects, tool "
        "start-up, reads), for the plan estimates until this cluster has finished runs. Empty: each check's "
        "figure for real hardware over SSH (20 s for a short check).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if not isinstance(self.threshold_overrides, dict):
            raise ValidationError({"threshold_overrides": "must be an object keyed by check kind"})


class Node(models.Model):
    """One server of a cluster. `host_key_fingerprint` pins its SSH host key when set."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    hostname = models.CharField(max_length=253, validators=[hostname_validator])
    address = models.CharField(
        max_length=255, blank=True, validators=[validate_address], help_text="IP or DNS name; the hostname when empty."
    )
    ssh_port = models.PositiveIntegerField(
        null=True, blank=True, validators=port_validators, help_text="The cluster's port when empty."
    )
    rack = models.CharField(max_length=64, blank=True)
    position = models.CharField(max_length=16, blank=True)
    group = models.CharField(max_length=64, blank=True, help_text="Switch / rail group.")
    serial = models.CharField(max_length=128, blank=True)
    expected_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="The profile's count when empty.")
    host_key_fingerprint = models.CharField(max_length=100, blank=True, help_text="SHA256:... pinned host key")
    # Environment of the local transport (the demo's simulated nodes: PATH, LD_LIBRARY_PATH): set by
    # server code only (kiln_demo), so no form or admin page offers it (editable=False).
    local_env = models.JSONField(
        default=dict, blank=True, editable=False, help_text="Environment of the local transport (simulated nodes)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "hostname"]
        constraints = [models.UniqueConstraint(fields=["cluster", "hostname"], name="node_unique_hostname")]

    def __str__(self) -> str:
        return self.hostname
