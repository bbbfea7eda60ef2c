"""Writes of the facility model. Each validates the whole item (the model's rules and the ones across
rows: PDU names per cluster, phases the feeds use, a node's shares adding up to 1) and writes in one
transaction, or raises FacilityError and writes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Model, RestrictedError

from checks.soak.circuits import SHARE_SUM_TOLERANCE
from portal.facility import credentials
from portal.facility.models import CoolingLoop, EndpointFields, NodeFeed, Pdu, Rack, Ups
from portal.inventory.models import Cluster, Node

FacilityItem = Rack | Pdu | Ups | CoolingLoop


class FacilityError(ValueError):
    """Bad facility input: the message names the item and the field; nothing was written. `fields`
    maps a field to its message where one field is at fault (forms show it there)."""

    def __init__(self, message: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or {}


@dataclass(frozen=True)
class CredentialChange:
    """What a form or the admin asks for an endpoint's credential: `clear` it, or set what is given
    (an empty user name or password keeps the stored one). repr() shows neither."""

    username: str = ""
    password: str = ""
    clear: bool = False

    def __repr__(self) -> str:
        user = "<set>" if self.username else "<empty>"
        return f"CredentialChange(username={user}, password=<hidden>, clear={self.clear})"

    __str__ = __repr__

    @property
    def sets(self) -> bool:
        return bool(self.username or self.password)


@dataclass(frozen=True)
class FeedSpec:
    """One explicit feed of a node, as entered: a PDU (by name), a 1-based phase, a share of 0-1."""

    pdu: str
    phase: int
    share: float


def validated(item: Model) -> None:
    """full_clean(), its errors as one FacilityError ('field: message; ...')."""
    try:
        item.full_clean()
    except ValidationError as exc:
        found = {field: " ".join(msgs) for field, msgs in exc.message_dict.items()}
        details = "; ".join(f"field {field}: {msg}" if field != "__all__" else msg for field, msg in found.items())
        raise FacilityError(details, found) from None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(parts.scheme)


def credential_apply(*, item: EndpointFields, change: CredentialChange | None, stored_url: str, stored: str) -> None:
    """Set item.credential_sealed from the change (not saved). A stored credential is only ever sent
    to the origin (scheme, host, port) it was entered for: moving the endpoint elsewhere needs the
    credential entered again or cleared, so that whoever may edit the URL cannot redirect the
    password to a host of their choosing."""
    change = change or CredentialChange()
    if change.clear:
        item.credential_sealed = ""
        return
    moved = _origin(item.endpoint_url) != _origin(stored_url)
    if stored and moved and not change.password:
        raise FacilityError(
            "field endpoint_url: the endpoint moved to another host, and its stored credential is only sent to "
            "the host it was entered for: enter the password again, or clear the credential",
            {"endpoint_url": "moved to another host: enter the password again, or clear the credential"},
        )
    if not change.sets:
        item.credential_sealed = stored
        return
    try:
        old = credentials.unseal(stored) if stored and not (change.username and change.password) else None
        new = credentials.Credential(
            change.username or (old.username if old else ""), change.password or (old.password if old else "")
        )
        if not (new.username and new.password):
            raise FacilityError(
                "field password: a credential needs both a user name and a password", {"password": "enter both"}
            )
        item.credential_sealed = credentials.seal(new)
    except credentials.CredentialError as exc:
        raise FacilityError(str(exc), {"password": str(exc)}) from None


def _stored(model: type[Pdu] | type[CoolingLoop], pk: int | None) -> tuple[str, str]:
    """The endpoint URL and sealed credential in the database (what the form's instance replaced)."""
    row = model.objects.filter(pk=pk).values_list("endpoint_url", "credential_sealed").first() if pk else None
    return row or ("", "")


def _racks_of(cluster: Cluster, racks: Sequence[Rack]) -> list[Rack]:
    strangers = [r.name for r in racks if r.cluster_id != cluster.pk]
    if strangers:
        raise FacilityError(
            f"field racks: {', '.join(strangers)} not in cluster {cluster.name}", {"racks": "another cluster's rack"}
        )
    return list(racks)


@transaction.atomic
def rack_save(*, rack: Rack) -> Rack:
    """Create or update a rack. Renaming it renames it on the cluster's nodes (Node.rack) too."""
    old = Rack.objects.filter(pk=rack.pk).values_list("name", flat=True).first() if rack.pk else None
    validated(rack)
    rack.save()
    if old is not None and old != rack.name:
        Node.objects.filter(cluster_id=rack.cluster_id, rack=old).update(rack=rack.name)
    return rack


@transaction.atomic
def pdu_save(*, pdu: Pdu, credential: CredentialChange | None = None) -> Pdu:
    """Create or update a PDU (its cluster is its rack's); refused when fewer phases would orphan
    feeds that name a higher phase."""
    if pdu.rack_id is None:
        raise FacilityError("field rack: a PDU belongs to a rack", {"rack": "required"})
    pdu.cluster_id = pdu.rack.cluster_id
    if isinstance(pdu.breaker_a, list):
        pdu.breaker_a = [float(a) if isinstance(a, int) and not isinstance(a, bool) else a for a in pdu.breaker_a]
    validated(pdu)
    if pdu.pk:
        above = NodeFeed.objects.filter(pdu=pdu, phase__gt=pdu.phases).values_list("node__hostname", flat=True)
        if above:
            raise FacilityError(
                f"field phases: nodes {', '.join(sorted(set(above)))} are fed from a phase above {pdu.phases} of "
                f"PDU {pdu.name}; "
                "change their feeds first",
                {"phases": "feeds use a higher phase"},
            )
    url, sealed = _stored(Pdu, pdu.pk)
    credential_apply(item=pdu, change=credential, stored_url=url, stored=sealed)
    pdu.save()
    return pdu


@transaction.atomic
def ups_save(*, ups: Ups, racks: Sequence[Rack]) -> Ups:
    validated(ups)
    chosen = _racks_of(ups.cluster, racks)
    ups.save()
    ups.racks.set(chosen)
    return ups


@transaction.atomic
def loop_save(*, loop: CoolingLoop, racks: Sequence[Rack], credential: CredentialChange | None = None) -> CoolingLoop:
    validated(loop)
    chosen = _racks_of(loop.cluster, racks)
    url, sealed = _stored(CoolingLoop, loop.pk)
    credential_apply(item=loop, change=credential, stored_url=url, stored=sealed)
    loop.save()
    loop.racks.set(chosen)
    return loop


@transaction.atomic
def item_delete(*, item: FacilityItem) -> None:
    """Delete a rack (with its PDUs), a PDU, a UPS or a loop. A PDU that explicit feeds name is kept:
    deleting it would leave those nodes' shares short of 1."""
    try:
        item.delete()
    except RestrictedError as exc:
        nodes = sorted({f.node.hostname for f in exc.restricted_objects if isinstance(f, NodeFeed)})
        raise FacilityError(
            f"{item._meta.verbose_name} {item}: nodes {', '.join(nodes)} draw from it (explicit feeds): "
            "change their feeds first"
        ) from None


def _feed_rows(node: Node, feeds: Sequence[FeedSpec]) -> list[NodeFeed]:
    known = {p.name: p for p in Pdu.objects.filter(cluster_id=node.cluster_id, name__in=[f.pdu for f in feeds])}
    rows, seen = [], set()
    for spec in feeds:
        pdu = known.get(spec.pdu)
        if pdu is None:
            message = f"node {node.hostname}, field pdu: no PDU {spec.pdu!r} in its cluster"
            raise FacilityError(message, {"pdu": "unknown PDU"})
        if (spec.pdu, spec.phase) in seen:
            raise FacilityError(f"node {node.hostname}, field phase: PDU {spec.pdu} phase {spec.phase} given twice")
        seen.add((spec.pdu, spec.phase))
        row = NodeFeed(node=node, pdu=pdu, phase=spec.phase, share=spec.share)
        try:
            validated(row)
        except FacilityError as exc:
            raise FacilityError(f"node {node.hostname}, PDU {spec.pdu} phase {spec.phase}: {exc}", exc.fields) from None
        rows.append(row)
    return rows


@transaction.atomic
def node_feeds_set(*, node: Node, feeds: Sequence[FeedSpec]) -> list[NodeFeed]:
    """Replace a node's explicit feeds. Their shares must add up to 1 (within the judge's rounding
    tolerance, checks/soak/circuits.py); no feeds at all returns the node to the default."""
    NodeFeed.objects.filter(node=node).delete()  # first: the new rows are checked against what stays
    rows = _feed_rows(node, feeds)
    total = sum(r.share for r in rows)
    if rows and abs(total - 1.0) > SHARE_SUM_TOLERANCE:
        raise FacilityError(
            f"node {node.hostname}, field share: feed shares add up to {total:g}, not 1 (all of its power is on "
            "some PDU)",
            {"share": f"shares add up to {total:g}, not 1"},
        )
    NodeFeed.objects.bulk_create(rows)
    return rows
