"""The audit log as a hash chain: each AuditEvent carries the SHA-256 of the event before it, and its
own SHA-256 over its fields and that link (canonical JSON, seal.canonical_bytes). A certificate's
sealed payload names the head of the chain when it was issued (`audit_head`).

The triggers (immutability.py) refuse edits and deletes; the chain is what catches the role that can
switch the triggers off (the tables' owner, a superuser): an event deleted or altered breaks the
links after it, an event the certificate's payload names must still be there with its hash, and
every revocation must match a "certificate revoked" event and the other way round, so a Revocation
row deleted while its event remains is found too. Deleting the newest events *and* their rows leaves
a shorter chain that still links: keep the head that `kiln audit verify` prints somewhere else too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from portal.certificates import seal
from portal.certificates.models import AuditEvent, Campaign, Certificate, Revocation

# Any fixed 64-bit key serializes appends; this one spells "kilnaudt" so no other lock shares it.
LOCK_KEY = int.from_bytes(b"kilnaudt", "big") & 0x7FFF_FFFF_FFFF_FFFF
REVOKED = "certificate revoked"
ISSUED = "certificate issued"
CHUNK = 2000  # events read at a time while verifying: memory stays bounded on a long log


def event_digest(*, prev: str, campaign_id: int, at: Any, username: str, action: str, detail: str) -> str:
    fields = {
        "prev": prev,
        "campaign": campaign_id,
        "at": at.isoformat(),
        "username": username,
        "action": action,
        "detail": detail,
    }
    return seal.sha256_hex(seal.canonical_bytes(fields))


def _digest_of(event: AuditEvent) -> str:
    return event_digest(
        prev=event.prev_sha256, campaign_id=event.campaign_id, at=event.at, username=event.username,
        action=event.action, detail=event.detail,
    )  # fmt: skip


def _lock() -> None:
    """Appends one at a time until commit: two transactions never link to the same head. SQLite
    transactions here are IMMEDIATE (settings.py) and so serialized already."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])


def head() -> dict[str, Any] | None:
    """The newest event's id and hash (read under the caller's view; None for an empty log)."""
    last = AuditEvent.objects.order_by("-id").values("id", "sha256").first()
    return {"id": last["id"], "sha256": last["sha256"]} if last else None


def append(*, campaign: Campaign, user: Any, action: str, detail: str = "") -> AuditEvent:
    with transaction.atomic():
        _lock()
        last = head()
        event = AuditEvent(
            campaign=campaign,
            at=timezone.now(),
            user=user if getattr(user, "pk", None) else None,
            username=user.get_username() if getattr(user, "pk", None) else "system",
            action=action,
            detail=detail,
            prev_sha256=last["sha256"] if last else "",
        )
        event.sha256 = _digest_of(event)
        event.save(force_insert=True)
    return event


def _revoked_number(detail: str) -> str:
    return detail.partition(": ")[0]


@dataclass
class ChainReport:
    events: int = 0
    head: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    hashes: dict[int, str] = field(default_factory=dict)  # id -> sha256 of each linked event
    revoked_events: dict[str, int] = field(default_factory=dict)  # certificate number -> event id
    issued_events: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _walk(report: ChainReport) -> None:
    prev = ""
    last_id = 0
    while True:
        chunk = list(AuditEvent.objects.filter(id__gt=last_id).order_by("id")[:CHUNK])
        if not chunk:
            return
        for event in chunk:
            report.events += 1
            if event.prev_sha256 != prev:
                report.problems.append(
                    f"audit event #{event.pk} does not follow the event before it (#{last_id or 'none'}): "
                    "an event was deleted or altered"
                )
            if event.sha256 != _digest_of(event):
                report.problems.append(f"audit event #{event.pk} ({event.action}) was altered: its hash does not match")
            report.hashes[event.pk] = event.sha256
            if event.action == REVOKED:
                report.revoked_events.setdefault(_revoked_number(event.detail), event.pk)
            elif event.action == ISSUED:
                report.issued_events.setdefault(_revoked_number(event.detail), event.pk)
            prev, last_id = event.sha256, event.pk
            report.head = {"id": event.pk, "sha256": event.sha256}


def _cross_check(report: ChainReport) -> None:
    """Revocations and certificates against the events that record them. Read after the walk: an
    event it saw was committed with its row, so the row is visible now unless it was deleted."""
    revoked = set(Revocation.objects.values_list("certificate__number", flat=True))
    for number, event_id in sorted(report.revoked_events.items()):
        if number not in revoked:
            report.problems.append(
                f"certificate {number} was revoked (audit event #{event_id}) but its revocation is missing "
                "from the database: it was deleted"
            )
    for number in sorted(revoked - set(report.revoked_events)):
        if AuditEvent.objects.filter(action=REVOKED, detail__startswith=number + ": ").exists():
            continue  # revoked while the walk ran: its event came after the events read
        report.problems.append(f"the revocation of {number} has no audit event: the log was altered")
    numbers = set(Certificate.objects.values_list("number", flat=True))
    for number, event_id in sorted(report.issued_events.items()):
        if number not in numbers:
            report.problems.append(
                f"certificate {number} was issued (audit event #{event_id}) but is missing from the database"
            )


def chain_verify() -> ChainReport:
    """Every link, every hash, and revocations against their events."""
    report = ChainReport()
    _walk(report)  # an append meanwhile only extends the chain past what was read
    _cross_check(report)
    return report


def certificate_problem(*, number: str, audit_head: Any) -> str:
    """'' when the audit log verifies and still holds the head this certificate sealed (if it
    sealed one: certificates issued before the chain carry none), else what is wrong."""
    report = chain_verify()
    problems = list(report.problems)
    if isinstance(audit_head, dict):
        found = report.hashes.get(int(audit_head.get("id") or 0))
        if found != audit_head.get("sha256"):
            problems.insert(
                0,
                f"the audit event #{audit_head.get('id')} that {number} sealed as the log's head at issue is "
                + ("missing" if found is None else "altered"),
            )
    if not problems:
        return ""
    mine = [p for p in problems if number and number in p]
    shown = (mine or problems)[:3]
    more = len(problems) - len(shown)
    return (
        "this portal's audit log was tampered with, so its record of this certificate cannot be trusted: "
        + "; ".join(shown)
        + (f" (and {more} more: run `kiln audit verify`)" if more else "")
    )
