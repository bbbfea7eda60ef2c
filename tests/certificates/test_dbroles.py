"""Two database roles (portal/dbroles.py): the owner migrates and installs the triggers; the runtime
role the portal uses can read and write rows but cannot TRUNCATE, drop or disable a trigger, run DDL
or set session_replication_role, and the triggers bind it like everyone else. Runs on PostgreSQL;
every role made here has a unique name and is dropped afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction

from portal import dbroles
from portal.certificates.models import CertifiedResult
from portal.runs import partitions
from portal.runs.models import CheckResult
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL (DATABASE_URL)")

# Each statement only the tables' owner (or a superuser) may run.
OWNER_ONLY = {
    "truncate": "TRUNCATE certificates_revocation, certificates_auditevent",
    "drop_trigger": "DROP TRIGGER kiln_guard_revocation_del ON certificates_revocation",
    "disable_trigger": "ALTER TABLE certificates_revocation DISABLE TRIGGER USER",
    "replica": "SET session_replication_role = replica",
    "ddl": "CREATE TABLE kiln_role_probe (id int)",
}


def _name(kind: str) -> str:
    return f"kiln_test_{kind}_{uuid.uuid4().hex[:10]}"


@contextmanager
def _as_runtime() -> Iterator[str]:
    """A fresh runtime role holding dbroles.grants in the test database, this connection SET ROLE to
    it. Created inside the test's transaction: the rollback at the end drops it; DROP OWNED/ROLE
    below makes sure."""
    role = _name("rt")
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN NOSUPERUSER")
        for statement in dbroles.grants(connection, role):
            cursor.execute(statement)
        cursor.execute(f"SET ROLE {role}")
    try:
        yield role
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")


def _refused(sql: str) -> str:
    """The error class of `sql`, in a savepoint so the test goes on; '' when it was allowed."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    except DatabaseError as exc:
        return type(exc.__cause__ or exc).__name__
    return ""


@pytest.mark.django_db
def test_the_runtime_role_cannot_switch_the_guards_off(issued) -> None:
    with _as_runtime():
        refused = {name: _refused(sql) for name, sql in OWNER_ONLY.items()}
        assert all(refused.values()), refused  # InsufficientPrivilege: none of them ran
        assert CheckResult.objects.filter(run__campaign_link__campaign=issued.campaign).exists()  # reads work
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM certificates_auditevent")
        assert cursor.fetchone()[0] > 0


@pytest.mark.django_db
def test_nobody_adds_results_to_a_certified_run_or_its_list(issued) -> None:
    cited = CertifiedResult.objects.filter(certificate=issued).select_related("result").first()
    assert cited is not None
    late = cited.result
    late.pk = None
    late.item_key = "late-check"
    with _as_runtime():
        with pytest.raises(IntegrityError, match="cannot be added to a run of a certified campaign"):
            with transaction.atomic():
                late.save(force_insert=True)
        with pytest.raises(IntegrityError, match="the list of results a certificate cites is complete"):
            with transaction.atomic():
                CertifiedResult.objects.create(certificate=issued, result_id=cited.result_id)


def _admin() -> Any:
    import psycopg

    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], password=db["PASSWORD"] or None,
        dbname="postgres", autocommit=True,
    )  # fmt: skip


def _url(role: str, dbname: str) -> str:
    db = settings.DATABASES["default"]
    return f"postgresql://{role}:pw@{db['HOST']}:{db['PORT'] or 5432}/{dbname}"


RUNTIME_PROBE = """
import json, django
django.setup()
from django.db import connection, transaction
from django.contrib.auth.models import Group
from portal.inventory.models import Cluster
Cluster.objects.create(name="rt1")
out = {"cluster": Cluster.objects.filter(name="rt1").count(), "groups": Group.objects.count(), "refused": {}}
for name, sql in json.loads(%r).items():
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
        out["refused"][name] = ""
    except Exception as exc:
        out["refused"][name] = type(exc.__cause__ or exc).__name__
from django.utils import timezone
from portal.runs import partitions
out["partitions"] = len(partitions.month_partitions())
out["maintain"] = list(partitions.maintain(now=timezone.now(), dry_run=False, progress=lambda line: None))
with connection.cursor() as cursor:
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    out["superuser"] = cursor.fetchone()[0]
    cursor.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
    out["owners"] = [r[0] for r in cursor.fetchall()]
print(json.dumps(out))
"""


def test_kiln_init_migrates_as_the_owner_and_the_portal_runs_as_the_runtime_role(tmp_path: Path) -> None:
    owner, runtime, dbname = _name("own"), _name("rt"), _name("db")
    admin = _admin()
    try:
        # CREATEROLE: migrate makes the runtime role itself.
        admin.execute(f"CREATE ROLE {owner} LOGIN PASSWORD 'pw' CREATEROLE")
        admin.execute(f"CREATE DATABASE {dbname} OWNER {owner}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "DJANGO_", "DATABASE_", "CELERY_"))}
        env.update(
            KILN_DATA_DIR=str(tmp_path / "data"), KILN_ENV_FILE="", DATABASE_URL=_url(runtime, dbname),
            KILN_DATABASE_OWNER_URL=_url(owner, dbname), DJANGO_SETTINGS_MODULE="portal.settings",
        )  # fmt: skip
        for _ in range(2):  # `kiln init`, and again (as after an upgrade): migrate is idempotent
            done = subprocess.run(
                [sys.executable, "-m", "portal.cli", "init", "--no-keys"],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
        runtime_env = {k: v for k, v in env.items() if k != "KILN_DATABASE_OWNER_URL"}  # what web and workers get
        probe = subprocess.run(
            [sys.executable, "-c", RUNTIME_PROBE % json.dumps(OWNER_ONLY)],
            cwd=REPO, env=runtime_env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr[-3000:]
        out = json.loads(probe.stdout.strip().splitlines()[-1])
        assert out["cluster"] == 1 and out["groups"] >= 2  # the portal writes and reads; post_migrate's groups exist
        assert all(out["refused"].values()), out["refused"]
        assert out["superuser"] is False and out["owners"] == [owner]
        # The coming months' measurement partitions are migrate's (DDL); the daily task leaves them.
        assert out["partitions"] >= 1 and out["maintain"] == [partitions.NOT_OWNER], out
        audit = subprocess.run(
            [sys.executable, "manage.py", "kiln_audit", "verify"],
            cwd=REPO, env=runtime_env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert audit.returncode == 0 and "SOUND" in audit.stdout, audit.stdout + audit.stderr
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {runtime}")
        admin.execute(f"DROP ROLE IF EXISTS {owner}")
        admin.close()


@pytest.mark.django_db
def test_migrate_refuses_a_runtime_role_that_could_lift_the_triggers(monkeypatch) -> None:
    """A superuser, or the owner of a table, as DATABASE_URL's role would undo the split."""
    from django.core.management.base import CommandError

    superuser, owner = _name("su"), _name("own")
    with connection.cursor() as cursor:  # inside the test's transaction: rolled back with it
        cursor.execute(f"CREATE ROLE {superuser} NOLOGIN SUPERUSER")
        cursor.execute(f"CREATE ROLE {owner} NOLOGIN")
        cursor.execute(f"ALTER TABLE certificates_revocation OWNER TO {owner}")
    monkeypatch.setattr(dbroles, "_runtime_user", superuser)
    with pytest.raises(CommandError, match="is a superuser"):
        dbroles.runtime_grant(connection)
    monkeypatch.setattr(dbroles, "_runtime_user", owner)
    with pytest.raises(CommandError, match="owns 1 of the tables"):
        dbroles.runtime_grant(connection)
