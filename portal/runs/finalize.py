"""Fan-in: closing a run once nothing of it is active, in a constant number of queries.

Every node task calls `run_finalize` when it ends (and the reaper, and cancel). In order:

1. One aggregate (status counts by scope) says whether every per-node result is final.
2. Cross-node checks, exactly once per run: consensus (`Check.consensus`: the odd node out on
   driver, firmware...) then fleet outliers (portal/runs/outliers.py), computed in one pass over the
   rows their checks declare (`consensus_names`, the outlier metrics' names): two reads, one UPDATE
   and one INSERT, whatever the run's size or the number of checks in its plan. They run OUTSIDE
   the run's row lock, so the pages, cancel and the other finishing tasks never wait on them. Exactly once:
   the pass takes a lock on the run's first per-node result (a row no one else writes once every
   per-node result is final) and writes a `cross_node` RunEvent in the same transaction as its
   changes; a second finaliser waits on that lock, then finds the event and does nothing; a
   finaliser that dies mid-way rolls back everything, event included, and the next one redoes it.
3. Under the run's row lock: the same aggregate again, then the next multi-node check is
   dispatched, or the run is closed with its worst status and its counts.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from operator import itemgetter

from django.db import DatabaseError, connection, transaction
from django.db.models import Count, F, Min, Q, QuerySet, Subquery, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from checks.core.base import Check, worst_status
from checks.core.base import Measurement as CheckMeasurement
from portal.runs import cells, crossnode, dispatch, grid, leases, outliers
from portal.runs.dbretry import db_retry
from portal.runs.lookups import AmongIds, Unindexed
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Measurement, Run, RunEvent, Scope, Status

logger = logging.getLogger(__name__)

CROSS_NODE_EVENT = "cross_node"
# The PostgreSQL channel a closed run's id is sent on (NOTIFY, delivered when the closing transaction
# commits): `kiln run --wait` listens on it and notices the end at once instead of at its next look.
RUN_CLOSED_CHANNEL = "kiln_run_closed"


def run_finalize(*, run_id: int, dispatch: bool = True) -> Run | None:
    """Close the run when nothing of it is active (see the module's docstring). Idempotent and safe
    to call from any number of workers at once; retried across a lost database connection."""
    return db_retry(lambda _: _finalize(run_id=run_id, dispatch=dispatch), what=f"closing run {run_id}")


def _tally(run_id: int) -> dict[tuple[str, str], int]:
    """{(scope, status): results}: one GROUP BY. `order_by()` drops Meta.ordering, whose join on
    node__hostname would otherwise make every result its own row."""
    rows = CheckResult.objects.filter(run_id=run_id).order_by().values_list("scope", "status").annotate(n=Count("id"))
    return {(scope, status): n for scope, status, n in rows}


def _active(tally: dict[tuple[str, str], int], scope: str, statuses: tuple[str, ...] = ACTIVE_STATUSES) -> bool:
    return any(n for (s, status), n in tally.items() if s == scope and status in statuses)


def _finalize(*, run_id: int, dispatch: bool) -> Run | None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.status not in ACTIVE_STATUSES:
        return run
    tally = _tally(run_id)
    if _active(tally, Scope.NODE):
        return run
    if any(scope == Scope.NODE for scope, _ in tally):
        cross_node_apply(run=run)
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status not in ACTIVE_STATUSES:
            return run
        tally = _tally(run_id)
        if _active(tally, Scope.NODE) or _active(tally, Scope.GROUP, (Status.RUNNING,)):
            return run
        next_group = run.results.filter(scope=Scope.GROUP, status=Status.QUEUED).order_by("position").first()
        if next_group is not None:
            # Multi-node checks run one at a time (two would share the fabric and skew each other).
            if dispatch and next_group.claimed_by == "":
                CheckResult.objects.filter(pk=next_group.pk, claimed_by="").update(
                    claimed_by="dispatched", lease_expires_at=leases.queued_lease()
                )
                result_id = next_group.pk
                transaction.on_commit(lambda: _enqueue_group(run_id, result_id))
            return run
        _close(run, tally)
    logger.info("run %s finished: %s (%s)", run.pk, run.status, run.reason)
    return run


def _close(run: Run, tally: dict[tuple[str, str], int]) -> None:
    """Set a run's final status, reason, times and summary from its results (inside the run's lock)."""
    counts: dict[str, int] = {}
    for (_, status), n in tally.items():
        counts[status] = counts.get(status, 0) + n
    final: str
    if counts.get(Status.CANCELLED):
        final = Status.CANCELLED
    else:
        judged = [s for s in counts if s != Status.SKIPPED]
        final = worst_status(judged) if counts else Status.ERROR
    run.status = final
    run.reason = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    run.finished_at = timezone.now()
    if run.started_at is None:
        # Nothing marked it started: its first claimed check did start it; a run cancelled
        # before any check was claimed took no time.
        first = CheckResult.objects.filter(run_id=run.pk).aggregate(first=Min("started_at"))["first"]
        run.started_at = first or run.finished_at
    nodes = CheckResult.objects.filter(run_id=run.pk).values("node_id").distinct().count()
    # "cells": what the runs list shows, counted as the run page counts (cells.RunCounts);
    # "slowest": the nodes whose checks took longest (the run page's summary reads them from here).
    shown = cells.run_counts(run=run).cells
    slowest = [[host, seconds] for host, seconds in grid.slowest_read(run_id=run.pk)]
    run.summary = {
        "results": sum(counts.values()),
        "nodes": nodes,
        "counts": counts,
        "cells": shown,
        "slowest": slowest,
    }
    run.save(update_fields=["status", "reason", "finished_at", "started_at", "summary"])
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [RUN_CLOSED_CHANNEL, str(run.pk)])


def summary_complete(*, run_id: int) -> bool:
    """Adds what closing a run stores today ("cells", "slowest") to a closed run's summary that
    lacks it (closed by an older Kiln, or copied in by bench/history_seed.py); the run page reads
    these instead of counting every result. Idempotent: True when it wrote."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status in ACTIVE_STATUSES:
            return False
        summary = dict(run.summary or {})
        if "cells" in summary and "slowest" in summary:
            return False
        summary.setdefault("cells", cells.run_counts(run=run).cells)
        summary.setdefault("slowest", [[host, seconds] for host, seconds in grid.slowest_read(run_id=run.pk)])
        run.summary = summary
        run.save(update_fields=["summary"])
    return True


def _enqueue_group(run_id: int, result_id: int) -> None:
    dispatch.enqueue_group(run_id=run_id, result_id=result_id)


def cross_node_apply(*, run: Run) -> bool:
    """Consensus, then outliers, once per run, when every per-node result is final. True when this
    call applied them. A bug in them is logged and noted in the run's log, and the run still closes
    (a cross-node check is an extra judgement; it must not hold the run open); a database error
    rolls everything back and is raised, so the next finaliser tries again."""
    if RunEvent.objects.filter(run_id=run.pk, kind=CROSS_NODE_EVENT).exists():
        return False
    with transaction.atomic():
        # The mutex: the run's first per-node result, not the run's row (see the module docstring).
        list(
            CheckResult.objects.filter(run_id=run.pk, scope=Scope.NODE)
            .order_by("pk")
            .select_for_update()
            .values_list("pk", flat=True)[:1]
        )
        if RunEvent.objects.filter(run_id=run.pk, kind=CROSS_NODE_EVENT).exists():
            return False  # another finaliser did it while this one waited on the lock
        if CheckResult.objects.filter(run_id=run.pk, scope=Scope.NODE, status__in=ACTIVE_STATUSES).exists():
            return False  # a result went back to the queue (the reaper): not all in yet
        try:
            with transaction.atomic():
                failed, flagged = _apply_cross_node(run)
            message = f"cross-node checks applied: {failed} result(s) failed by consensus, {flagged} fleet outlier(s)"
        except DatabaseError:
            raise
        except Exception as exc:
            logger.exception("run %s: cross-node checks failed", run.pk)
            message = f"cross-node checks not applied: internal error in Kiln: {type(exc).__name__}: {exc}"[:2000]
        RunEvent.objects.create(run_id=run.pk, kind=CROSS_NODE_EVENT, message=message)
    return True


# Finished with a verdict on the hardware: an error result carries no trusted value, and says nothing
# a cross-node check could overrule.
JUDGED = (Status.PASS, Status.WARN, Status.FAIL)
OUTLIER_Z = "outlier_z"  # the measurement a flagged outlier gets (labels: metric), for the charts
# Measurements per round trip of the streamed read of results recorded without a digest.
ROWS_PER_FETCH = 5000


@dataclass
class _Result:
    """A judged per-node result of an item that a cross-node check reads, its status and reason as
    the pass leaves them (consensus first, then outliers)."""

    item_key: str
    hostname: str
    status: str
    reason: str
    changed: bool = False


Flagged = list[tuple[outliers.Metric, outliers.Outlier]]
Ordered = tuple[tuple[bool, int, str, int], CheckMeasurement]  # a consensus fact with its stored order


@dataclass
class _Declared:
    """What the cross-node checks of one run read, and what they change. Filled by two queries,
    whatever the run's size or its plan's width: the judged results of the items that have a
    consensus or an outlier metric, each with its digest (portal/runs/crossnode.py), then the
    outlier marks already made; a third streams the declared rows of the results recorded without
    a digest (an older Kiln's), when there are any."""

    consensus: dict[str, tuple[type[Check], frozenset[str] | None]]  # item key -> its check, the names it reads
    metrics: dict[str, tuple[outliers.Metric, ...]]  # item key -> its outlier metrics
    results: dict[int, _Result] = field(default_factory=dict)
    by_item: dict[str, list[int]] = field(default_factory=dict)  # item key -> result ids, by hostname
    facts: dict[int, list[CheckMeasurement]] = field(default_factory=dict)  # result id -> its facts, stored order
    values: dict[int, dict[str, float | None]] = field(default_factory=dict)  # result id -> metric key -> value
    done: set[tuple[int, str | None]] = field(default_factory=set)  # (result id, metric) already flagged
    flags: list[Measurement] = field(default_factory=list)  # the outlier_z rows to create


def _apply_cross_node(run: Run) -> tuple[int, int]:
    """Consensus, then outliers (a node consensus failed is not touched), from what their checks
    declare; then one UPDATE of the results they changed and one INSERT of the outlier marks.
    Returns (results failed by consensus, outliers flagged)."""
    declared = _declared_read(run)
    failed = _apply_consensus(declared)
    flagged = _apply_outliers(declared)
    changed = [CheckResult(pk=pk, status=r.status, reason=r.reason) for pk, r in declared.results.items() if r.changed]
    CheckResult.objects.bulk_update(changed, ["status", "reason"])  # no batch size: one statement on PostgreSQL
    _outlier_z_create(declared.flags)
    if flagged:
        logger.info("run %s: %d fleet outlier(s)", run.pk, flagged)
    return failed, flagged


def _outlier_z_create(rows: list[Measurement]) -> None:
    Measurement.objects.bulk_create(rows)  # no batch size: one statement on PostgreSQL


def _declared_read(run: Run) -> _Declared:
    """The run's plan items that a cross-node check reads, their judged results with their digests,
    the outlier marks they already have, and the rows of those without a digest (see _Declared)."""
    declared = _declared_items(run)
    keys = sorted({*declared.consensus, *declared.metrics})
    if not keys:
        return declared
    judged = CheckResult.objects.filter(run_id=run.pk, scope=Scope.NODE, item_key__in=keys, status__in=JUDGED)
    # By hostname, as the consensus has always seen the nodes. The digest as text, decoded here.
    results = judged.order_by("node__hostname", "position", "id").values_list(
        "id", "item_key", "node__hostname", "status", "reason", Cast("cross_node", TextField())
    )
    undigested: list[int] = []
    for pk, item_key, hostname, status, reason, digest_text in results:
        declared.results[pk] = _Result(item_key, hostname, status, reason)
        declared.by_item.setdefault(item_key, []).append(pk)
        digest = json.loads(digest_text) if digest_text else None
        if digest is None:
            undigested.append(pk)
            continue
        if item_key in declared.consensus:
            declared.facts[pk] = crossnode.facts(digest)
        if item_key in declared.metrics:
            declared.values[pk] = digest.get("metrics", {})
    if not declared.results:
        return declared
    if declared.metrics:
        _marks_read(declared, judged)
    if undigested:
        _undigested_read(declared, undigested, judged.filter(cross_node__isnull=True))
    return declared


def _marks_read(declared: _Declared, judged: QuerySet[CheckResult]) -> None:
    """The outlier marks the run's results already hold: one index probe per result (one name)."""
    marks = Measurement.objects.filter(
        AmongIds(
            F("result_id"), Subquery(judged.filter(item_key__in=sorted(declared.metrics)).order_by().values("id"))
        ),
        name=OUTLIER_Z,
    ).values_list("result_id", "labels")
    declared.done.update((result_id, (labels or {}).get("metric")) for result_id, labels in marks)


def _undigested_read(declared: _Declared, ids: list[int], undigested: QuerySet[CheckResult]) -> None:
    """The declared rows of the results recorded without a digest, streamed: consensus facts in
    stored order, and each outlier metric's value read from the rows as the digest would hold it."""
    outlier_names = {name for found in declared.metrics.values() for metric in found for name in metric.names}
    rows = (
        Measurement.objects.annotate(name_tested=Unindexed("name"))
        .filter(
            _declared_names(declared, outlier_names, ids),
            AmongIds(F("result_id"), Subquery(undigested.order_by().values("id"))),
        )
        .order_by()  # one index probe per result, in no order: facts are sorted below, metrics need none
        .annotate(labels_text=Cast("labels", TextField()))
        .values_list("id", "result_id", "name", "value", "unit", "gpu", "text", "threshold", "ok", "labels_text")
    )
    ordered: dict[int, list[Ordered]] = {}
    metric_rows: dict[int, list[outliers.Row]] = {}
    # Straight from a chunked cursor: none of the columns needs Django's conversions.
    sql, params = rows.query.sql_with_params()
    with connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while chunk := cursor.fetchmany(ROWS_PER_FETCH):
            _undigested_take(declared, outlier_names, chunk, ordered, metric_rows)
    for result_id, found in ordered.items():
        declared.facts[result_id] = [fact for _, fact in sorted(found, key=itemgetter(0))]
    for result_id in ids:
        metrics = declared.metrics.get(declared.results[result_id].item_key, ())
        read = metric_rows.get(result_id, [])
        declared.values[result_id] = {metric.key: crossnode.finite(metric.read(read)) for metric in metrics}


def _declared_items(run: Run) -> _Declared:
    """The node-scoped plan items with a consensus or outlier metrics, from the run's snapshot."""
    consensus: dict[str, tuple[type[Check], frozenset[str] | None]] = {}
    metrics: dict[str, tuple[outliers.Metric, ...]] = {}
    for item in run.plan_snapshot["items"]:
        if item.get("scope", Scope.NODE) != Scope.NODE:
            continue
        agreed = crossnode.consensus_of(item["kind"])
        if agreed is not None:
            consensus[item["key"]] = agreed
        if item["kind"] in outliers.METRICS:
            metrics[item["key"]] = outliers.METRICS[item["kind"]]
    return _Declared(consensus=consensus, metrics=metrics)


def _declared_names(declared: _Declared, outlier_names: set[str], ids: list[int]) -> Q:
    """Which measurements of the results `ids` the cross-node checks read: the names they declare,
    and every row of a result whose consensus declares no names."""
    names = set(outlier_names)
    for _, declared_names in declared.consensus.values():
        names |= declared_names or set()
    wanted = Q(name_tested__in=sorted(names))
    among = set(ids)
    every = [
        pk
        for key, (_, declared_names) in declared.consensus.items()
        if declared_names is None
        for pk in declared.by_item.get(key, [])
        if pk in among
    ]
    if every:
        wanted |= Q(result_id__in=every)
    return wanted


def _undigested_take(
    declared: _Declared,
    outlier_names: set[str],
    chunk: list[tuple],
    ordered: dict[int, list[Ordered]],
    metric_rows: dict[int, list[outliers.Row]],
) -> None:
    """Streamed measurement rows, each kept as a consensus fact and/or an outlier metric's row."""
    results, consensus, metrics = declared.results, declared.consensus, declared.metrics
    for pk, result_id, name, value, unit, gpu, text, threshold, ok, labels_text in chunk:
        item_key = results[result_id].item_key
        labels = _labels(labels_text)
        agreed = consensus.get(item_key)
        if agreed is not None and (agreed[1] is None or name in agreed[1]):
            fact = CheckMeasurement(
                name=name, value=value, unit=unit, gpu=gpu, text=text, threshold=threshold, ok=ok, labels=labels
            )
            ordered.setdefault(result_id, []).append((crossnode.stored_order(gpu, name, pk), fact))
        if item_key in metrics and name in outlier_names:
            row = {"result_id": result_id, "name": name, "value": value, "gpu": gpu, "labels": labels}
            metric_rows.setdefault(result_id, []).append(row)


def _labels(text: str | None) -> dict:
    """Labels read as text and decoded only when there are some: most measurements have none."""
    return json.loads(text) if text and text != "{}" else {}


def _apply_consensus(declared: _Declared) -> int:
    """Cross-node agreement: each check's `consensus` names the nodes whose facts (driver, firmware,
    kernel...) differ from the strict majority of the run; those results become `fail`, the reason
    appended to a failed one's. In memory (_apply_cross_node writes). Returns how many."""
    failed = 0
    for item_key, (check_class, _) in declared.consensus.items():
        hosts = {declared.results[pk].hostname: pk for pk in declared.by_item.get(item_key, [])}
        if len(hosts) < 3:
            continue  # a majority of two says nothing
        facts = {host: declared.facts.get(pk, []) for host, pk in hosts.items()}
        for hostname, reason in check_class.consensus(facts).items():
            result = declared.results[hosts[hostname]]
            if reason in result.reason:
                continue  # already applied (a run finalised before this code kept no event)
            result.reason = (f"{result.reason}; {reason}" if result.status == Status.FAIL else reason)[:4000]
            result.status, result.changed = Status.FAIL, True
            failed += 1
    return failed


def _apply_outliers(declared: _Declared) -> int:
    """Fleet outliers (portal/runs/outliers.py): a node whose key metric lags the run's median by a
    robust z-score becomes `warn` when it passed, with the deviation appended to its reason and an
    `outlier_z` measurement (labels: metric) for the charts. fail/error results are left alone, and so
    is a result consensus failed. Idempotent: a result that already holds an `outlier_z` for a metric
    is not flagged again. In memory (_apply_cross_node writes). Returns how many it flagged."""
    found: dict[int, Flagged] = {}
    for item_key, metrics in declared.metrics.items():
        ids = declared.by_item.get(item_key, [])
        for metric in metrics:
            values = {pk: declared.values.get(pk, {}).get(metric.key) for pk in ids}
            per_node = {pk: value for pk, value in values.items() if value is not None}
            for result_id, outlier in outliers.find_outliers(per_node, low_is_bad=metric.low_is_bad).items():
                judged = declared.results[result_id].status in (Status.PASS, Status.WARN)
                if judged and (result_id, metric.key) not in declared.done:
                    found.setdefault(result_id, []).append((metric, outlier))
    for result_id, flagged in found.items():
        declared.flags += _flag_outlier(result_id, declared.results[result_id], flagged)
    return len(declared.flags)


def _flag_outlier(result_id: int, result: _Result, flagged: Flagged) -> list[Measurement]:
    """Turns `result` into a warn naming its deviations; the outlier_z rows to create."""
    reasons = [outliers.reason(metric, outlier) for metric, outlier in flagged]
    result.status, result.changed = Status.WARN, True
    result.reason = "; ".join([result.reason, *reasons] if result.reason else reasons)[:4000]
    return [
        Measurement(
            result_id=result_id,
            name=OUTLIER_Z,
            value=round(outlier.z, 2),
            threshold=f"|z| <= {outliers.Z_THRESHOLD}",
            ok=False,
            labels={
                "metric": metric.key,
                "value": outliers.show(metric, outlier.value),
                "median": outliers.show(metric, outlier.median),
                "deviation_pct": f"{outlier.deviation * 100:.1f}",
            },
        )
        for metric, outlier in flagged
    ]
