"""Monthly partitions of runs_measurement on PostgreSQL (migration runs 0013 made the table
partitioned by `recorded_at`): old months leave as whole tables, no row-by-row DELETE.

- One partition per calendar month (UTC), `runs_measurement_yYYYYmMM`, made ahead by the daily
  retention task (KILN_RETENTION_PARTITIONS_AHEAD months); `runs_measurement_default` catches any
  other time, so a write never fails for want of a partition. A month whose rows already sit in
  the default partition is not made (PostgreSQL refuses it); its rows stay there, reported.
- With KILN_RETENTION_MEASUREMENT_MONTHS set, a month partition that ended more than that many
  months ago is detached and dropped, unless a row in it belongs to a run that is active, in a
  campaign, or has a certified result: dropping a table bypasses the certified-evidence triggers,
  so the check is made here, with inserts of certificates and campaign links locked out meanwhile.
On SQLite (or an unpartitioned table) nothing here applies: measurements stay in one plain table.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from portal import dbroles

logger = logging.getLogger(__name__)

TABLE = "runs_measurement"
DEFAULT = f"{TABLE}_default"
_NAME = re.compile(rf"^{TABLE}_y(\d{{4}})m(\d{{2}})$")
# Rows of a partition that keep it: a run still active, in a campaign, or with a certified result.
_HELD = (
    "SELECT 1 FROM {part} m JOIN runs_checkresult r ON r.id = m.result_id JOIN runs_run run ON run.id = r.run_id "
    "WHERE run.status IN ('queued', 'running') "
    "OR EXISTS (SELECT 1 FROM certificates_campaignrun l WHERE l.run_id = run.id) "
    "OR EXISTS (SELECT 1 FROM certificates_certifiedresult c WHERE c.result_id = r.id) LIMIT 1"
)


def month_start(moment: datetime, *, add: int = 0) -> datetime:
    """The first instant (UTC) of `moment`'s month, `add` months later (or earlier)."""
    moment = moment.astimezone(UTC)
    index = moment.year * 12 + moment.month - 1 + add
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def partition_name(start: datetime) -> str:
    return f"{TABLE}_y{start.year:04d}m{start.month:02d}"


def is_partitioned() -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = %s AND relkind IN ('p', 'r')", [TABLE])
        row = cursor.fetchone()
    return bool(row and row[0] == "p")


def month_partitions() -> dict[str, datetime]:
    """The month partitions attached now: name -> first instant of its month."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        names = [row[0] for row in cursor.fetchall()]
    found = {}
    for name in names:
        match = _NAME.match(name)
        if match:
            found[name] = datetime(int(match[1]), int(match[2]), 1, tzinfo=UTC)
    return found


def partition_of(measurement_id: int) -> str:
    """The partition a measurement's row lives in (tests, checks by hand)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {TABLE} WHERE id = %s", [measurement_id])
        row = cursor.fetchone()
    return str(row[0]) if row else ""


def partition_ensure(start: datetime) -> bool:
    """Make the partition of the month starting at `start`; False when the default partition
    already holds rows of that month (PostgreSQL refuses the new partition then)."""
    name, end = partition_name(start), month_start(start, add=1)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {TABLE} FOR VALUES FROM (%s) TO (%s)", [start, end]
            )
    except DatabaseError as exc:
        logger.warning("partition %s not made: %s", name, exc)
        return False
    return True


def _held(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(_HELD.format(part=name))
        return cursor.fetchone() is not None


def partition_drop(name: str) -> bool:
    """Detach and drop month partition `name` unless it holds kept evidence; True when dropped."""
    with transaction.atomic(), connection.cursor() as cursor:
        # No certificate or campaign link may appear between the check and the drop.
        cursor.execute("LOCK TABLE certificates_certifiedresult, certificates_campaignrun IN SHARE MODE")
        if _held(name):
            return False
        # Deferred FK checks of rows written earlier in this transaction (a caller's, a test's) must
        # run first: PostgreSQL refuses to drop a table with pending trigger events.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {name}")
        cursor.execute(f"DROP TABLE {name}")
    return True


def _ahead(now: datetime, dry_run: bool, report: dict[str, list[str]]) -> None:
    existing = month_partitions()
    for add in range(settings.KILN_RETENTION_PARTITIONS_AHEAD + 1):
        start = month_start(now, add=add)
        name = partition_name(start)
        if name in existing:
            continue
        if dry_run or partition_ensure(start):
            report["made"].append(name)
        else:
            report["not made (rows in the default partition)"].append(name)


def _expired(now: datetime, dry_run: bool, report: dict[str, list[str]], progress: Callable[[str], None]) -> None:
    months = settings.KILN_RETENTION_MEASUREMENT_MONTHS
    if not months:
        return
    cutoff = month_start(now, add=-months)
    for name, start in sorted(month_partitions().items(), key=lambda item: item[1]):
        if month_start(start, add=1) > cutoff:
            continue
        if dry_run:
            report["kept (evidence)" if _held(name) else "dropped"].append(name)
        elif partition_drop(name):
            report["dropped"].append(name)
            progress(f"measurements: dropped partition {name}")
        else:
            report["kept (evidence)"].append(name)


NOT_OWNER = "left alone (this database role does not own the table; `migrate` makes them ahead)"


def _owned() -> bool:
    """Making and dropping partitions takes the table's owner: the runtime role of a site with two
    roles (portal/dbroles.py) is not, and leaves them to `migrate` and `kiln_retention`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = %s::regclass", [TABLE]
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def ahead_ensure(*, now: datetime) -> list[str]:
    """Only the coming months' partitions (after `migrate` as the owner); the names made."""
    report: dict[str, list[str]] = {"made": [], "not made (rows in the default partition)": []}
    if is_partitioned() and _owned():
        _ahead(now, False, report)
    return report["made"]


def maintain(*, now: datetime, dry_run: bool, progress: Callable[[str], None]) -> dict[str, list[str]]:
    """Make the coming months' partitions; drop expired months when the policy asks. Idempotent."""
    report: dict[str, list[str]] = {
        "made": [],
        "not made (rows in the default partition)": [],
        "dropped": [],
        "kept (evidence)": [],
    }
    if not is_partitioned():
        return {}
    if not _owned():
        return {NOT_OWNER: [TABLE]}
    _ahead(now, dry_run, report)
    _expired(now, dry_run, report, progress)
    return report


def partitions_ahead(sender: Any, **kwargs: Any) -> None:
    """post_migrate with two roles: the runtime role's daily retention task cannot make the coming
    months' measurement partitions (DDL), so each migrate, as the owner, does."""
    if not dbroles.owner_migrating():
        return
    from django.utils import timezone

    ahead_ensure(now=timezone.now())
