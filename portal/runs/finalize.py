"""Fan-in: closing a run once nothing of it is active, in a constant number of queries.

Every node task calls `run_finalize` when it ends (and the reaper, and cancel). In order:

1. One aggregate (status counts by scope) says whether every per-node result is final.
2. Cross-node checks, exactly once per run: consensus (`Check.consensus`: the odd node out on
   driver, firmware...) then fleet outliers (portal/runs/outliers.py). They run OUTSIDE the run's
   row lock, so the pages, cancel and the other finishing tasks never wait on them. Exactly once:
   the pass takes a lock on the run's first per-node result (a row no one else writes once every
   per-node result is final) and writes a `cross_node` RunEvent in the same transaction as its
   changes; a second finaliser waits on that lock, then finds the event and does nothing; a
   finaliser that dies mid-way rolls back everything, event included, and the next one redoes it.
3. Under the run's row lock: the same aggregate again, then the next multi-node check is
   dispatched, or the run is closed with its worst status and its counts.
"""

from __future__ import annotations

import inspect
import json
import logging

from django.db import DatabaseError, transaction
from django.db.models import Count, Min, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from checks.core.base import REGISTRY, Check, worst_status
from checks.core.base import Measurement as CheckMeasurement
from portal.runs import cells, dispatch, grid, leases, outliers
from portal.runs.dbretry import db_retry
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Measurement, Run, RunEvent, Scope, Status

logger = logging.getLogger(__name__)

CROSS_NODE_EVENT = "cross_node"


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
                failed = _apply_consensus(run)
                flagged = _apply_outliers(run)  # after consensus: a node consensus failed is not touched
            message = f"cross-node checks applied: {failed} result(s) failed by consensus, {flagged} fleet outlier(s)"
        except DatabaseError:
            raise
        except Exception as exc:
            logger.exception("run %s: cross-node checks failed", run.pk)
            message = f"cross-node checks not applied: internal error in Kiln: {type(exc).__name__}: {exc}"[:2000]
        RunEvent.objects.create(run_id=run.pk, kind=CROSS_NODE_EVENT, message=message)
    return True


def _apply_consensus(run: Run) -> int:
    """Cross-node agreement: each check's `consensus` names the nodes whose facts (driver,
    firmware, kernel...) differ from the strict majority of the run; those results become `fail`.
    Two queries per check kind that has a consensus, rows rather than model objects (a 1,250-node
    run has about 100k such measurements), and one batched update. Returns how many."""
    changed: list[CheckResult] = []
    for item in run.plan_snapshot["items"]:
        if item.get("scope", Scope.NODE) != Scope.NODE or item["kind"] not in REGISTRY:
            continue
        check_class = REGISTRY[item["kind"]]
        if inspect.getattr_static(check_class, "consensus") is inspect.getattr_static(Check, "consensus"):
            continue  # the kind keeps Check's consensus: it has nothing to agree on
        results = {
            host: (pk, status, reason)
            for pk, host, status, reason in run.results.filter(
                item_key=item["key"], status__in=[Status.PASS, Status.WARN, Status.FAIL]
            ).values_list("id", "node__hostname", "status", "reason")
        }
        if len(results) < 3:
            continue  # a majority of two says nothing
        facts = _facts_per_node(results, check_class.consensus_names)
        for hostname, reason in check_class.consensus(facts).items():
            pk, status, old = results[hostname]
            if reason in old:
                continue  # already applied (a run finalised before this code kept no event)
            new = (f"{old}; {reason}" if status == Status.FAIL else reason)[:4000]
            changed.append(CheckResult(pk=pk, status=Status.FAIL, reason=new))
    CheckResult.objects.bulk_update(changed, ["status", "reason"], batch_size=500)
    return len(changed)


def _facts_per_node(
    results: dict[str, tuple[int, str, str]], names: frozenset[str] | None
) -> dict[str, list[CheckMeasurement]]:
    """hostname -> its result's measurements that the check's consensus reads (`names`; None:
    all), as the checks know them, in the stored order."""
    host_of = {pk: host for host, (pk, _, _) in results.items()}
    per_node: dict[str, list[CheckMeasurement]] = {host: [] for host in results}
    measurements = Measurement.objects.filter(result_id__in=list(host_of))
    if names is not None:
        measurements = measurements.filter(name__in=sorted(names))
    rows = (
        measurements.order_by("result_id", "gpu", "name", "id")
        .annotate(labels_text=Cast("labels", TextField()))
        .values_list("result_id", "name", "value", "unit", "gpu", "text", "threshold", "ok", "labels_text")
    )
    for result_id, name, value, unit, gpu, text, threshold, ok, labels in rows.iterator(chunk_size=5000):
        per_node[host_of[result_id]].append(
            CheckMeasurement(
                name=name, value=value, unit=unit, gpu=gpu, text=text, threshold=threshold, ok=ok,
                labels=_labels(labels),
            )
        )  # fmt: skip
    return per_node


def _labels(text: str | None) -> dict:
    """Labels read as text and decoded only when there are some: most measurements have none, and
    decoding 180k empty objects was a third of closing a 1,250-node run."""
    return json.loads(text) if text and text != "{}" else {}


def _apply_outliers(run: Run) -> int:
    """Fleet outliers (portal/runs/outliers.py): a node whose key metric lags the run's median by a
    robust z-score becomes `warn` when it passed, with the deviation appended to its reason and an
    `outlier_z` measurement (labels: metric) for the charts. fail/error results are left alone.

    Idempotent: a result that already holds an `outlier_z` for a metric is not flagged again. A
    handful of queries per run whatever its size. Returns how many outliers it flagged."""
    items = [
        item
        for item in run.plan_snapshot["items"]
        if item.get("scope", Scope.NODE) == Scope.NODE and item["kind"] in outliers.METRICS
    ]
    if not items:
        return 0
    found = _find_outliers(run, items)
    if not found:
        return 0
    results = list(CheckResult.objects.filter(pk__in=list(found)).only("id", "status", "reason"))
    new_rows = [row for result in results for row in _flag_outlier(result, found[result.pk])]
    CheckResult.objects.bulk_update(results, ["status", "reason"], batch_size=500)
    Measurement.objects.bulk_create(new_rows, batch_size=500)
    logger.info("run %s: %d fleet outlier(s)", run.pk, len(new_rows))
    return len(new_rows)


Flagged = list[tuple[outliers.Metric, outliers.Outlier]]


def _find_outliers(run: Run, items: list[dict]) -> dict[int, Flagged]:
    """result id -> the metrics it lags the fleet in, for judged results not flagged already."""
    per_item, judged = _outlier_rows(run, items)
    done = {
        (result_id, (labels or {}).get("metric"))
        for result_id, labels in Measurement.objects.filter(result__run=run, name="outlier_z").values_list(
            "result_id", "labels"
        )
    }
    found: dict[int, Flagged] = {}
    for item in items:
        per_node = per_item.get(item["key"], {})
        for metric in outliers.METRICS[item["kind"]]:
            for result_id, outlier in outliers.fleet_outliers(metric, per_node).items():
                if judged[result_id] in (Status.PASS, Status.WARN) and (result_id, metric.key) not in done:
                    found.setdefault(result_id, []).append((metric, outlier))
    return found


def _outlier_rows(run: Run, items: list[dict]) -> tuple[dict[str, dict[int, list[outliers.Row]]], dict[int, str]]:
    """The measurements the items' outlier metrics read, per item key and result; each result's status."""
    names = {name for item in items for metric in outliers.METRICS[item["kind"]] for name in metric.names}
    results = {
        pk: (item_key, status)
        for pk, item_key, status in CheckResult.objects.filter(
            run=run,
            scope=Scope.NODE,
            item_key__in=[item["key"] for item in items],
            status__in=[Status.PASS, Status.WARN, Status.FAIL],  # error results carry no trusted value
        )
        .order_by()
        .values_list("id", "item_key", "status")
    }
    # By result id, with no join and no default ordering (which joined results and nodes back in).
    rows = (
        Measurement.objects.filter(result_id__in=list(results), name__in=names)
        .order_by()
        .annotate(labels_text=Cast("labels", TextField()))
        .values_list("result_id", "name", "value", "gpu", "labels_text")
    )
    per_item: dict[str, dict[int, list[outliers.Row]]] = {}
    judged: dict[int, str] = {}
    for result_id, name, value, gpu, labels in rows.iterator(chunk_size=5000):
        item_key, status = results[result_id]
        row = {"result_id": result_id, "name": name, "value": value, "gpu": gpu, "labels": _labels(labels)}
        per_item.setdefault(item_key, {}).setdefault(result_id, []).append(row)
        judged[result_id] = status
    return per_item, judged


def _flag_outlier(result: CheckResult, flagged: Flagged) -> list[Measurement]:
    """Turns `result` into a warn naming its deviations (not saved); the outlier_z rows to create."""
    reasons = [outliers.reason(metric, outlier) for metric, outlier in flagged]
    result.status = Status.WARN
    result.reason = "; ".join([result.reason, *reasons] if result.reason else reasons)[:4000]
    return [
        Measurement(
            result=result,
            name="outlier_z",
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
