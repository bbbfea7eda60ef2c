"""Runs of a plan on a cluster, and what each check found on each node."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.inventory.models import Cluster, Node
from portal.runs import packing
from portal.runs.lttb import downsample


class Status(models.TextChoices):
    """One vocabulary for runs and results. `fail` = ran, out of spec; `error` = could not tell."""

    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    PASS = "pass", "pass"
    WARN = "warn", "warn"
    FAIL = "fail", "fail"
    ERROR = "error", "error"
    SKIPPED = "skipped", "skipped"
    CANCELLED = "cancelled", "cancelled"


class Scope(models.TextChoices):
    """Where a result ran: on one node, or as a multi-node (group) check launched from one node."""

    NODE = "node", "node"
    GROUP = "group", "group"


ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)
FINAL_STATUSES = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR, Status.SKIPPED, Status.CANCELLED)
# Badge colours, NetBox-style: the choice carries its colour.
STATUS_COLOURS = {
    "queued": "grey",
    "running": "blue",
    "pass": "green",
    "warn": "orange",
    "fail": "red",
    "error": "purple",
    "skipped": "grey",
    "cancelled": "grey",
}


class Run(models.Model):
    """One execution of a plan on a set of nodes. `plan_snapshot` freezes kinds, params and
    thresholds at start, so editing a definition never rewrites a past run."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="runs")
    plan = models.ForeignKey("catalog.TestPlan", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    plan_snapshot = models.JSONField()
    node_set = models.TextField(blank=True, help_text="The folded node set (ClusterShell syntax).")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    parent = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="reruns")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED, db_index=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Written when the run closes (portal/runs/finalize.py): {"results": n, "nodes": n, "counts":
    # {status: n}}, so run lists read one field instead of counting every result of every run.
    summary = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"run #{self.pk} ({self.plan_snapshot.get('slug', '?')} on {self.cluster_id})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def elapsed_s(self) -> float | None:
        if not self.started_at:
            return None
        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()


class CheckResultManager(models.Manager["CheckResult"]):
    """Rows without their raw output bytes (up to 2 x 16 MiB compressed per result) nor their
    cross-node digest: a page, an export or a run's fan-in never loads them unless it names them
    (`.only(...)`, `.defer(None)`); the result page's download reads the bytes
    (portal/runs/selectors.py result_raw_output), closing the run the digest."""

    def get_queryset(self) -> models.QuerySet[CheckResult]:
        return super().get_queryset().defer("stdout_raw", "stderr_raw", "cross_node")


class CheckResult(models.Model):
    """What one plan item found on one node. Created `queued` at run start (one row per node × item),
    claimed by a worker with a conditional UPDATE, and finished exactly once."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="results")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="results")
    item_key = models.CharField(max_length=64, help_text="The plan item's slug in the snapshot.")
    kind = models.CharField(max_length=64)
    scope = models.CharField(
        max_length=10,
        choices=Scope.choices,
        default=Scope.NODE,
        help_text="node: one node; group: a multi-node check run from `node`.",
    )
    node_set = models.TextField(blank=True, help_text="Group results: the nodes it spanned.")
    attribution = models.JSONField(
        default=dict, blank=True, help_text="Group results: hostname -> {status, reason} where the output names nodes."
    )
    position = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED, db_index=True)
    reason = models.TextField(blank=True)
    attempt = models.PositiveIntegerField(default=0, help_text="How many times a worker claimed it.")
    claimed_by = models.CharField(max_length=64, blank=True, help_text="Celery task id that holds it.")
    command = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    stdout = models.TextField(blank=True, help_text="For display: NUL and undecodable bytes escaped.")
    stderr = models.TextField(blank=True, help_text="For display: NUL and undecodable bytes escaped.")
    # The raw bytes as read (after the transport's cap), zlib-compressed, with their SHA-256: the
    # evidence whatever bytes a tool printed (PostgreSQL text refuses NUL).
    stdout_raw = models.BinaryField(null=True, blank=True)
    stderr_raw = models.BinaryField(null=True, blank=True)
    stdout_sha256 = models.CharField(max_length=64, blank=True)
    stderr_sha256 = models.CharField(max_length=64, blank=True)
    output_truncated = models.BooleanField(default=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    # Liveness: the task that holds a running result renews its lease while it works; the reaper
    # acts on an expired lease, not on a deadline.
    worker_name = models.CharField(max_length=200, blank=True, help_text="The worker (Celery hostname) holding it.")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    command_started_at = models.DateTimeField(
        null=True, blank=True, help_text="When its first command started on the node (None: nothing ran there yet)."
    )
    remote_pgid = models.IntegerField(
        null=True, blank=True, help_text="Process group of the command running on the node now, to stop it."
    )
    portal_fault = models.BooleanField(
        default=False, help_text="The error is Kiln's (database, worker, bug), not the node's: health ignores it."
    )
    cross_node = models.JSONField(
        null=True,
        blank=True,
        help_text="What the cross-node checks read of it (consensus facts, outlier metric values), kept when "
        "it is recorded (portal/runs/crossnode.py); null: closing the run reads its measurements.",
    )
    output_expired_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When retention removed the raw output and cut the display copies to an excerpt "
        "(portal/runs/retention.py); the SHA-256 digests stay.",
    )

    objects = CheckResultManager()

    class Meta:
        ordering = ["run", "node__hostname", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "node", "item_key"], name="result_unique_per_item")]
        indexes = [
            models.Index(fields=["node", "-id"]),
            # A node's page and trends look for the group results that span it: a few per run, found
            # without reading the run's every result (partial: node results are most rows).
            models.Index(fields=["run"], condition=models.Q(scope="group"), name="checkresult_group_by_run"),
            # A run's results in some states: its failed ones (the triage), its problems (the grid's
            # filter), without reading the rest of the run (migration 0014).
            models.Index(fields=["run", "status"], name="checkresult_run_status"),
        ]

    def __str__(self) -> str:
        return f"{self.item_key} on {self.node_id}: {self.status}"

    @property
    def is_group(self) -> bool:
        """For templates, which cannot name `Scope.GROUP`."""
        return self.scope == Scope.GROUP


class RunEvent(models.Model):
    """A line of a run's log: what the system did to it (re-enqueued lost work, reaped a dead
    worker's checks, cancelled, stopped node-side processes), with when and why."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=40)
    message = models.TextField()

    class Meta:
        ordering = ["run", "at", "id"]

    def __str__(self) -> str:
        return f"run #{self.run_id} {self.kind}: {self.message[:60]}"


# Points of a series' downsampled view (Series.view_packed): what a chart draws per trace at most
# (portal/charts/selectors/common.py MAX_POINTS). Largest-Triangle-Three-Buckets keeps spikes.
VIEW_POINTS = 1500


class Series(models.Model):
    """A curve or time series of a result: burn-in telemetry per GPU, busbw by message size.

    Stored whole and exact, packed (portal/runs/packing.py: a 12 h 1 Hz curve of 43,200 points
    takes tens of KB, not the ~600 KB of a jsonb list), with a downsampled view of at most
    VIEW_POINTS points that charts read instead of decoding every point. `x` and `y` read and set
    the whole points as lists: `Series(x=[...], y=[...])` works, and save() digests them."""

    result = models.ForeignKey(CheckResult, on_delete=models.CASCADE, related_name="series")
    name = models.CharField(max_length=100)
    unit = models.CharField(max_length=20, blank=True)
    x_unit = models.CharField(max_length=20, blank=True, default="s")
    gpu = models.IntegerField(null=True, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    count = models.PositiveIntegerField(default=0, help_text="How many points are stored.")
    x_packed = models.BinaryField(default=b"", help_text="x, packed (portal/runs/packing.py).")
    y_packed = models.BinaryField(default=b"", help_text="y, packed; None (no reading) kept.")
    view_packed = models.BinaryField(
        default=b"",
        blank=True,
        help_text="x and y LTTB-downsampled to VIEW_POINTS (packing.pack_pair) for charts; empty when "
        "the series is no longer than that, or was stored before views existed.",
    )
    # SHA-256 of the points, taken when they are stored: a certificate cites it without loading
    # (and re-serialising) every point of every burn-in curve. Of the logical points (points_digest),
    # never of their packed bytes: packing changed nothing a certificate cites.
    points_sha256 = models.CharField(max_length=64, blank=True)
    thinned_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When retention replaced the full points by the view's (portal/runs/retention.py): "
        "`count` is then the view's; points_sha256 still names the full points as recorded.",
    )

    class Meta:
        ordering = ["result", "name", "gpu", "id"]
        verbose_name_plural = "series"

    def __str__(self) -> str:
        return f"{self.name} ({self.count} points)"

    def save(self, *args: Any, **kwargs: Any) -> None:
        x, y = self.x, self.y
        self.points_sha256 = points_digest(x, y)
        self.view_packed = points_view(x, y)
        fields = kwargs.get("update_fields")
        if fields is not None:
            names = set(fields)
            if names & {"x", "y"}:
                names = (names - {"x", "y"}) | {"x_packed", "y_packed", "count"}
            kwargs["update_fields"] = names | {"points_sha256", "view_packed"}
        super().save(*args, **kwargs)

    @property
    def x(self) -> list[Any]:
        return packing.unpack(self.x_packed)

    @x.setter
    def x(self, values: Sequence[Any]) -> None:
        self.x_packed = packing.pack(values)
        self.count = len(values)

    @property
    def y(self) -> list[Any]:
        return packing.unpack(self.y_packed)

    @y.setter
    def y(self, values: Sequence[Any]) -> None:
        self.y_packed = packing.pack(values)
        self.count = len(values)

    def view(self) -> tuple[list[Any], list[Any]]:
        """The downsampled points when a view is stored, else every point."""
        if self.view_packed:
            return packing.unpack_pair(self.view_packed)
        return self.x, self.y


def points_digest(x: Sequence[Any], y: Sequence[Any], *, x_json: str | None = None) -> str:
    """SHA-256 of a series' points as compact JSON (Python's float repr: exact and deterministic).
    `x_json`: json.dumps(list(x), separators=(",", ":")) when the caller already has it (the
    curves of one result share their x): the same bytes, so the same digest."""
    if x_json is None:
        x_json = json.dumps(list(x), separators=(",", ":"))
    text = "[" + x_json + "," + json.dumps(list(y), separators=(",", ":")) + "]"
    return hashlib.sha256(text.encode()).hexdigest()


def points_view(x: Sequence[Any], y: Sequence[Any]) -> bytes:
    """The packed LTTB view of a series longer than VIEW_POINTS; b"" for a shorter one, or one LTTB
    cannot draw (x not numbers): charts then read every point, as before views. A view is an
    illustration: it never stops a result from being recorded."""
    if len(x) <= VIEW_POINTS or len(x) != len(y):
        return b""
    try:
        return packing.pack_pair(*downsample(x, y, VIEW_POINTS))
    except (TypeError, ValueError):
        return b""


class Measurement(models.Model):
    """One measured fact of a result, with its threshold and verdict. `gpu` names the GPU."""

    # Indexed with `name` below: fleet charts, trends and history read one metric of many results.
    result = models.ForeignKey(CheckResult, on_delete=models.CASCADE, related_name="measurements", db_index=False)
    name = models.CharField(max_length=100)
    value = models.FloatField(null=True, blank=True)
    text = models.CharField(max_length=500, blank=True)
    unit = models.CharField(max_length=20, blank=True)
    gpu = models.IntegerField(null=True, blank=True)
    threshold = models.CharField(max_length=100, blank=True)
    ok = models.BooleanField(null=True)
    labels = models.JSONField(default=dict, blank=True)
    # When it was written: the partition key on PostgreSQL (one partition per month, migration 0013;
    # portal/runs/partitions.py), so old months leave as whole tables. There the primary key is
    # (id, recorded_at); `id` alone stays unique (one sequence), which is all Django relies on.
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["result", "gpu", "name", "id"]
        indexes = [
            models.Index(fields=["result", "name"], name="measurement_result_name"),
            # The out-of-spec ones, all the triage reads (a few rows, not a failed result's every
            # measurement; migration 0014 builds it on each monthly partition).
            models.Index(fields=["result"], condition=models.Q(ok=False), name="measurement_out_of_spec"),
        ]

    def __str__(self) -> str:
        return f"{self.name}={self.value if self.value is not None else self.text}"

    @property
    def where(self) -> str:
        """Which of several same-named measurements this is, for people: "GPU 3 ca=mlx5_1". The
        labels that name the thing measured come first (the database keeps no key order); a
        `unit` label that repeats the unit is left out."""
        labels = {k: v for k, v in (self.labels or {}).items() if not (k == "unit" and v == self.unit)}
        keys = sorted(labels, key=lambda k: (NAMING_LABELS.index(k) if k in NAMING_LABELS else len(NAMING_LABELS), k))
        return " ".join(([f"GPU {self.gpu}"] if self.gpu is not None else []) + [f"{k}={labels[k]}" for k in keys])


# Labels that say what a measurement is of (a sensor, a NIC's CA or port, a phase): shown first.
NAMING_LABELS = ("sensor", "ca", "port", "nic", "phase")


class RunMetric(models.Model):
    """A numeric metric some result of the run recorded: (plan item, name, phase, unit). Written
    with the measurements (duplicates ignored), so the fleet charts' picker reads a few rows rather
    than a DISTINCT over every measurement of the run (850k at 1,250 nodes)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    item_key = models.CharField(max_length=64)
    name = models.CharField(max_length=100)
    phase = models.CharField(max_length=100, blank=True)
    unit = models.CharField(max_length=20, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "item_key", "name", "phase", "unit"], name="run_metric_unique")
        ]

    def __str__(self) -> str:
        return f"{self.item_key}:{self.name}@{self.phase}"


class RunKeyValue(models.Model):
    """A key metric (portal/history/selectors/metrics.py) of one subject of a finished run, folded to
    the subject's number (worst GPU, or the sum of counts): a node's hostname, or a group result's
    node set for the group's own value. Written after the run closes, so comparing two runs reads
    these rows instead of every key measurement of both (74k each at 1,250 nodes)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="key_values")
    subject = models.CharField(max_length=255)
    metric = models.CharField(max_length=64)
    item_key = models.CharField(max_length=64)
    value = models.FloatField()
    gpu = models.IntegerField(null=True, blank=True)
    result = models.ForeignKey(CheckResult, on_delete=models.CASCADE, related_name="+", db_index=False)

    def __str__(self) -> str:
        return f"{self.subject} {self.metric} {self.item_key} = {self.value}"
