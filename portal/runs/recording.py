"""A result recorded in one statement: its verdict, measurements, series and run metrics.

A node task records each check between its commands, in a database phase of its own (worker/db.py),
and a worker runs hundreds of them on a few connections. Recorded through the ORM, one result was
seven round trips (BEGIN, UPDATE, series INSERT, COPY start and end, run metrics INSERT, COMMIT);
beside a loaded fan-out each round trip waits for the worker's thread and the server's process to
be scheduled again, so a phase held its connection for ~150 ms and the other nodes queued behind it
(bench/bench_fanout.py: `db_wait` 7 s per node at 64 nodes). Here the same writes are one
statement of data-modifying CTEs: atomic on its own, one round trip, and every insert keyed on
the UPDATE that finishes the result, so a result that was already finished or taken gets no rows.
Each table's rows travel as one JSON parameter, unpacked by the server (jsonb_array_elements).

PostgreSQL only; services.result_record keeps the ORM path for other databases."""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Q
from django.db.models.sql import UpdateQuery

from portal.runs import crossnode
from portal.runs.models import CheckResult, Measurement, RunMetric, Series, Status

# Each inserted table's columns, in the order of a row's cells, with their types.
MEASUREMENT_COLUMNS = (
    ("name", "varchar"),
    ("value", "float8"),
    ("text", "varchar"),
    ("unit", "varchar"),
    ("gpu", "int4"),
    ("threshold", "varchar"),
    ("ok", "bool"),
    ("labels", "jsonb"),
)
SERIES_COLUMNS = (
    ("name", "varchar"),
    ("unit", "varchar"),
    ("x_unit", "varchar"),
    ("gpu", "int4"),
    ("labels", "jsonb"),
    ("count", "int4"),
    ("x_packed", "bytea"),
    ("y_packed", "bytea"),
    ("view_packed", "bytea"),
    ("points_sha256", "varchar"),
)
RUN_METRIC_COLUMNS = (("name", "varchar"), ("phase", "varchar"), ("unit", "varchar"))


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _cell(index: int, kind: str) -> str:
    """Cell `index` of a row (`e.r`, a JSON array) as a column of type `kind`."""
    if kind == "jsonb":
        return f"e.r->{index}"
    if kind == "bytea":
        return f"decode(e.r->>{index}, 'base64')"
    return f"(e.r->>{index})::{kind}"


def _insert(table: str, keys: dict[str, str], columns: tuple[tuple[str, str], ...], *, at: bool = False) -> str:
    """`INSERT INTO table (keys..., columns...[, recorded_at]) SELECT done's keys, each row's cells
    FROM done`, the rows being one JSON array of arrays (a parameter), inserted in their order
    (identities are assigned in it, as COPY did). `keys`: column -> the column of `done` it takes."""
    names = [*keys, *(name for name, _ in columns), *(["recorded_at"] if at else [])]
    values = [f"done.{_q(source)}" for source in keys.values()]
    values += [_cell(i, kind) for i, (_, kind) in enumerate(columns)] + (["%s"] if at else [])
    return (
        f"INSERT INTO {_q(table)} ({', '.join(map(_q, names))}) SELECT {', '.join(values)} "
        "FROM done CROSS JOIN jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(r, n) ORDER BY e.n"
    )


def _real(value: float | None) -> float | str | None:
    """A value as JSON carries it to a float8 column: a float, an int past a float's range as the
    infinity of its sign (what the judge saw it as), NaN and the infinities as the words float8
    reads (JSON has no such numbers)."""
    if value is None:
        return None
    try:
        real = float(value)
    except OverflowError:
        real = math.inf if value > 0 else -math.inf
    if math.isfinite(real):
        return real
    return "NaN" if math.isnan(real) else ("Infinity" if real > 0 else "-Infinity")


def _json(rows: list[list[Any]]) -> str:
    """Rows as one JSON text: one parameter, serialised in C, where a typed array per column was
    quoted element by element in Python (bench/bench_fanout.py's profile: more than the COPY it
    replaced)."""
    return json.dumps(rows, separators=(",", ":"), ensure_ascii=False)


def _series_row(row: dict[str, Any]) -> list[Any]:
    cells = [row[name] for name, _ in SERIES_COLUMNS]
    return [
        base64.b64encode(cell).decode() if kind == "bytea" else cell
        for cell, (_, kind) in zip(cells, SERIES_COLUMNS, strict=True)
    ]


@dataclass(frozen=True)
class Record:
    """A result's record, made ready to write (services.result_prepare): the result's fields, its
    measurements and series as stored. Made outside any database phase: packing the outputs and
    the points is the CPU half of recording, and a node task need not hold a connection for it."""

    result: CheckResult
    claim: str
    fields: dict[str, Any]
    measurements: list[crossnode.Stored]
    series: list[dict[str, Any]]


def run_metric_rows(stored: list[crossnode.Stored]) -> list[tuple[str, str, str]]:
    """The result's numeric metrics, once each, for the run's list (RunMetric): (name, phase, unit)."""
    return sorted(
        {
            (name, phase[:100] if isinstance(phase := labels.get("phase"), str) else "", unit)
            for name, value, _, unit, _, _, _, labels in stored
            if value is not None
        }
    )


def result_write(*, record: Record, at: datetime, starting: int | None = None) -> int:
    """Finish the record's result (still running under its claim) with its fields, and insert its
    measurements (recorded at `at`), series and run metrics, in one statement. `starting`: the result this task
    runs next, marked as having its command started in the same statement (instead of a write of
    its own a moment later), while it is still running under the same claim. Returns how many
    results were finished: 1, or 0 when it was not running under `claim`."""
    result, claim, measurements, series = record.result, record.claim, record.measurements, record.series
    run_metrics = run_metric_rows(measurements)
    update = UpdateQuery(CheckResult)
    update.add_update_values({**record.fields, "finished_at": at})
    update.add_q(Q(pk=result.pk, status=Status.RUNNING, claimed_by=claim))
    update_sql, update_params = update.get_compiler(connection.alias).as_sql()
    results = _q(CheckResult._meta.db_table)
    parts = [f"done AS ({update_sql} RETURNING {results}.id, {results}.run_id, {results}.item_key)"]
    params: list[Any] = list(update_params)
    if starting is not None:
        parts.append(
            f"mark AS (UPDATE {results} SET command_started_at = %s WHERE id = %s AND status = %s "
            "AND claimed_by = %s AND command_started_at IS NULL AND EXISTS (SELECT 1 FROM done))"
        )
        params += [at, starting, Status.RUNNING.value, claim]
    if measurements:
        parts.append(f"m AS ({_insert(Measurement._meta.db_table, {'result_id': 'id'}, MEASUREMENT_COLUMNS, at=True)})")
        params += [at, _json([[m[0], _real(m[1]), *m[2:]] for m in measurements])]
    if series:
        parts.append(f"s AS ({_insert(Series._meta.db_table, {'result_id': 'id'}, SERIES_COLUMNS)})")
        params.append(_json([_series_row(row) for row in series]))
    if run_metrics:
        keys = {"run_id": "run_id", "item_key": "item_key"}
        parts.append(f"rm AS ({_insert(RunMetric._meta.db_table, keys, RUN_METRIC_COLUMNS)} ON CONFLICT DO NOTHING)")
        params.append(_json([list(row) for row in run_metrics]))
    sql = "WITH " + ", ".join(parts) + " SELECT count(*) FROM done"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return int(row[0]) if row else 0
