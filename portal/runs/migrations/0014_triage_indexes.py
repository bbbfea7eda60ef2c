"""Two indexes for a run's triage and the run page's filters, built without blocking writes.

- measurement_out_of_spec: runs_measurement (result_id) WHERE NOT ok, the out-of-spec measurements
  of a result: all the triage reads of them. Through (result_id, name) it read every measurement of
  each failed result, in every monthly partition (at 1,250 nodes: 14,886 rows for 173 failed
  results, and none of them out of spec). On the partitioned table (migration 0013) the parent's
  index is made ON ONLY (not yet valid), each partition's CONCURRENTLY and attached: the parent's is
  valid once the last one is, and partitions made later (portal/runs/partitions.py) get it.
- checkresult_run_status: runs_checkresult (run_id, status), a run's results in some states (its
  failed ones for the triage, its problems for the grid's filter) without reading the rest of the
  run, nor every failed result of every run through the status index.

PostgreSQL builds them CONCURRENTLY (so outside a transaction: `atomic = False`); SQLite plainly.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

OUT_OF_SPEC = "measurement_out_of_spec"
RUN_STATUS = "checkresult_run_status"
MEASUREMENTS, RESULTS = "runs_measurement", "runs_checkresult"


def _indexes() -> tuple[models.Index, models.Index]:
    return (
        models.Index(fields=["result"], condition=models.Q(ok=False), name=OUT_OF_SPEC),
        models.Index(fields=["run", "status"], name=RUN_STATUS),
    )


def forward(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        out_of_spec, run_status = _indexes()
        schema_editor.add_index(apps.get_model("runs", "Measurement"), out_of_spec)
        schema_editor.add_index(apps.get_model("runs", "CheckResult"), run_status)
        return
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {RUN_STATUS} ON {RESULTS} (run_id, status)")
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = %s", [MEASUREMENTS])
        if cursor.fetchone()[0] != "p":
            cursor.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {OUT_OF_SPEC} ON {MEASUREMENTS} (result_id) WHERE NOT ok"
            )
            return
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {OUT_OF_SPEC} ON ONLY {MEASUREMENTS} (result_id) WHERE NOT ok")
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass ORDER BY c.relname",
            [MEASUREMENTS],
        )
        partitions = [name for (name,) in cursor.fetchall()]
        for partition in partitions:
            index = f"{partition}_out_of_spec"
            cursor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {partition} (result_id) WHERE NOT ok")
            cursor.execute(
                "SELECT 1 FROM pg_inherits WHERE inhrelid = %s::regclass AND inhparent = %s::regclass",
                [index, OUT_OF_SPEC],
            )
            if cursor.fetchone() is None:
                cursor.execute(f"ALTER INDEX {OUT_OF_SPEC} ATTACH PARTITION {index}")


def backward(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        out_of_spec, run_status = _indexes()
        schema_editor.remove_index(apps.get_model("runs", "Measurement"), out_of_spec)
        schema_editor.remove_index(apps.get_model("runs", "CheckResult"), run_status)
        return
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {OUT_OF_SPEC}")  # a partitioned index takes its partitions' along
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {RUN_STATUS}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("runs", "0013_measurement_partitioned"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(model_name="measurement", index=_indexes()[0]),
                migrations.AddIndex(model_name="checkresult", index=_indexes()[1]),
            ],
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
        ),
    ]
