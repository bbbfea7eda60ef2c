"""After handover: node health state and its history, scheduled sweeps, alerts, scheduler hooks."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from portal.inventory.models import (
    Cluster,
    Node,
    port_validators,
    username_validator,
    validate_address,
    validate_key_path,
)

# A kubeconfig context name, passed to kubectl as the value of --context: never an option.
kube_context_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,252}$", "a context name: letters, digits and _ . : @ / - only"
)


class HealthState(models.TextChoices):
    """A node's health, derived from its latest results (portal/health/services/state.py: state_from_results)."""

    UNKNOWN = "unknown", "unknown"
    HEALTHY = "healthy", "healthy"
    DEGRADED = "degraded", "degraded"
    FAILED = "failed", "failed"
    UNREACHABLE = "unreachable", "unreachable"


# NetBox-style: the choice carries its badge colour.
HEALTH_COLOURS = {"unknown": "grey", "healthy": "green", "degraded": "orange", "failed": "red", "unreachable": "purple"}
BAD_STATES = (HealthState.FAILED, HealthState.UNREACHABLE)
# States that take a node out of the scheduler when the cluster opted in to hooks.
DRAIN_STATES = BAD_STATES


class KilnDrain(models.TextChoices):
    """Whether Kiln (not an admin) took a node out of the scheduler; blank = it did not."""

    DRAINED = "drained", "drained by Kiln"
    DRY_RUN = "dry-run", "would be drained (dry run)"


class NodeHealth(models.Model):
    """The current health of one node. `kiln_drain` remembers that Kiln (not an admin) took the node
    out of the scheduler ("drained"), or would have in dry-run mode ("dry-run"), so only those nodes
    are resumed when they recover."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="health")
    state = models.CharField(max_length=12, choices=HealthState.choices, default=HealthState.UNKNOWN, db_index=True)
    reason = models.TextField(blank=True)
    since = models.DateTimeField(null=True, blank=True, help_text="When the node entered this state.")
    last_run = models.ForeignKey("runs.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    checked_at = models.DateTimeField(null=True, blank=True, help_text="When a run last judged this node.")
    kiln_drain = models.CharField(max_length=8, blank=True, choices=KilnDrain.choices)
    risks_at = models.DateTimeField(
        null=True, blank=True, help_text="When this node's NodeRisk rows were last computed (null: never)."
    )

    class Meta:
        verbose_name_plural = "node health"

    def __str__(self) -> str:
        return f"{self.node_id}: {self.state}"

    @property
    def colour(self) -> str:
        return HEALTH_COLOURS.get(self.state, "grey")

    @property
    def drained_by_kiln(self) -> bool:
        return self.kiln_drain == KilnDrain.DRAINED

    @property
    def would_drain(self) -> bool:
        """Dry-run mode: Kiln would have drained this node."""
        return self.kiln_drain == KilnDrain.DRY_RUN


class HealthTransition(models.Model):
    """One change of a node's health state, with its cause (the worst result's reason and the run)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="health_transitions")
    run = models.ForeignKey("runs.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    from_state = models.CharField(max_length=12, choices=HealthState.choices)
    to_state = models.CharField(max_length=12, choices=HealthState.choices)
    reason = models.TextField(blank=True)
    sweep = models.BooleanField(default=False, help_text="The run was started by a schedule.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.describe(self.node.hostname)

    def describe(self, hostname: str) -> str:
        what = "sweep" if self.sweep else "run"
        cause = f": {self.reason}" if self.reason else ""
        where = f" ({what} #{self.run_id})" if self.run_id else ""
        return f"{hostname}: {self.from_state} → {self.to_state}{cause}{where}"

    @property
    def is_recovery(self) -> bool:
        return self.to_state == HealthState.HEALTHY


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON"
    SLACK = "slack", "Slack-compatible"


class HookMode(models.TextChoices):
    OFF = "off", "Off"
    DRY_RUN = "dry_run", "Dry run (record what would be done)"
    ON = "on", "On"


class ClusterHealthSettings(models.Model):
    """Per-cluster alert targets and scheduler hooks (opt-in). The scheduler kind is the cluster's
    own `scheduler` field (none / slurm / k8s); this says whether and where Kiln may act on it.

    What runs is not here: the scontrol/kubectl program and whether it runs over SSH or on the
    worker host are server configuration (KILN_SCONTROL_PATH, KILN_KUBECTL_PATH,
    KILN_CONTROLLER_TRANSPORT), and the command is a fixed argv with the node's hostname
    (portal/health/hooks.py). Operators edit the controller's address and the alert targets;
    the key path (a file on the worker hosts) is for superusers, in the admin."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="health_settings")
    alert_emails = models.TextField(blank=True, help_text="Comma or newline separated addresses.")
    webhook_url = models.URLField(blank=True, max_length=500)
    webhook_format = models.CharField(max_length=8, choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    hook_mode = models.CharField(max_length=8, choices=HookMode.choices, default=HookMode.OFF)
    # The controller host scontrol / kubectl run on over SSH (KILN_CONTROLLER_TRANSPORT=ssh).
    controller_host = models.CharField(
        max_length=255, blank=True, validators=[validate_address], help_text="Slurm controller or kubectl host."
    )
    controller_port = models.PositiveIntegerField(default=22, validators=port_validators)
    controller_user = models.CharField(max_length=64, default="root", validators=[username_validator])
    controller_key_path = models.CharField(
        max_length=500,
        blank=True,
        validators=[validate_key_path],
        help_text="Private key path on the worker hosts (superusers only, in the admin).",
    )
    controller_known_hosts = models.TextField(blank=True, help_text="known_hosts lines of the controller host.")
    kubectl_context = models.CharField(max_length=255, blank=True, validators=[kube_context_validator])

    class Meta:
        verbose_name_plural = "cluster health settings"

    def __str__(self) -> str:
        return f"health settings of {self.cluster_id}"

    @property
    def email_list(self) -> list[str]:
        return [a.strip() for a in self.alert_emails.replace("\n", ",").split(",") if a.strip()]


class Schedule(models.Model):
    """A recurring sweep: a plan on a cluster (optionally a node set) at a crontab. Beat's
    DatabaseScheduler reads `periodic_task`, so edits take effect without restarting beat."""

    name = models.CharField(max_length=100)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="schedules")
    plan = models.ForeignKey("catalog.TestPlan", on_delete=models.PROTECT, related_name="+")
    node_set = models.TextField(blank=True, help_text="ClusterShell node set; empty = every node.")
    crontab = models.CharField(max_length=100, help_text="minute hour day-of-month month day-of-week (UTC)")
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField(
        "django_celery_beat.PeriodicTask", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "name", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.crontab})"


class ScheduledFire(models.Model):
    """One firing of a schedule. Unique per (schedule, fire minute) and per delivery, so a beat
    tick delivered twice (acks_late redelivery, two beats) starts one run."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires")
    fire_time = models.DateTimeField()
    task_id = models.CharField(max_length=64, blank=True)
    run = models.OneToOneField("runs.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="sweep_fire")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-fire_time"]
        constraints = [models.UniqueConstraint(fields=["schedule", "fire_time"], name="fire_unique_per_minute")]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.fire_time:%Y-%m-%d %H:%M}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "pending"
    SENT = "sent", "sent"
    RETRYING = "retrying", "retrying"
    FAILED = "failed", "failed"


class Channel(models.TextChoices):
    EMAIL = "email", "email"
    WEBHOOK = "webhook", "webhook"


DELIVERY_COLOURS = {"pending": "grey", "sent": "green", "retrying": "orange", "failed": "red"}


class AlertDelivery(models.Model):
    """One alert to one target (an email list or a webhook) for one transition, and its fate."""

    transition = models.ForeignKey(HealthTransition, on_delete=models.CASCADE, related_name="deliveries")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="alert_deliveries")
    channel = models.CharField(max_length=8, choices=Channel.choices)
    target = models.CharField(max_length=1000)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.channel} to {self.target}: {self.status}"

    @property
    def colour(self) -> str:
        return DELIVERY_COLOURS.get(self.status, "grey")


class HookAction(models.TextChoices):
    """What a scheduler hook does to a node: Slurm drain/resume, Kubernetes cordon/uncordon."""

    DRAIN = "drain", "drain"
    RESUME = "resume", "resume"
    CORDON = "cordon", "cordon"
    UNCORDON = "uncordon", "uncordon"


class ActionStatus(models.TextChoices):
    """A scheduler action's fate (portal/health/services.py: scheduler_action_execute)."""

    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    RETRYING = "retrying", "retrying"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    SUPERSEDED = "superseded", "superseded"
    SKIPPED = "skipped", "skipped"
    DRY_RUN = "dry-run", "dry run"


# Actions still in flight: a newer action waits for them, or supersedes them.
ACTION_OPEN = (ActionStatus.PENDING, ActionStatus.RETRYING, ActionStatus.RUNNING)


class SchedulerAction(models.Model):
    """A drain/resume (Slurm) or cordon/uncordon (Kubernetes) Kiln did, or would do (dry run)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="scheduler_actions")
    transition = models.ForeignKey(HealthTransition, on_delete=models.SET_NULL, null=True, blank=True)
    action = models.CharField(max_length=10, choices=HookAction.choices)
    # Why (a drain's `reason=`); the command itself is rebuilt from server configuration when it
    # runs (portal/health/hooks.py), so `argv` only records what was (or would be) run.
    reason = models.CharField(max_length=250, blank=True)
    argv = models.JSONField(default=list)
    dry_run = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=ActionStatus.choices, default=ActionStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the current attempt was claimed.")
    output = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.node_id}: {self.status}"

    @property
    def command(self) -> str:
        import shlex

        return shlex.join(self.argv)


class NodeRisk(models.Model):
    """A key measurement of a node worsening across its recent sweeps (portal/health/trends.py),
    computed when a run that judged the node finishes, so the health page reads these few rows
    instead of every measurement of the cluster's last sweeps."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="risks")
    kind = models.CharField(max_length=64)
    name = models.CharField(max_length=100)
    gpu = models.IntegerField(null=True, blank=True)
    phase = models.CharField(max_length=100, blank=True)
    values = models.JSONField(default=list, help_text="Oldest first.")

    def __str__(self) -> str:
        return f"{self.node_id}: {self.kind}:{self.name} gpu {self.gpu}"


class NodeMetrics(models.Model):
    """One /metrics family of one node: its latest key measurements as Prometheus sample lines
    (portal/health/metrics.py), written when a run that judged the node finishes, so a scrape
    concatenates these rows instead of reading the fleet's measurements. `values` holds the same
    numbers for its cluster's aggregates (ClusterMetrics)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="exported_metrics")
    family = models.CharField(max_length=100)
    samples = models.TextField(help_text="Sample lines in the Prometheus text format, without HELP and TYPE.")
    values = models.JSONField(
        null=True,
        blank=True,
        help_text="{label value: [values]} of a measurement family, {check kind: 1 failing / 0} of the "
        "failing-checks family; null: stored before values were kept (re-rendered after migrate).",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "family"], name="node_metrics_unique")]
        indexes = [models.Index(fields=["family", "node"], name="node_metrics_family")]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.family}"


class ClusterMetrics(models.Model):
    """One /metrics family of one cluster: sample lines rendered from its nodes' NodeMetrics when a
    run of the cluster finishes (the per-cluster aggregates, and the failing checks of its nodes), so
    a default scrape streams a few rows per cluster whatever the node count."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="exported_metrics")
    family = models.CharField(max_length=100)
    samples = models.TextField(help_text="Sample lines in the Prometheus text format, without HELP and TYPE.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "family"], name="cluster_metrics_unique")]
        indexes = [models.Index(fields=["family", "cluster"], name="cluster_metrics_family")]

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.family}"


class WorkerBeat(models.Model):
    """A Celery worker's last sign of life, written by a thread in the worker every KILN_WORKER_BEAT_S
    (portal/health/beats.py) whether or not it holds work, and deleted when the worker stops cleanly:
    /metrics exports it, so "worker down" needs no scrape target on the worker hosts."""

    name = models.CharField(max_length=200, unique=True, help_text="The Celery node name, e.g. celery@host.")
    started_at = models.DateTimeField(help_text="When this worker process started beating.")
    seen_at = models.DateTimeField(help_text="Its last beat.")

    def __str__(self) -> str:
        return f"{self.name}: {self.seen_at}"
