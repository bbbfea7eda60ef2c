"""Certified evidence is immutable in the database itself: triggers, not model signals.

Signals and QuerySet overrides miss raw SQL, `QuerySet.update()` from other code, bulk_create and
the admin's cascades; a trigger sees every row written by any client of the database. Each rule
below becomes a BEFORE trigger on PostgreSQL (a PL/pgSQL function raising SQLSTATE 23001,
restrict_violation) and on SQLite (`RAISE(ABORT, ...)`); both reach Django as IntegrityError whose
message starts with "kiln:" (middleware.py turns that into a 403 page).

What is frozen, once a certificate exists:
- the certificate row, its CertifiedResult rows and its Revocation (append-only: no UPDATE/DELETE;
  no CertifiedResult INSERT either once the issuing transaction attached the signatures);
- each cited result, its measurements and series (no INSERT/UPDATE/DELETE);
- each run of a campaign that has a certificate (no new result, measurement or series either), and
  that campaign's runs, scope, waivers and signatures (the campaign is closed: a new certificate
  needs a new campaign);
- the hostname and cluster of a cited node, and the name of a cluster with a certificate (no rename,
  no delete);
- the audit log, always.
An UPDATE that changes nothing is let through, so an idempotent task redelivered after a run was
certified does not fail. TRUNCATE, DROP/DISABLE TRIGGER and session_replication_role are not
covered: only the tables' owner or a superuser may use them, and production runs the portal as a
runtime role that is neither (portal/dbroles.py, docs/security.md); the audit log's hash chain
(auditchain.py) shows what such a role changed anyway.

`install()` drops and recreates every trigger. PostgreSQL gets them from migration certificates 0003
(and again after every `migrate`). SQLite rebuilds a table on most ALTERs (create, copy, drop,
rename), which drops that table's triggers and trips over the others that name it; so on SQLite the
triggers are dropped before every `migrate` and created after it (apps.py: pre_migrate and
post_migrate), and a test checks that every trigger exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PREFIX = "kiln_guard_"

CERTIFIED_RESULT = "EXISTS (SELECT 1 FROM certificates_certifiedresult c WHERE c.result_id = {id})"
CLOSED_CAMPAIGN = "EXISTS (SELECT 1 FROM certificates_certificate c WHERE c.campaign_id = {id})"
CERTIFIED_RUN = (
    "EXISTS (SELECT 1 FROM certificates_campaignrun l JOIN certificates_certificate c "
    "ON c.campaign_id = l.campaign_id WHERE l.run_id = {id})"
)
CITED_NODE = (
    "(EXISTS (SELECT 1 FROM runs_checkresult r JOIN certificates_certifiedresult c ON c.result_id = r.id "
    "WHERE r.node_id = {id}) OR EXISTS (SELECT 1 FROM certificates_scopeexclusion e JOIN certificates_certificate c "
    "ON c.campaign_id = e.campaign_id WHERE e.node_id = {id}))"
)
CERTIFIED_CLUSTER = (
    "EXISTS (SELECT 1 FROM certificates_campaign k JOIN certificates_certificate c ON c.campaign_id = k.id "
    "WHERE k.cluster_id = {id})"
)
# A result of a run of a certified campaign (for a new measurement or series of any of its results).
RESULT_OF_CERTIFIED_RUN = (
    "EXISTS (SELECT 1 FROM runs_checkresult r JOIN certificates_campaignrun l ON l.run_id = r.run_id "
    "JOIN certificates_certificate c ON c.campaign_id = l.campaign_id WHERE r.id = {id})"
)
# Issuing attaches the signatures and records the audit event after inserting the list, in the same
# transaction: from then on the list is complete.
ISSUED_CERTIFICATE = (
    "(EXISTS (SELECT 1 FROM certificates_signature s WHERE s.certificate_id = {id}) OR EXISTS (SELECT 1 FROM "
    "certificates_certificate c JOIN certificates_auditevent a ON a.campaign_id = c.campaign_id "
    "WHERE c.id = {id} AND a.action = 'certificate issued'))"
)
ALWAYS = "1 = 1"


@dataclass(frozen=True)
class Rule:
    """Refuse `event` on `table` when `when` holds. `when` uses OLD./NEW. and {ne} for "differs"
    (IS DISTINCT FROM on PostgreSQL, IS NOT on SQLite); {changed} expands to "some column differs"."""

    name: str
    table: str
    event: str
    when: str
    message: str


def _frozen(table: str, key: str, fk: str, predicate: str, what: str, *, insert: bool = True) -> list[Rule]:
    either = f"({predicate.format(id='OLD.' + fk)} OR {predicate.format(id='NEW.' + fk)})"
    rules = [
        Rule(f"{key}_upd", table, "UPDATE", "{changed} AND " + either,
             f"{what} is evidence of an issued certificate: it cannot be changed"),
        Rule(f"{key}_del", table, "DELETE", predicate.format(id="OLD." + fk),
             f"{what} is evidence of an issued certificate: it cannot be deleted"),
    ]  # fmt: skip
    if insert:
        rules.append(
            Rule(
                f"{key}_ins",
                table,
                "INSERT",
                predicate.format(id="NEW." + fk),
                f"{what} cannot be added: it would change the evidence of an issued certificate",
            )  # fmt: skip
        )
    return rules


def _append_only(table: str, key: str, what: str) -> list[Rule]:
    return [
        Rule(f"{key}_upd", table, "UPDATE", "{changed}", f"{what} is append-only: it cannot be changed"),
        Rule(f"{key}_del", table, "DELETE", ALWAYS, f"{what} is append-only: it cannot be deleted"),
    ]


RULES: list[Rule] = [
    *_append_only("certificates_certificate", "certificate", "a certificate (revoke it instead)"),
    *_append_only("certificates_certifiedresult", "certified", "the list of results a certificate cites"),
    Rule("certified_ins", "certificates_certifiedresult", "INSERT", ISSUED_CERTIFICATE.format(id="NEW.certificate_id"),
         "the list of results a certificate cites is complete once it is issued: nothing can be added"),
    *_append_only("certificates_revocation", "revocation", "a revocation"),
    *_append_only("certificates_auditevent", "audit", "the audit log"),
    *_frozen("runs_checkresult", "result", "id", CERTIFIED_RESULT, "this result", insert=False),
    *_frozen("runs_measurement", "measurement", "result_id", CERTIFIED_RESULT, "a measurement of a certified result"),
    *_frozen("runs_series", "series", "result_id", CERTIFIED_RESULT, "a series of a certified result"),
    *_frozen("runs_run", "run", "id", CERTIFIED_RUN, "a run of a certified campaign", insert=False),
    Rule("runresult_ins", "runs_checkresult", "INSERT", CERTIFIED_RUN.format(id="NEW.run_id"),
         "a result cannot be added to a run of a certified campaign"),
    Rule("runmeasurement_ins", "runs_measurement", "INSERT", RESULT_OF_CERTIFIED_RUN.format(id="NEW.result_id"),
         "a measurement cannot be added to a run of a certified campaign"),
    Rule("runseries_ins", "runs_series", "INSERT", RESULT_OF_CERTIFIED_RUN.format(id="NEW.result_id"),
         "a series cannot be added to a run of a certified campaign"),
    *_frozen("certificates_campaignrun", "campaignrun", "campaign_id", CLOSED_CAMPAIGN, "a run of a closed campaign"),
    *_frozen("certificates_scopeexclusion", "scope", "campaign_id", CLOSED_CAMPAIGN, "the scope of a closed campaign"),
    *_frozen("certificates_waiver", "waiver", "campaign_id", CLOSED_CAMPAIGN, "a waiver of a closed campaign"),
    *[r for r in _frozen("certificates_signature", "signature", "campaign_id", CLOSED_CAMPAIGN,
                         "a signature of a closed campaign") if r.event != "UPDATE"],
    # Issuing attaches the two signatures to the new certificate: the one change allowed.
    Rule("signature_upd", "certificates_signature", "UPDATE",
         "{changed} AND " + CLOSED_CAMPAIGN.format(id="OLD.campaign_id") + " AND NOT (OLD.certificate_id IS NULL "
         "AND NEW.certificate_id IS NOT NULL AND OLD.campaign_id = NEW.campaign_id AND OLD.side = NEW.side "
         "AND OLD.user_id = NEW.user_id AND OLD.name = NEW.name AND OLD.body_sha256 = NEW.body_sha256 "
         "AND OLD.signed_at = NEW.signed_at AND OLD.withdrawn = NEW.withdrawn)",
         "a signature of a closed campaign cannot be changed"),
    Rule("campaign_upd", "certificates_campaign", "UPDATE",
         "(OLD.name {ne} NEW.name OR OLD.cluster_id {ne} NEW.cluster_id OR OLD.plan_id {ne} NEW.plan_id "
         "OR OLD.plan_snapshot {ne} NEW.plan_snapshot) AND " + CLOSED_CAMPAIGN.format(id="OLD.id"),
         "a campaign with a certificate cannot be changed"),
    Rule("node_upd", "inventory_node", "UPDATE",
         "(OLD.hostname {ne} NEW.hostname OR OLD.cluster_id {ne} NEW.cluster_id) AND " + CITED_NODE.format(id="OLD.id"),
         "a node cited by a certificate cannot be renamed or moved to another cluster"),
    Rule("node_del", "inventory_node", "DELETE", CITED_NODE.format(id="OLD.id"),
         "a node cited by a certificate cannot be deleted"),
    Rule("cluster_upd", "inventory_cluster", "UPDATE",
         "OLD.name {ne} NEW.name AND " + CERTIFIED_CLUSTER.format(id="OLD.id"),
         "a cluster with a certificate cannot be renamed"),
    Rule("cluster_del", "inventory_cluster", "DELETE", CERTIFIED_CLUSTER.format(id="OLD.id"),
         "a cluster with a certificate cannot be deleted"),
]  # fmt: skip


def _columns(connection: Any, cursor: Any, table: str) -> list[str]:
    return [c.name for c in connection.introspection.get_table_description(cursor, table)]


def _sqlite(connection: Any, cursor: Any, rule: Rule) -> list[str]:
    changed = "(" + " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in _columns(connection, cursor, rule.table)) + ")"
    when = rule.when.format(ne="IS NOT", changed=changed)
    message = ("kiln: " + rule.message).replace("'", "''")
    name = PREFIX + rule.name
    return [
        f"DROP TRIGGER IF EXISTS {name}",
        f"CREATE TRIGGER {name} BEFORE {rule.event} ON {rule.table} FOR EACH ROW WHEN {when} "
        f"BEGIN SELECT RAISE(ABORT, '{message}'); END",
    ]


def _postgresql(rule: Rule) -> list[str]:
    when = rule.when.format(ne="IS DISTINCT FROM", changed="(OLD IS DISTINCT FROM NEW)")
    message = ("kiln: " + rule.message).replace("'", "''")
    name = PREFIX + rule.name
    returned = "OLD" if rule.event == "DELETE" else "NEW"
    return [
        f"DROP TRIGGER IF EXISTS {name} ON {rule.table}",
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF {when} THEN RAISE EXCEPTION USING ERRCODE = 'restrict_violation', MESSAGE = '{message}'; END IF; "
        f"RETURN {returned}; END $$",
        f"CREATE TRIGGER {name} BEFORE {rule.event} ON {rule.table} FOR EACH ROW EXECUTE FUNCTION {name}()",
    ]


def statements(connection: Any) -> list[str]:
    out: list[str] = []
    with connection.cursor() as cursor:
        for rule in RULES:
            if connection.vendor == "postgresql":
                out += _postgresql(rule)
            elif connection.vendor == "sqlite":
                out += _sqlite(connection, cursor, rule)
            else:
                raise NotImplementedError(
                    f"certified-evidence triggers exist for PostgreSQL and SQLite, not {connection.vendor}"
                )
    return out


def install(connection: Any) -> None:
    """(Re)create every trigger; idempotent. Skipped while a guarded table does not exist yet."""
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
    if not {r.table for r in RULES} <= tables:
        return
    sql = statements(connection)
    with connection.cursor() as cursor:
        for statement in sql:
            cursor.execute(statement)


def uninstall(connection: Any) -> None:
    """Drop every kiln trigger (SQLite, before a migrate rebuilds tables)."""
    with connection.cursor() as cursor:
        for rule in RULES:
            name = PREFIX + rule.name
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {rule.table}")
                cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")
            else:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


def installed(connection: Any) -> set[str]:
    """Names of the kiln triggers present in the database."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE %s", [PREFIX + "%"])
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s", [PREFIX + "%"])
        return {row[0] for row in cursor.fetchall()}


def expected() -> set[str]:
    return {PREFIX + r.name for r in RULES}
