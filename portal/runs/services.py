"""Writes for runs and results. Keyword-only, typed; views, tasks and commands call these."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from checks.core.base import Measurement as CheckMeasurement
from checks.core.base import Series as CheckSeries
from checks.core.base import Verdict
from portal.catalog.models import TestPlan
from portal.inventory import nodesets
from portal.inventory.models import Cluster, Node
from portal.runs import crossnode, dispatch, events, leases, packing, rawoutput, recording
from portal.runs.dbretry import db_retry
from portal.runs.finalize import run_finalize
from portal.runs.models import (
    ACTIVE_STATUSES,
    CheckResult,
    Measurement,
    Run,
    RunMetric,
    Scope,
    Series,
    Status,
    points_digest,
    points_view,
)
from portal.runs.rawoutput import storable, storable_json
from portal.runs.recording import Record
from portal.runs.snapshot import RunStartError, plan_snapshot_build
from worker.timeouts import node_task_limits

logger = logging.getLogger(__name__)


def nodes_select(*, cluster: Cluster, node_set: str = "") -> list[Node]:
    """The cluster's nodes named by a ClusterShell node set (all nodes when empty)."""
    nodes = list(cluster.nodes.order_by("hostname"))
    if not node_set.strip():
        return nodes
    try:
        wanted = set(nodesets.parse(node_set))  # bounded: refused before expanding when too large
    except nodesets.NodeSetError as exc:
        raise RunStartError(f"node set {node_set[:80]!r}: {exc}") from None
    by_name = {n.hostname: n for n in nodes}
    unknown = sorted(wanted - set(by_name))
    if unknown:
        raise RunStartError(f"not nodes of cluster {cluster.name}: {NodeSet.fromlist(unknown)}")
    return [by_name[name] for name in sorted(wanted)]


def run_start(
    *,
    cluster: Cluster,
    plan: TestPlan,
    nodes: Iterable[Node] | None = None,
    requested_by: Any = None,
    parent: Run | None = None,
    enqueue: bool = True,
) -> Run:
    """Create a run with its queued results, and enqueue one task per node once committed.

    `enqueue=False` leaves execution to the caller (kiln_run --inline)."""
    node_list = list(nodes) if nodes is not None else list(cluster.nodes.order_by("hostname"))
    if not node_list:
        raise RunStartError(f"cluster {cluster.name} has no nodes to run on")
    foreign = [n.hostname for n in node_list if n.cluster_id != cluster.pk]
    if foreign:
        raise RunStartError(f"nodes not in cluster {cluster.name}: {', '.join(foreign)}")
    snapshot = plan_snapshot_build(plan=plan, cluster=cluster)
    return _run_create(
        cluster=cluster,
        plan=plan,
        snapshot=snapshot,
        node_list=node_list,
        requested_by=requested_by,
        parent=parent,
        enqueue=enqueue,
    )


def _run_create(
    *,
    cluster: Cluster,
    plan: TestPlan | None,
    snapshot: dict[str, Any],
    node_list: list[Node],
    requested_by: Any,
    parent: Run | None,
    enqueue: bool,
) -> Run:
    _check_timeout_nesting(snapshot)
    # A queued result's lease is the time its task may wait in the broker before the reaper looks
    # for its message (portal/execution/reaper.py); without a broker (inline) there is nothing to lose.
    queued_lease = leases.queued_lease() if enqueue else None
    with transaction.atomic():
        run = Run.objects.create(
            cluster=cluster,
            plan=plan,
            plan_snapshot=snapshot,
            node_set=str(NodeSet.fromlist([n.hostname for n in node_list])),
            requested_by=requested_by if getattr(requested_by, "pk", None) else None,
            parent=parent,
        )
        node_items = [item for item in snapshot["items"] if item.get("scope", Scope.NODE) == Scope.NODE]
        group_items = [item for item in snapshot["items"] if item.get("scope", Scope.NODE) == Scope.GROUP]
        _results_insert(
            [
                CheckResult(
                    run=run,
                    node=node,
                    item_key=item["key"],
                    kind=item["kind"],
                    position=item["position"],
                    lease_expires_at=queued_lease,
                )
                for node in node_list
                for item in node_items
            ]
        )
        # One result per multi-node item, held by the first node (the default launcher); the members
        # are fixed when it starts, after the per-node checks said which nodes are reachable.
        CheckResult.objects.bulk_create(
            CheckResult(
                run=run,
                node=node_list[0],
                item_key=item["key"],
                kind=item["kind"],
                position=item["position"],
                scope=Scope.GROUP,
                node_set=run.node_set,
            )
            for item in group_items
        )
        node_ids = [n.pk for n in node_list]
        if enqueue:
            transaction.on_commit(lambda: _enqueue(run.pk, node_ids))
    return run


def _results_insert(results: list[CheckResult]) -> None:
    """Insert a new run's results, inside the caller's transaction.

    On PostgreSQL in one COPY: bulk_create's single INSERT has a placeholder per column per row (64
    nodes x 7 node items of `quick` x 31 columns, ~14,000), and psycopg parsing that statement cost
    `kiln run` about a third of run_start's CPU (cProfile of run_start at 64 nodes). Each row carries
    what bulk_create stored: every field's value as Django prepares it for saving, defaults included."""
    if connection.vendor != "postgresql" or not results:
        CheckResult.objects.bulk_create(results)
        return
    from psycopg import sql

    fields = [f for f in CheckResult._meta.concrete_fields if not f.primary_key]
    columns = [sql.Identifier(str(f.column)) for f in fields]
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(CheckResult._meta.db_table), sql.SQL(", ").join(columns)
    )
    # Through Django's error wrapper, as measurements_write's COPY: db_retry sees its own errors.
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(statement) as copy:
        for result in results:
            copy.write_row([f.get_db_prep_save(f.pre_save(result, True), connection) for f in fields])


def run_rerun(*, run: Run, requested_by: Any = None, enqueue: bool = True) -> Run:
    """A new run, linked to `run` by `parent`, of the very same plan snapshot on the nodes that had a
    `fail` or `error` result. The snapshot is the contract: the re-run judges by the thresholds the
    first run used, not by today's plan definition.

    A failed multi-node result names its bad nodes through `attribution`; when it names none, every
    node it spanned is re-run (we cannot tell which one was at fault)."""
    if run.is_active:
        raise RunStartError(f"run #{run.pk} is still {run.status}: re-run its failures once it has finished")
    bad = (Status.FAIL, Status.ERROR)
    hostnames: set[str] = set(
        run.results.filter(scope=Scope.NODE, status__in=bad).values_list("node__hostname", flat=True)
    )
    for node_set, attribution in run.results.filter(scope=Scope.GROUP, status__in=bad).values_list(
        "node_set", "attribution"
    ):
        named = {host for host, verdict in (attribution or {}).items() if verdict.get("status") in bad}
        hostnames |= named or set(NodeSet(node_set or ""))
    if not hostnames:
        raise RunStartError(f"run #{run.pk} has no failed or errored result: there is nothing to re-run")
    nodes = list(run.cluster.nodes.filter(hostname__in=hostnames).order_by("hostname"))
    return _run_create(
        cluster=run.cluster,
        plan=run.plan,
        snapshot=run.plan_snapshot,
        node_list=nodes,
        requested_by=requested_by,
        parent=run,
        enqueue=enqueue,
    )


def _check_timeout_nesting(snapshot: dict[str, Any]) -> None:
    _, hard = node_task_limits(
        command_budgets=[item["timeout_s"] for item in snapshot["items"]],
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
    )
    visibility = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}).get("visibility_timeout")
    if visibility is not None and hard >= visibility:
        raise RunStartError(
            f"plan needs up to {hard}s per node, more than the broker visibility timeout ({visibility}s): "
            "raise KILN_BROKER_VISIBILITY_TIMEOUT or shorten the plan"
        )


def _enqueue(run_id: int, node_ids: list[int]) -> None:
    snapshot = Run.objects.only("plan_snapshot").get(pk=run_id).plan_snapshot  # once, not once per node
    for node_id in node_ids:
        dispatch.enqueue_node(run_id=run_id, node_id=node_id, plan_snapshot=snapshot)


def run_mark_started(*, run_id: int, at: datetime | None = None) -> None:
    """A queued run is running from `at` (default now): its first claimed check's start."""
    Run.objects.filter(pk=run_id, status=Status.QUEUED).update(status=Status.RUNNING, started_at=at or timezone.now())


def _lapsed(now: Any) -> Q:
    """A running result whose holder stopped renewing its lease (portal/runs/leases.py), claimed
    fewer than leases.MAX_CLAIMS times (after that, the reaper reports it instead)."""
    lapsed = Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True)
    return Q(status=Status.RUNNING, attempt__lt=leases.MAX_CLAIMS) & lapsed


def results_claim(*, run_id: int, node_id: int, claim: str) -> list[CheckResult]:
    """Claim this node's unfinished results for a task. Returns them in plan order.

    Rows still `queued`, or `running` under a lease that has lapsed (its holder died, whoever it
    was), are taken with a fresh lease; rows under a live lease are left alone, even when they are
    held under this very claim: a second delivery of the same message runs nothing while the
    first one lives (unless its holder was a process of this worker that is gone:
    leases.holders_gone). Conditional UPDATE; the rows taken are told apart by this claim's start
    time.
    """
    now = timezone.now()
    claimable = Q(status=Status.QUEUED) | _lapsed(now)
    mine = CheckResult.objects.filter(run_id=run_id, node_id=node_id, scope=Scope.NODE)
    fields = {"status": Status.RUNNING, "claimed_by": claim, "attempt": F("attempt") + 1, "started_at": now}
    if not mine.filter(claimable).update(**fields, **leases.claim_fields(now)):
        # Held under this very claim by a process of this worker that is gone (a pool child killed,
        # its message redelivered to a sibling): taken over without waiting out the lease.
        held = mine.filter(status=Status.RUNNING, claimed_by=claim, attempt__lt=leases.MAX_CLAIMS)
        gone = leases.holders_gone(held.values_list("worker_name", flat=True))
        if gone:
            held.filter(worker_name__in=gone).update(**fields, **leases.claim_fields(now))
    return list(
        CheckResult.objects.filter(
            run_id=run_id, node_id=node_id, scope=Scope.NODE, status=Status.RUNNING, claimed_by=claim, started_at=now
        ).order_by("position")
    )


def group_result_claim(*, result_id: int, claim: str) -> CheckResult | None:
    """Claim a dispatched group result for its task (or take it over once its lease has lapsed)."""
    now = timezone.now()
    claimable = Q(status=Status.QUEUED, claimed_by__in=["dispatched", claim]) | _lapsed(now)
    updated = CheckResult.objects.filter(claimable, pk=result_id, scope=Scope.GROUP).update(
        status=Status.RUNNING, claimed_by=claim, attempt=F("attempt") + 1, started_at=now, **leases.claim_fields(now)
    )
    if not updated:
        return None
    result = CheckResult.objects.get(pk=result_id)
    # A plan of multi-node checks only (the heat soak) has no node task to mark its run started.
    run_mark_started(run_id=result.run_id, at=now)
    return result


def group_result_error(*, result_id: int, claim: str, reason: str) -> int:
    """Close a group result its task still holds as `error` (time limit, a bug in Kiln)."""
    return CheckResult.objects.filter(pk=result_id, status=Status.RUNNING, claimed_by=claim).update(
        status=Status.ERROR, reason=reason
    )


def _stream(raw: bytes | list[bytes] | None, text: str) -> list[bytes]:
    if raw is None:
        return [rawoutput.text_bytes(text)]
    return [raw] if isinstance(raw, bytes) else raw


def result_record(*, starting: int | None = None, **prepare: Any) -> bool:
    """Finish a claimed result exactly once (result_prepare, then record_write). Returns False when
    it was already finished or taken."""
    return record_write(result_prepare(**prepare), starting=starting)


def result_prepare(
    *,
    result: CheckResult,
    claim: str,
    verdict: Verdict,
    measurements: list[CheckMeasurement],
    command: str = "",
    stdout: str = "",
    stderr: str = "",
    stdout_raw: bytes | list[bytes] | None = None,
    stderr_raw: bytes | list[bytes] | None = None,
    exit_code: int | None = None,
    duration_s: float | None = None,
    series: list[CheckSeries] | None = None,
    attribution: dict[str, dict[str, str]] | None = None,
    node_set: str | None = None,
    truncated: bool = False,
) -> Record:
    """A claimed result's record, ready to write (record_write).

    `stdout_raw`/`stderr_raw`: the exact bytes (or their parts, in order), stored compressed with
    their SHA-256, and shown escaped and capped (portal/runs/rawoutput.py); without them, the text
    `stdout`/`stderr` is stored as UTF-8. `truncated`: the transport already cut a command's output
    while reading it (CommandOutput.truncated)."""
    cap = settings.KILN_OUTPUT_CAP
    out = rawoutput.pack(_stream(stdout_raw, stdout), cap=cap)
    err = rawoutput.pack(_stream(stderr_raw, stderr), cap=cap)
    fields: dict[str, Any] = {
        "status": verdict.status,
        "reason": storable(verdict.reason)[:4000],
        "command": storable(command),
        "stdout": out.display,
        "stderr": err.display,
        "stdout_raw": out.compressed,
        "stderr_raw": err.compressed,
        "stdout_sha256": out.sha256,
        "stderr_sha256": err.sha256,
        "output_truncated": out.display_cut or err.display_cut or truncated,
        "exit_code": exit_code,
        "duration_s": duration_s,
    }
    if attribution is not None:
        fields["attribution"] = storable_json(attribution)
    if node_set is not None:
        fields["node_set"] = node_set

    rows = series_rows(series or [])  # packed and digested once, before the transaction
    stored = stored_measurements(measurements)
    if result.scope == Scope.NODE:
        fields["cross_node"] = crossnode.digest(result.kind, stored)
    return Record(result=result, claim=claim, fields=fields, measurements=stored, series=rows)


def record_write(record: Record, *, starting: int | None = None) -> bool:
    """Finish the record's result exactly once. Returns False when it was already finished or
    taken. Retried across a lost database connection (portal/runs/dbretry.py): the write is keyed on
    the claim, so a retry after a commit whose answer was lost changes nothing and still reports the
    result recorded. `starting`: the result the task runs next, marked in the same write as having
    its command started (leases.Holding.started_marked)."""

    def write(attempt: int) -> bool:
        return _result_write(record=record, retry=attempt > 1, starting=starting)

    return db_retry(write, what=f"recording result {record.result.pk}")


def series_rows(series: list[CheckSeries]) -> list[dict[str, Any]]:
    """The stored fields of each series: points packed (portal/runs/packing.py), their digest, and
    the downsampled view charts read. The curves of one burn-in share one list of sample times:
    it is packed and serialised for the digest once, not once per curve."""
    shared: dict[int, tuple[bytes, str]] = {}
    rows = []
    for sr in series:
        if id(sr.x) not in shared:  # every sr is alive for the whole loop: ids are not reused
            shared[id(sr.x)] = (packing.pack(sr.x), json.dumps(list(sr.x), separators=(",", ":")))
        x_packed, x_json = shared[id(sr.x)]
        rows.append(
            {
                "name": storable(sr.name)[:100],
                "unit": storable(sr.unit)[:20],
                "x_unit": storable(sr.x_unit)[:20],
                "gpu": sr.gpu,
                "labels": storable_json(sr.labels or {}),
                "count": len(sr.y),
                "x_packed": x_packed,
                "y_packed": packing.pack(sr.y),
                "view_packed": points_view(sr.x, sr.y),
                "points_sha256": points_digest(sr.x, sr.y, x_json=x_json),
            }
        )
    return rows


def _result_write(*, record: Record, retry: bool, starting: int | None) -> bool:
    now = timezone.now()
    result = record.result
    if result.scope == Scope.GROUP and result.started_at is not None:
        # A multi-node check's commands ran side by side (every node of a soak, pairs in rounds):
        # its duration is its wall time since it was claimed, never the sum of its outputs'.
        record = replace(
            record, fields={**record.fields, "duration_s": max(0.0, (now - result.started_at).total_seconds())}
        )
    write = recording.result_write if connection.vendor == "postgresql" else _result_write_orm
    updated = write(record=record, at=now, starting=starting)
    # A retry whose first try did commit (the answer was lost with the connection): recorded.
    return bool(updated) or (
        retry
        and CheckResult.objects.filter(pk=result.pk, claimed_by=record.claim)
        .exclude(status__in=ACTIVE_STATUSES)
        .exists()
    )


def _result_write_orm(*, record: Record, at: datetime, starting: int | None) -> int:
    """recording.result_write through the ORM, in a transaction (a database other than PostgreSQL)."""
    result, claim, measurements = record.result, record.claim, record.measurements
    with transaction.atomic():
        updated = CheckResult.objects.filter(pk=result.pk, status=Status.RUNNING, claimed_by=claim).update(
            **record.fields, finished_at=at
        )
        if not updated:
            return 0
        if starting is not None:
            CheckResult.objects.filter(
                pk=starting, status=Status.RUNNING, claimed_by=claim, command_started_at__isnull=True
            ).update(command_started_at=at)
        # No series or measurement of this result to replace: they are written only here, in the
        # transaction that ends its `running` (a try that rolled back left none, and one that
        # committed is answered above), and the cross-node pass adds its own once every result is
        # final. Deleting "whatever is there" first cost two queries a result for nothing.
        Series.objects.bulk_create(Series(result=result, **row) for row in record.series)
        Measurement.objects.bulk_create(
            Measurement(
                result=result,
                name=name,
                value=value,
                text=text,
                unit=unit,
                gpu=gpu,
                threshold=threshold,
                ok=ok,
                labels=labels,
                recorded_at=at,
            )
            for name, value, text, unit, gpu, threshold, ok, labels in measurements
        )
        RunMetric.objects.bulk_create(
            (
                RunMetric(run_id=result.run_id, item_key=result.item_key, name=name, phase=phase, unit=unit)
                for name, phase, unit in recording.run_metric_rows(measurements)
            ),
            ignore_conflicts=True,
        )
    return 1


def stored_measurements(measurements: list[CheckMeasurement]) -> list[crossnode.Stored]:
    """The measurements as they are stored: each field cut to its column and made storable (name,
    value, text, unit, gpu, threshold, ok, labels; crossnode.Stored)."""
    return [
        (
            storable(m.name)[:100],
            m.value,
            storable(m.text or "")[:500],
            storable(m.unit)[:20],
            m.gpu,
            storable(m.threshold or "")[:100],
            m.ok,
            storable_json(m.labels or {}),
        )
        for m in measurements
    ]


def results_fail_remaining(
    *, run_id: int, node_id: int, claim: str, status: str, reason: str, portal_fault: bool = False
) -> int:
    """Close every result this task still holds (connection refused, time limit, ...).

    `portal_fault`: Kiln failed (a bug, the database gone for longer than the retries), not the
    node: node health ignores these results. Retried across a lost database connection."""

    def write(_: int) -> int:
        return CheckResult.objects.filter(
            run_id=run_id, node_id=node_id, status=Status.RUNNING, claimed_by=claim
        ).update(status=status, reason=storable(reason)[:4000], finished_at=timezone.now(), portal_fault=portal_fault)

    return db_retry(write, what=f"closing the results of node {node_id} in run {run_id}")


def run_cancel(*, run: Run, reason: str = "cancelled by user") -> int:
    """Cancel every unfinished check of the run, queued or running. Returns how many.

    A running check is `cancelled` at once, so nothing it still does can be recorded as a verdict;
    the task holding it sees that at its next heartbeat and stops its process group on the node
    over its open connection (portal/runs/leases.py); a dead task's processes are stopped by the
    reaper. The run's log says what was cancelled and, later, what was stopped where."""
    now = timezone.now()
    with transaction.atomic():
        queued = CheckResult.objects.filter(run=run, status=Status.QUEUED).update(
            status=Status.CANCELLED, reason=reason[:4000], finished_at=now
        )
        running = CheckResult.objects.filter(run=run, status=Status.RUNNING).update(
            status=Status.CANCELLED, reason=f"{reason} while it ran"[:4000], finished_at=now
        )
        if queued or running:
            events.run_event_add(
                run_id=run.pk,
                kind=events.CANCELLED,
                message=f"{reason}: {running} running and {queued} queued check(s) cancelled",
            )
    run_finalize(run_id=run.pk)
    return queued + running


def _raw(output: Any, stream: str) -> bytes:
    raw = getattr(output, f"{stream}_bytes", None)
    return raw if raw is not None else rawoutput.text_bytes(getattr(output, stream))


def record_from_check(*, starting: int | None = None, **prepare: Any) -> bool:
    """Record a check's verdict with its commands' raw outputs (record_prepare_from_check, then
    record_write)."""
    return record_write(record_prepare_from_check(**prepare), starting=starting)


def record_prepare_from_check(
    *,
    result: CheckResult,
    claim: str,
    verdict: Verdict,
    measurements: list[CheckMeasurement],
    outputs: list[Any],
    **extra: Any,
) -> Record:
    """A check's verdict with its commands' raw outputs, ready to write (record_write): the exact
    bytes each transport read (CommandOutput.stdout_bytes), one section per command when there are
    several (a `### command` line before each). `extra` (series, attribution, node_set) goes to
    result_prepare."""
    extra.setdefault("truncated", any(getattr(o, "truncated", False) for o in outputs))
    if len(outputs) == 1:
        out = outputs[0]
        return result_prepare(
            **extra,
            result=result,
            claim=claim,
            verdict=verdict,
            measurements=measurements,
            command=out.command.display(),
            stdout_raw=_raw(out, "stdout"),
            stderr_raw=_raw(out, "stderr"),
            exit_code=out.exit_code,
            duration_s=out.duration_s,
        )
    stdout: list[bytes] = []
    stderr: list[bytes] = []
    for o in outputs:
        title = f"### {o.command.display()}\n".encode("utf-8", "backslashreplace")
        stdout += [title, _raw(o, "stdout"), b"\n"]
        err = _raw(o, "stderr")
        if err:
            stderr += [title, err, b"\n"]
    return result_prepare(
        **extra,
        result=result,
        claim=claim,
        verdict=verdict,
        measurements=measurements,
        command="\n".join(o.command.display() for o in outputs),
        stdout_raw=stdout,
        stderr_raw=stderr,
        exit_code=next((o.exit_code for o in outputs if o.exit_code not in (0, None)), outputs[-1].exit_code)
        if outputs
        else None,
        duration_s=sum(o.duration_s or 0 for o in outputs),
    )
