"""Writes for clusters and nodes."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.inventory import nodesets
from portal.inventory.models import Cluster, Node


class InventoryError(ValueError):
    """Bad inventory input; the message says what and where, and nothing was written."""


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
    )
    _validate(cluster)
    cluster.save()
    return cluster


def cluster_save(*, cluster: Cluster, fields: dict[str, Any]) -> Cluster:
    """Create (an unsaved `cluster`) or change a cluster from field values, validated as the model
    says (full_clean) and with the key path checked as cluster_create does. The REST API calls it."""
    for key, value in fields.items():
        setattr(cluster, key, value)
    if fields.get("ssh_key_path") and not Path(fields["ssh_key_path"]).is_file():
        raise InventoryError(f"SSH key {fields['ssh_key_path']} does not exist (the path is read by the workers)")
    _validate(cluster)
    cluster.save()
    return cluster


def _validate(obj: Cluster | Node) -> None:
    try:
        obj.full_clean()
    except ValidationError as exc:
        details = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
        raise InventoryError(details) from None


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
    *, cluster: Cluster, hostnames: str, addresses: str = "", fields: dict[str, Any] | None = None
) -> AddReport:
    """Add nodes from a node set (`gpu[001-064]`); `addresses` is a node set of the same length or
    one address for one node. Existing nodes are updated, never duplicated."""
    names = expand(hostnames, what="node set")
    if addresses:
        address_list = expand(addresses, what="address set") if "[" in addresses else [addresses]
        if len(address_list) != len(names):
            raise InventoryError(f"{len(names)} hostnames but {len(address_list)} addresses")
    else:
        address_list = [""] * len(names)
    report = AddReport(created=[], updated=[])
    for hostname, address in zip(names, address_list, strict=True):
        values = {"address": address, **(fields or {})}
        node = Node.objects.filter(cluster=cluster, hostname=hostname).first()
        if node is None:
            node = Node(cluster=cluster, hostname=hostname, **values)
            report.created.append(hostname)
        else:
            for key, value in values.items():
                if value or key != "address":
                    setattr(node, key, value)
            report.updated.append(hostname)
        _validate(node)
        node.save()
    return report


CSV_FIELDS = ("hostname", "address", "ssh_port", "rack", "position", "group", "serial", "expected_gpus")


@transaction.atomic
def nodes_import_csv(*, cluster: Cluster, text: str) -> AddReport:
    """Import nodes from CSV with a header row; `hostname` is required. All rows or none."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "hostname" not in [f.strip() for f in reader.fieldnames]:
        raise InventoryError(
            f"CSV needs a header row with a 'hostname' column; columns allowed: {', '.join(CSV_FIELDS)}"
        )
    unknown = sorted({f.strip() for f in reader.fieldnames} - set(CSV_FIELDS))
    if unknown:
        raise InventoryError(f"unknown CSV column(s): {', '.join(unknown)}; allowed: {', '.join(CSV_FIELDS)}")
    report = AddReport(created=[], updated=[])
    seen: set[str] = set()
    for line_number, row in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
        hostname = row.pop("hostname", "")
        if not hostname:
            raise InventoryError(f"line {line_number}: empty hostname")
        if hostname in seen:
            raise InventoryError(f"line {line_number}: {hostname} appears twice")
        seen.add(hostname)
        values: dict[str, Any] = {}
        for key, value in row.items():
            if key in ("ssh_port", "expected_gpus"):
                if value:
                    try:
                        values[key] = int(value)
                    except ValueError:
                        raise InventoryError(f"line {line_number}: {key} {value!r} is not a whole number") from None
                else:
                    values[key] = None
            else:
                values[key] = value
        node = Node.objects.filter(cluster=cluster, hostname=hostname).first()
        if node is None:
            node = Node(cluster=cluster, hostname=hostname)
            report.created.append(hostname)
        else:
            report.updated.append(hostname)
        for key, value in values.items():
            setattr(node, key, value)
        try:
            _validate(node)
        except InventoryError as exc:
            raise InventoryError(f"line {line_number} ({hostname}): {exc}") from None
        node.save()
    if not seen:
        raise InventoryError("CSV has no rows")
    return report
