"""Writes for clusters and nodes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.inventory import importers, nodesets
from portal.inventory.importers.plan import Action, ImportPlan, make_plan
from portal.inventory.importers.records import NODE_FIELDS, ImportFormatError, NodeRecord
from portal.inventory.models import DEFAULT_QUEUE, Cluster, Node


class InventoryError(ValueError):
    """Bad inventory input; the message says what and where, and nothing was written. `fields` maps
    a model field to its messages where the model's validation refused it (forms show them there)."""

    def __init__(self, message: str, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or {}


def cluster_create(
    *,
    name: str,
    ssh_user: str = "root",
    ssh_key_path: str = "",
    known_hosts_path: str = "",
    jump_host: str = "",
    profile: str = "H100-SXM-8",
    transport: str = "ssh",
    ssh_port: int = 22,
    customer: str = "",
    site: str = "",
    queue: str = DEFAULT_QUEUE,
) -> Cluster:
    known_hosts = ""
    if known_hosts_path:
        try:
            known_hosts = Path(known_hosts_path).read_text()
        except OSError as exc:
            raise InventoryError(f"cannot read known_hosts {known_hosts_path}: {exc.strerror}") from None
    if ssh_key_path and not Path(ssh_key_path).is_file():
        raise InventoryError(f"SSH key {ssh_key_path} does not exist (the path is read by the workers)")
    cluster = Cluster(
        name=name,
        ssh_user=ssh_user,
        ssh_key_path=ssh_key_path,
        known_hosts=known_hosts,
        jump_host=jump_host,
        profile=profile,
        transport=transport,
        ssh_port=ssh_port,
        customer=customer,
        site=site,
        queue=queue,
    )
    _refuse_taken_name(cluster)
    _validate(cluster)
    cluster.save()
    return cluster


def _refuse_taken_name(cluster: Cluster) -> None:
    """The same refusal of a taken name for the command line and the pages (before full_clean's own
    'Cluster with this Name already exists.')."""
    if Cluster.objects.filter(name=cluster.name).exclude(pk=cluster.pk).exists():
        raise InventoryError(f"cluster {cluster.name!r} already exists", fields={"name": ["already exists"]})


# What `kiln_cluster update` may change: where the cluster is and which workers reach it. The
# fields that choose what runs on a Kiln host (transport, key path) stay with the admin's
# superusers (portal/roles.py SUPERUSER_FIELDS). The acceptance plan and check overhead only
# change what the plan pickers offer and estimate.
UPDATABLE_FIELDS = ("queue", "site", "customer", "acceptance_plan", "check_overhead_s")


def cluster_update(*, cluster: Cluster, changes: dict[str, Any]) -> list[str]:
    """Change some of UPDATABLE_FIELDS; returns the fields that changed. Runs already started keep
    the queue they froze (portal/runs/queues.py); new runs use the new one."""
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InventoryError(f"cannot change {', '.join(unknown)} here")
    changed = [field for field, value in changes.items() if getattr(cluster, field) != value]
    for field in changed:
        setattr(cluster, field, changes[field])
    if changed:
        _validate(cluster)
        cluster.save(update_fields=changed)
    return changed


def cluster_save(*, cluster: Cluster, fields: dict[str, Any]) -> Cluster:
    """Create (an unsaved `cluster`) or change a cluster from field values, validated as the model
    says (full_clean) and with the key path checked as cluster_create does. The REST API calls it."""
    for key, value in fields.items():
        setattr(cluster, key, value)
    if fields.get("ssh_key_path") and not Path(fields["ssh_key_path"]).is_file():
        raise InventoryError(
            f"SSH key {fields['ssh_key_path']} does not exist (the path is read by the workers)",
            fields={"ssh_key_path": ["does not exist (the path is read by the workers)"]},
        )
    if "name" in fields:
        _refuse_taken_name(cluster)
    _validate(cluster)
    cluster.save()
    return cluster


def _validate(obj: Cluster | Node, *, unique: bool = True) -> None:
    """full_clean, as InventoryError; `unique=False` skips the uniqueness queries where the caller
    has already matched the object against every row it could collide with."""
    try:
        obj.full_clean(validate_unique=unique, validate_constraints=unique)
    except ValidationError as exc:
        details = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
        raise InventoryError(details, fields=exc.message_dict) from None


def expand(pattern: str, *, what: str) -> list[str]:
    try:
        return nodesets.expand(pattern)  # bounded: refused before expanding when too large
    except nodesets.NodeSetError as exc:
        raise InventoryError(f"{what} {pattern[:80]!r}: {exc}") from None


@dataclass
class AddReport:
    created: list[str]
    updated: list[str]


@transaction.atomic
def nodes_add(
    *,
    cluster: Cluster,
    hostnames: str,
    addresses: str = "",
    fields: dict[str, Any] | None = None,
    dry_run: bool = False,
) -> AddReport:
    """Add nodes from a node set (`gpu[001-064]`); `addresses` is a node set of the same length or
    one address for one node. Existing nodes are updated, never duplicated. A dry run validates
    every node the same way and writes nothing (the add form's preview)."""
    names = expand(hostnames, what="node set")
    if addresses:
        address_list = expand(addresses, what="address set") if "[" in addresses else [addresses]
        if len(address_list) != len(names):
            raise InventoryError(f"{len(names)} hostnames but {len(address_list)} addresses")
    else:
        address_list = [""] * len(names)
    report = AddReport(created=[], updated=[])
    # Every node of the cluster in one query (a query per name made 5,000 names take 25 s), locked
    # when writing: a name is then either one of these or new, and the set names each once.
    nodes = Node.objects.filter(cluster=cluster)
    by_name = {n.hostname: n for n in (nodes if dry_run else nodes.select_for_update())}
    for hostname, address in zip(names, address_list, strict=True):
        values = {"address": address, **(fields or {})}
        node = by_name.get(hostname)
        if node is None:
            node = Node(cluster=cluster, hostname=hostname, **values)
            report.created.append(hostname)
        else:
            for key, value in values.items():
                if value or key != "address":
                    setattr(node, key, value)
            report.updated.append(hostname)
        try:
            _validate(node, unique=False)
        except InventoryError as exc:
            # Which node of the set: gpu017's address is not the set's first one.
            raise InventoryError(f"{hostname}: {exc}", fields=exc.fields) from None
        if not dry_run:
            node.save()
    return report


# What the node page's edit form changes; the cluster and the environment of the local transport
# (server code only) stay as they are.
NODE_EDITABLE_FIELDS = ("hostname", "address", "ssh_port", "rack", "position", "group", "serial", "expected_gpus")


def node_save(*, node: Node, fields: dict[str, Any]) -> Node:
    """Change one node's NODE_EDITABLE_FIELDS, validated as the model says (full_clean: a hostname
    another node of the cluster has is refused)."""
    unknown = sorted(set(fields) - set(NODE_EDITABLE_FIELDS))
    if unknown:
        raise InventoryError(f"cannot change {', '.join(unknown)} here")
    for key, value in fields.items():
        setattr(node, key, value)
    _validate(node)
    node.save()
    return node


CSV_FIELDS = importers.kiln_csv.CSV_FIELDS


def nodes_import_csv(*, cluster: Cluster, text: str) -> AddReport:
    """Import nodes from Kiln's CSV (importers/kiln_csv.py); `hostname` is required. All rows or none."""
    try:
        records = importers.parse_text("csv", text)
    except ImportFormatError as exc:
        raise InventoryError(str(exc)) from None
    plan = nodes_import(cluster=cluster, records=records)
    unchanged = plan.of(Action.UPDATE) + plan.of(Action.UNCHANGED)
    return AddReport(created=[c.hostname for c in plan.of(Action.CREATE)], updated=[c.hostname for c in unchanged])


def nodes_import_file(*, cluster: Cluster, fmt: str, data: bytes, dry_run: bool = False) -> ImportPlan:
    """Import a file in one of importers.FORMATS; a dry run plans and validates, and writes nothing."""
    try:
        records = importers.parse(fmt, data)
    except ImportFormatError as exc:
        raise InventoryError(str(exc)) from None
    return nodes_import(cluster=cluster, records=records, dry_run=dry_run)


@transaction.atomic
def nodes_import(*, cluster: Cluster, records: list[NodeRecord], dry_run: bool = False) -> ImportPlan:
    """Plan the records against the cluster's nodes, validate every node they create or change,
    then (unless a dry run) save them all, or none when one is invalid."""
    nodes = Node.objects.filter(cluster=cluster)
    by_name = {n.hostname: n for n in (nodes if dry_run else nodes.select_for_update())}
    existing = {name: {f: getattr(node, f) for f in NODE_FIELDS} for name, node in by_name.items()}
    plan = make_plan(records, existing)
    pending = []
    for change in plan.changes:
        if change.action not in (Action.CREATE, Action.UPDATE):
            continue
        node = by_name.get(change.hostname) or Node(cluster=cluster, hostname=change.hostname)
        for key, value in change.record.fields.items():
            setattr(node, key, value)
        try:
            _validate(node)
        except InventoryError as exc:
            raise InventoryError(f"{change.record.where} ({change.hostname}): {exc}") from None
        pending.append(node)
    if not dry_run:
        for node in pending:
            node.save()
    return plan
