"""Node inventory import from what sites already have: Kiln's CSV, Slurm (scontrol text or JSON),
Kubernetes (kubectl get nodes -o json) and NetBox's device export. Parsers are pure functions from
text to NodeRecords; plan.py compares them with a cluster's nodes; services.nodes_import writes."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError

from portal.inventory.importers import k8s, kiln_csv, netbox, slurm
from portal.inventory.importers.records import ImportFormatError, NodeRecord

FORMATS: dict[str, tuple[str, Callable[[str], list[NodeRecord]]]] = {
    "csv": ("Kiln CSV (hostname,address,rack,...)", kiln_csv.parse),
    "slurm": ("Slurm: scontrol show node", slurm.parse_scontrol),
    "slurm-json": ("Slurm JSON: scontrol show nodes --json, sinfo --json, slurmrestd", slurm.parse_json),
    "k8s": ("Kubernetes: kubectl get nodes -o json", k8s.parse),
    "netbox": ("NetBox device list export (CSV)", netbox.parse),
}
# A kubectl node object is ~24 KB (tests/fixtures/k8s-nodes), a slurmrestd node ~2.6 KB: 64 MiB
# holds 2,500 Kubernetes nodes or 25,000 Slurm nodes, and bounds what one upload can hold in memory.
MAX_IMPORT_BYTES = 64 * 1024 * 1024

__all__ = ["FORMATS", "MAX_IMPORT_BYTES", "ImportFormatError", "NodeRecord", "decode", "parse", "parse_text"]


def decode(data: bytes) -> str:
    """The file's text: UTF-8 (a byte-order mark allowed), bounded, and not binary."""
    if len(data) > MAX_IMPORT_BYTES:
        raise ImportFormatError(f"the file is over {MAX_IMPORT_BYTES} bytes; split it (a node inventory is smaller)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ImportFormatError(f"line {line}: not UTF-8 text (byte {exc.start}): is it a binary file?") from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise ImportFormatError(f"line {line}: a NUL byte: binary data, not a text export")
    return text


def parse(fmt: str, data: bytes) -> list[NodeRecord]:
    """Records of a file in format `fmt`; every hostname valid and seen once."""
    if fmt not in FORMATS:
        raise ImportFormatError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    return parse_text(fmt, decode(data))


def parse_text(fmt: str, text: str) -> list[NodeRecord]:
    from portal.inventory.models import hostname_validator

    if not text.strip():
        raise ImportFormatError("the file is empty")
    records = FORMATS[fmt][1](text)
    seen: dict[str, str] = {}
    for record in records:
        if record.skip_reason and not record.hostname:
            continue
        try:
            hostname_validator(record.hostname)
        except ValidationError:
            raise ImportFormatError(
                f"{record.where} ({record.hostname[:80]}): hostname: not a valid hostname "
                "(letters, digits, '.' and '-' only; check the format chosen)"
            ) from None
        if record.hostname in seen:
            raise ImportFormatError(
                f"{record.where}: {record.hostname} appears twice (first at {seen[record.hostname]})"
            )
        seen[record.hostname] = record.where
    return records
