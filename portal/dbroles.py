"""Two PostgreSQL roles: the OWNER of the tables (KILN_DATABASE_OWNER_URL) runs `migrate` and
installs the triggers; the RUNTIME role (DATABASE_URL) that the portal, workers and beat use gets
SELECT/INSERT/UPDATE/DELETE on the tables and USAGE on the sequences, nothing else.

A role that is neither owner nor superuser cannot TRUNCATE, drop or disable a trigger, run DDL or set
session_replication_role (superuser only on PostgreSQL 15+), so the immutability triggers bind it.
Grants are given before every migrate (with default privileges, so the tables a migration creates
are granted as they appear) and again after it. With one URL nothing here runs.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

RUNTIME_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"
# DATABASE_URL's role and password while this process runs as the owner (owner_become).
_runtime_user: str | None = None
_runtime_password: str | None = None


def owner_become() -> bool:
    """Point the default connection at KILN_DATABASE_OWNER_URL for the rest of this process (the
    migrate command): every migration and post_migrate handler, their data steps on the default
    connection included, then runs as the owner. False with one URL."""
    global _runtime_user, _runtime_password
    from django.db import DEFAULT_DB_ALIAS, connections

    owner = settings.KILN_DATABASE_OWNER
    if not owner:
        return False
    default = connections[DEFAULT_DB_ALIAS]
    if _runtime_user is None:
        _runtime_user = str(default.settings_dict.get("USER") or "")
        _runtime_password = str(default.settings_dict.get("PASSWORD") or "") or None
    default.close()
    for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT"):
        default.settings_dict[key] = owner.get(key, "")
    default.settings_dict["OPTIONS"] = {**default.settings_dict.get("OPTIONS", {}), **owner.get("OPTIONS", {})}
    return True


def owner_migrating() -> bool:
    """Whether this process runs as the owner with a runtime role beside it (owner_become)."""
    return _runtime_user is not None


def runtime_role(connection: Any) -> str | None:
    """DATABASE_URL's role while `connection` runs as the owner and the two differ, else None."""
    if _runtime_user is None or connection.vendor != "postgresql":
        return None
    if not _runtime_user or _runtime_user == connection.settings_dict.get("USER"):
        return None
    return _runtime_user


def _quoted(connection: Any, template: str, role: str, password: str | None = None) -> str:
    from psycopg import sql

    connection.ensure_connection()
    composed = sql.SQL(template).format(role=sql.Identifier(role), password=sql.Literal(password))
    return composed.as_string(connection.connection)


def _role_ensure(connection: Any, cursor: Any, role: str) -> None:
    cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [role])
    row = cursor.fetchone()
    if row is None:
        password = _runtime_password
        statement = _quoted(
            connection,
            "CREATE ROLE {role} LOGIN PASSWORD {password} NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS",
            role,
            password,
        )
        try:
            with connection.cursor() as create:
                create.execute(statement)
        except Exception as exc:
            raise CommandError(
                f"the runtime role {role!r} (DATABASE_URL) does not exist and the owner role cannot create it "
                f"({exc}); create it as a superuser: CREATE ROLE {role} LOGIN PASSWORD '...'"
            ) from exc
        return
    if row[0] or row[1]:
        raise CommandError(
            f"the runtime role {role!r} (DATABASE_URL) is a superuser or bypasses row security: it could switch "
            f"the certified-evidence triggers off; use a plain role (ALTER ROLE {role} NOSUPERUSER NOBYPASSRLS)"
        )
    cursor.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tableowner = %s", [role])
    owned = cursor.fetchone()[0]
    if owned:
        raise CommandError(
            f"the runtime role {role!r} (DATABASE_URL) owns {owned} of the tables: an owner can drop the triggers; "
            "reassign them to the owner role (REASSIGN OWNED BY ... TO ...) or use another runtime role"
        )


def grants(connection: Any, role: str) -> list[str]:
    """What the runtime role may do in the public schema, now and for tables created later."""
    return [
        _quoted(connection, template, role)
        for template in (
            "GRANT USAGE ON SCHEMA public TO {role}",
            f"GRANT {RUNTIME_PRIVILEGES} ON ALL TABLES IN SCHEMA public TO {{role}}",
            "REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA public FROM {role}",
            "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
            # Tables and sequences the owner creates in later migrations.
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {RUNTIME_PRIVILEGES} ON TABLES TO {{role}}",
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {role}",
        )
    ]


def runtime_grant(connection: Any) -> str | None:
    """Make sure the runtime role exists, is no superuser, and holds exactly the runtime grants."""
    role = runtime_role(connection)
    if role is None:
        return None
    with connection.cursor() as cursor:
        _role_ensure(connection, cursor, role)
        for statement in grants(connection, role):
            cursor.execute(statement)
    return role


def on_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """pre_migrate and post_migrate: grants before the first table is created and after the last."""
    from django.db import connections

    runtime_grant(connections[using])
