"""Measurement.recorded_at, and on PostgreSQL runs_measurement partitioned by month on it.

PostgreSQL: the table is rebuilt as a partitioned table (primary key (id, recorded_at): a
partitioned table's keys must hold its partition key; `id` keeps one sequence, so it stays unique).
Existing rows are copied in batches of COPY_BATCH ids, each its own transaction, with recorded_at
taken from their result's finish (else their run's creation); writes made meanwhile are logged by a
trigger and replayed in the final short transaction, which locks the old table, swaps the names,
moves the sequence on and drops the old table. So `migrate` may run beside live workers; the copy
costs about the table's size again in disk until the old table is dropped. Months from the first
run's to KILN_RETENTION_PARTITIONS_AHEAD ahead get a partition, and a DEFAULT partition catches
the rest. Going back copies everything into one plain table again, in one transaction.
SQLite: a plain column, filled the same way.
"""

from __future__ import annotations

from typing import Any

import django.utils.timezone
from django.conf import settings
from django.db import migrations, models, transaction

COPY_BATCH = 50_000  # ids per copy transaction: ~0.3 s each on the CI machine (1M rows in ~7 s)
OLD, NEW, LOG = "runs_measurement", "runs_measurement_new", "runs_measurement_changes"
COLUMNS = "id, result_id, name, value, text, unit, gpu, threshold, ok, labels"
WHEN = "COALESCE(r.finished_at, run.created_at, now())"
SELECT = (
    f"SELECT {', '.join('m.' + c for c in COLUMNS.split(', '))}, {WHEN} FROM {OLD} m "
    "JOIN runs_checkresult r ON r.id = m.result_id JOIN runs_run run ON run.id = r.run_id"
)


# The certified-evidence triggers on runs_measurement (portal/certificates/immutability.py) as they
# stood when this migration was written: dropping the old table drops them, so the swap puts them
# back. Frozen here, since a migration must not run the live code of a later app; a later change to
# the rules is reinstalled after every `migrate` anyway. (name, event, condition, message)
_CERTIFIED = "EXISTS (SELECT 1 FROM certificates_certifiedresult c WHERE c.result_id = {id})"
GUARDS = (
    ("measurement_upd", "UPDATE", f"(OLD IS DISTINCT FROM NEW) AND ({_CERTIFIED.format(id='OLD.result_id')} OR "
     f"{_CERTIFIED.format(id='NEW.result_id')})",
     "a measurement of a certified result is evidence of an issued certificate: it cannot be changed"),
    ("measurement_del", "DELETE", _CERTIFIED.format(id="OLD.result_id"),
     "a measurement of a certified result is evidence of an issued certificate: it cannot be deleted"),
    ("measurement_ins", "INSERT", _CERTIFIED.format(id="NEW.result_id"),
     "a measurement of a certified result cannot be added: it would change the evidence of an issued certificate"),
    ("runmeasurement_ins", "INSERT",
     "EXISTS (SELECT 1 FROM runs_checkresult r JOIN certificates_campaignrun l ON l.run_id = r.run_id "
     "JOIN certificates_certificate c ON c.campaign_id = l.campaign_id WHERE r.id = NEW.result_id)",
     "a measurement cannot be added to a run of a certified campaign"),
)  # fmt: skip


def _guards_install(cursor: Any) -> None:
    """PostgreSQL: the frozen triggers above, each a PL/pgSQL function raising restrict_violation."""
    for key, event, when, message in GUARDS:
        name = "kiln_guard_" + key
        returned = "OLD" if event == "DELETE" else "NEW"
        cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {OLD}")
        cursor.execute(
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF {when} THEN RAISE EXCEPTION USING ERRCODE = 'restrict_violation', MESSAGE = 'kiln: {message}'; "
            f"END IF; RETURN {returned}; END $$"
        )
        cursor.execute(f"CREATE TRIGGER {name} BEFORE {event} ON {OLD} FOR EACH ROW EXECUTE FUNCTION {name}()")


def _sqlite_fill(cursor: Any) -> None:
    cursor.execute(
        f"UPDATE {OLD} SET recorded_at = (SELECT COALESCE(r.finished_at, run.created_at) FROM runs_checkresult r "
        f"JOIN runs_run run ON run.id = r.run_id WHERE r.id = {OLD}.result_id) "
        f"WHERE EXISTS (SELECT 1 FROM runs_checkresult r WHERE r.id = {OLD}.result_id)"
    )


def _log_changes(cursor: Any) -> None:
    """Log ids inserted or deleted in the old table while it is copied (replayed at the swap)."""
    cursor.execute(f"CREATE TABLE {LOG} (id bigint NOT NULL)")
    cursor.execute(
        f"CREATE FUNCTION {LOG}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO {LOG} VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END); RETURN NULL; END $$"
    )
    cursor.execute(
        f"CREATE TRIGGER {LOG} AFTER INSERT OR DELETE OR UPDATE ON {OLD} FOR EACH ROW EXECUTE FUNCTION {LOG}()"
    )


def _months(cursor: Any) -> list[tuple[str, str, str]]:
    """(name, from, to) of every month from the first run's to KILN_RETENTION_PARTITIONS_AHEAD ahead."""
    cursor.execute(
        "SELECT to_char(m, 'YYYY\"m\"MM'), m, m + interval '1 month' FROM generate_series("
        "date_trunc('month', COALESCE((SELECT min(created_at) FROM runs_run), now()) AT TIME ZONE 'UTC'), "
        "date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => %s), interval '1 month') AS m",
        [settings.KILN_RETENTION_PARTITIONS_AHEAD],
    )
    return [(f"{OLD}_y{name}", f"{start} UTC", f"{end} UTC") for name, start, end in cursor.fetchall()]


def _create_new(cursor: Any) -> None:
    cursor.execute(
        f"CREATE TABLE {NEW} (LIKE {OLD} INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE (recorded_at)"
    )
    cursor.execute(f"ALTER TABLE {NEW} ADD PRIMARY KEY (id, recorded_at)")
    for name, start, end in _months(cursor):
        cursor.execute(f"CREATE TABLE {name} PARTITION OF {NEW} FOR VALUES FROM (%s) TO (%s)", [start, end])
    cursor.execute(f"CREATE TABLE {OLD}_default PARTITION OF {NEW} DEFAULT")


def _copy(connection: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(min(id), 0), COALESCE(max(id), -1) FROM {OLD}")
        low, high = cursor.fetchone()
    for start in range(low, high + 1, COPY_BATCH):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {NEW} ({COLUMNS}, recorded_at) {SELECT} WHERE m.id >= %s AND m.id < %s",
                [start, start + COPY_BATCH],
            )


def _indexes(cursor: Any) -> None:
    cursor.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f' AND conkey = "
        "ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'result_id')]",
        [OLD, OLD],
    )
    fk = cursor.fetchone()[0]
    cursor.execute(f"CREATE INDEX {NEW}_result_name ON {NEW} (result_id, name)")
    cursor.execute(
        f"ALTER TABLE {NEW} ADD CONSTRAINT {fk} FOREIGN KEY (result_id) REFERENCES runs_checkresult (id) "
        "DEFERRABLE INITIALLY DEFERRED"
    )


def _sequence_carry(cursor: Any, source: str, target: str) -> None:
    """The target's id sequence goes on past every id the source's ever gave."""
    cursor.execute(f"SELECT pg_get_serial_sequence('{source}', 'id'), pg_get_serial_sequence('{target}', 'id')")
    old_seq, new_seq = cursor.fetchone()
    cursor.execute(f"SELECT last_value FROM {old_seq}")
    last = cursor.fetchone()[0]
    cursor.execute(f"SELECT setval(%s, GREATEST((SELECT COALESCE(max(id), 0) FROM {target}), %s, 1))", [new_seq, last])


def _names_restore(cursor: Any) -> None:
    """The names Django and later migrations know: table, index, primary key, sequence."""
    cursor.execute(f"SELECT pg_get_serial_sequence('{NEW}', 'id')")
    sequence = cursor.fetchone()[0]
    cursor.execute(f"ALTER TABLE {NEW} RENAME TO {OLD}")
    cursor.execute(f"ALTER INDEX {NEW}_result_name RENAME TO measurement_result_name")
    cursor.execute(f"ALTER INDEX {NEW}_pkey RENAME TO {OLD}_pkey")
    cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {OLD}_id_seq")


def _swap(connection: Any) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {OLD} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"DELETE FROM {NEW} WHERE id IN (SELECT id FROM {LOG})")
        cursor.execute(f"INSERT INTO {NEW} ({COLUMNS}, recorded_at) {SELECT} WHERE m.id IN (SELECT id FROM {LOG})")
        _sequence_carry(cursor, OLD, NEW)
        cursor.execute(f"DROP TABLE {OLD}")
        cursor.execute(f"DROP TABLE {LOG}")
        cursor.execute(f"DROP FUNCTION {LOG}()")
        _names_restore(cursor)
        _guards_install(cursor)  # the certified-evidence triggers went with the old table


def forward(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            _sqlite_fill(cursor)
        return
    with transaction.atomic(), connection.cursor() as cursor:
        _log_changes(cursor)
        _create_new(cursor)
    _copy(connection)
    with transaction.atomic(), connection.cursor() as cursor:
        _indexes(cursor)
    _swap(connection)
    with connection.cursor() as cursor:
        # Fresh statistics: autovacuum never analyzes a partitioned parent, and without them the
        # planner guessed 300x the rows of a node's measurements and started parallel workers
        # (measured: a node page 452 ms before, 77 ms after, at 1,250 nodes x 30 runs).
        cursor.execute(f"ANALYZE {OLD}")


def backward(apps: Any, schema_editor: Any) -> None:
    """Back to one plain table (PostgreSQL), in one transaction: rare, and the reverse of a rebuild."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT relkind FROM pg_class WHERE relname = '{OLD}'")
        if cursor.fetchone()[0] != "p":
            return
        cursor.execute(f"CREATE TABLE {NEW} (LIKE {OLD} INCLUDING DEFAULTS INCLUDING IDENTITY)")
        cursor.execute(f"ALTER TABLE {NEW} ADD PRIMARY KEY (id)")
        cursor.execute(f"INSERT INTO {NEW} SELECT * FROM {OLD}")
        _sequence_carry(cursor, OLD, NEW)
        cursor.execute(f"DROP TABLE {OLD}")  # with its partitions
        cursor.execute(f"CREATE INDEX {NEW}_result_name ON {NEW} (result_id, name)")
        cursor.execute(
            f"ALTER TABLE {NEW} ADD CONSTRAINT {OLD}_result_id_fk_runs_checkresult_id FOREIGN KEY (result_id) "
            "REFERENCES runs_checkresult (id) DEFERRABLE INITIALLY DEFERRED"
        )
        _names_restore(cursor)
        _guards_install(cursor)


class Migration(migrations.Migration):
    atomic = False  # the copy commits batch by batch: no transaction holds the whole table

    dependencies = [
        ("runs", "0012_retention_markers"),
        ("certificates", "0004_certificate_verdict_choices"),
    ]

    operations = [
        migrations.AddField(
            model_name="measurement",
            name="recorded_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.RunPython(forward, backward, elidable=False),
    ]
