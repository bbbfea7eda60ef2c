"""Seeds history shaped like real runs for bench/bench_history.py (a month of runs at 1,250 nodes).

The shapes come from Kiln itself, not from guesses: the demo acceptance plan runs once, inline, on
four simulated nodes (the testbed's simulator: the same parsers, measurements, series and raw
outputs a real run records); one healthy node's results are the template. Each seeded run copies
the template to every node of a cluster inside PostgreSQL (INSERT ... SELECT over the template rows
and the cluster's nodes), with the measured values jittered by ±2 % and about 1 % of results failed.
That is the server-side equivalent of COPY: no row crosses the client at all, which is what makes
1,250 nodes × 30 runs (about 25 M measurements) take minutes rather than hours.
"""

from __future__ import annotations

import io
import time
from datetime import timedelta
from typing import Any

from ClusterShell.NodeSet import NodeSet

# Every demo node (faults cleared with --healthy): the plan's heat soak spans the whole cluster and
# reads each node's power, so a run on a subset errors on the nodes left out of it.
DEMO_NODES = "all demo nodes"
TEMPLATE_NODE = "demo01"
NODES_PER_RACK = 32  # an HGX rack of 4 nodes x 8 is common; 32 keeps the heatmap's rows few
FAIL_SHARE = 0.01  # about one result in a hundred fails, as in a month of sweeps
JITTER = 0.04  # measured values vary by ±2 % around the template's


def template_run() -> Any:
    """The demo acceptance plan run inline on four simulated nodes; returns the Run."""
    from django.core.management import call_command

    from portal.demo.facility import facility_served
    from portal.runs.models import Run

    call_command("kiln_demo", "--healthy", stdout=io.StringIO())
    try:
        with facility_served():  # the heat soak reads the demo's PDUs and coolant loop
            call_command("kiln_run", "demo", "demo-acceptance", "--inline", stdout=io.StringIO())
    except SystemExit as exc:  # kiln_run exits with the run's verdict: 0 when everything passed
        if exc.code:
            raise RuntimeError(f"the template run did not pass (kiln_run exit {exc.code})") from None
    return Run.objects.filter(cluster__name="demo").latest("id")


def cluster_make(name: str, size: int) -> Any:
    from portal.inventory.models import Cluster, Node

    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(
        Node(
            cluster=cluster,
            hostname=f"{name}-gpu{i:05d}",
            rack=f"r{i // NODES_PER_RACK:03d}",
            position=i % NODES_PER_RACK,
        )
        for i in range(size)
    )
    return cluster


def _columns(model: Any) -> list[str]:
    return [f.column for f in model._meta.concrete_fields if not f.primary_key]


def _select_list(model: Any, overrides: dict[str, str], alias: str) -> tuple[str, str]:
    """(column list, select list) copying every column of `model` from `alias` except the overrides."""
    columns = _columns(model)
    return ", ".join(columns), ", ".join(overrides.get(c, f"{alias}.{c}") for c in columns)


def seed_runs(cluster: Any, template: Any, runs: int, *, say: Any = print) -> list[int]:
    """`runs` finished runs of the template's plan on every node of `cluster`, one a day, oldest first."""
    from django.db import connection, transaction
    from django.utils import timezone

    from portal.runs.models import Run

    template_node = template.results.filter(node__hostname=TEMPLATE_NODE).values_list("node_id", flat=True)[0]
    node_set = str(NodeSet.fromlist(cluster.nodes.values_list("hostname", flat=True)))
    from portal.runs.partitions import month_start, partition_ensure

    ids = []
    now = timezone.now()
    # The months' partitions first, as a portal that has been running that long has them (the daily
    # retention task makes them ahead): rows of a month with no partition land in the default one.
    first = month_start(now - timedelta(days=runs + 1))
    while first <= now:
        partition_ensure(first)
        first = month_start(first, add=1)
    for index in range(runs):
        t0 = time.perf_counter()
        started = now - timedelta(days=runs - index, hours=1)
        run = Run.objects.create(
            cluster=cluster,
            plan=template.plan,
            plan_snapshot=template.plan_snapshot,
            node_set=node_set,
            status="fail",
            reason="seeded history",
            started_at=started,
            finished_at=started + (template.finished_at - template.started_at) + timedelta(minutes=20),
        )
        shift = started - template.started_at
        with transaction.atomic(), connection.cursor() as cursor:
            # The evidence guards (portal/certificates/immutability.py) are per-row triggers: a lookup
            # for every copied measurement, 80 % of the copy's time. These rows copy the template's,
            # which the guards accepted once, into runs no certificate cites; the guards stay on for
            # everything else (the setting lasts until this transaction ends).
            cursor.execute("SET LOCAL session_replication_role = replica")
            _copy_results(cursor, run.pk, cluster.pk, template.pk, template_node, node_set, shift)
            _copy_children(cursor, run.pk, template.pk, template_node)
            _copy_metric_list(cursor, run.pk, template.pk)
            _write_summary(cursor, run.pk)
        ids.append(run.pk)
        say(f"  {cluster.name}: run {index + 1}/{runs} seeded in {time.perf_counter() - t0:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return ids


def _copy_results(
    cursor: Any, run_id: int, cluster_id: int, template_id: int, template_node: int, node_set: str, shift: timedelta
) -> None:
    """Node results: the template node's, once per node of the cluster. Group results: once per run,
    spanning the whole cluster."""
    from portal.runs.models import CheckResult

    table = CheckResult._meta.db_table
    node_table = CheckResult._meta.get_field("node").related_model._meta.db_table
    shifted = {c: f"t.{c} + %(shift)s" for c in ("started_at", "finished_at", "heartbeat_at", "command_started_at")}
    per_node = {
        **shifted,
        "run_id": "%(run)s",
        "node_id": "n.id",
        "status": f"CASE WHEN random() < {FAIL_SHARE} THEN 'fail' ELSE t.status END",
        "lease_expires_at": "NULL",
    }
    columns, select = _select_list(CheckResult, per_node, "t")
    cursor.execute(
        f"INSERT INTO {table} ({columns}) SELECT {select} FROM {table} t CROSS JOIN {node_table} n "
        "WHERE t.run_id = %(template)s AND t.node_id = %(node)s AND t.scope = 'node' AND n.cluster_id = %(cluster)s",
        {"run": run_id, "template": template_id, "node": template_node, "cluster": cluster_id, "shift": shift},
    )
    group = {
        **shifted,
        "run_id": "%(run)s",
        "node_id": f"(SELECT min(id) FROM {node_table} WHERE cluster_id = %(cluster)s)",
        "node_set": "%(node_set)s",
        "attribution": "'{}'::jsonb",
        "lease_expires_at": "NULL",
    }
    columns, select = _select_list(CheckResult, group, "t")
    cursor.execute(
        f"INSERT INTO {table} ({columns}) SELECT {select} FROM {table} t "
        "WHERE t.run_id = %(template)s AND t.scope = 'group'",
        {"run": run_id, "template": template_id, "cluster": cluster_id, "node_set": node_set, "shift": shift},
    )


def _copy_children(cursor: Any, run_id: int, template_id: int, template_node: int) -> None:
    """Each new result gets its template's measurements (values jittered) and series."""
    from portal.runs.models import CheckResult, Measurement, Series

    results = CheckResult._meta.db_table
    for model, overrides in (
        # recorded_at (the partition key on PostgreSQL): when its result finished, as recording writes it.
        (
            Measurement,
            {
                "result_id": "r.id",
                "value": f"c.value * (1 + (random() - 0.5) * {JITTER})",
                "recorded_at": "COALESCE(r.finished_at, r.started_at, now())",
            },
        ),
        (Series, {"result_id": "r.id"}),
    ):
        table = model._meta.db_table
        columns, select = _select_list(model, overrides, "c")
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {select} FROM {results} r "
            f"JOIN {results} t ON t.run_id = %(template)s AND t.item_key = r.item_key "
            "AND (t.node_id = %(node)s OR t.scope = 'group') AND t.scope = r.scope "
            f"JOIN {table} c ON c.result_id = t.id WHERE r.run_id = %(run)s",
            {"run": run_id, "template": template_id, "node": template_node},
        )


def _copy_metric_list(cursor: Any, run_id: int, template_id: int) -> None:
    """The run's metric list (RunMetric), as recording the results would have written it."""
    from portal.runs.models import RunMetric

    table = RunMetric._meta.db_table
    columns, select = _select_list(RunMetric, {"run_id": "%(run)s"}, "m")
    cursor.execute(
        f"INSERT INTO {table} ({columns}) SELECT {select} FROM {table} m WHERE m.run_id = %(template)s",
        {"run": run_id, "template": template_id},
    )


def _write_summary(cursor: Any, run_id: int) -> None:
    """The run's summary, as closing it writes (portal/runs/finalize.py)."""
    from portal.runs.models import CheckResult, Run

    results, runs = CheckResult._meta.db_table, Run._meta.db_table
    cursor.execute(
        f"UPDATE {runs} SET summary = jsonb_build_object("
        f"'results', (SELECT count(*) FROM {results} WHERE run_id = %(run)s), "
        f"'nodes', (SELECT count(DISTINCT node_id) FROM {results} WHERE run_id = %(run)s), "
        f"'counts', (SELECT jsonb_object_agg(status, n) FROM "
        f"(SELECT status, count(*) AS n FROM {results} WHERE run_id = %(run)s GROUP BY status) c)) "
        "WHERE id = %(run)s",
        {"run": run_id},
    )


def describe(cluster: Any) -> str:
    """Rows and sizes of what was seeded for `cluster` (the whole database's size too)."""
    from django.db import connection

    from portal.runs.models import CheckResult, Measurement

    results = CheckResult.objects.filter(run__cluster=cluster)
    measurements = Measurement.objects.filter(result__run__cluster=cluster).count()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        size = cursor.fetchone()[0]
    count = results.count()
    per = measurements / max(count, 1)
    return f"{cluster.name}: {count} results, {measurements} measurements ({per:.0f} per result); database {size}"
