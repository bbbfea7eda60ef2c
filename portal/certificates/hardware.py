"""Hardware identities bound to a certificate: sealed per node, and compared with the live nodes.

A check kind declares which of its text measurements name a physical part
(`Presentation.hardware`, checks/core/presentation.py: a chassis serial, a GPU's serial and UUID, a
NIC's GUID and firmware). When a certificate is built, each node's entry gains

    "hardware": {"items": [PLAN ITEM KEY, ...],
                 "parts": [{"part": "GPU", "key": "3", "serial": "...", "uuid": "...", "vbios": "..."}, ...]}

from the node's cited results: `items` are the plan items whose results named at least one part
(the ones `kiln verify --against` runs again), `parts` one entry per part and key, its fields as
the node reported them, null where the node did not report one (never invented).

`hardware_verify` reads the same identities from the live nodes (the same checks, over the
cluster's SSH with its host keys: portal/execution) and compares them with the sealed ones: a part
whose identifying field differs was swapped, one whose other field differs (firmware) changed; a
sealed part not found now is missing, one found now but not sealed is extra. A node that cannot be
read, or a sealed field the node does not report now, is "could not tell", never a difference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from checks import presentation_of
from checks.core.base import Check, Measurement, NodeContext, ParamsError, get_check, run_check
from checks.core.presentation import HARDWARE_PARTS, HardwareIdentity
from portal.certificates.evidence import MEASUREMENT_COLUMNS

NAME, TEXT, GPU, LABELS = (MEASUREMENT_COLUMNS.index(c) for c in ("name", "text", "gpu", "labels"))
# Nodes read at once: each read waits on SSH (about a second for the probe), so a 1,000-node
# cluster is read in about half a minute; the worker's own fan-out default (KILN_FANOUT) is 32 too.
MAX_PARALLEL = 32
# `kiln verify --against`'s exit codes beyond the certificate's own (0-5, kiln_verify).
DIFFERS_EXIT = 6  # a sealed part was swapped, changed, is missing, or an extra one is there
COULD_NOT_TELL_EXIT = 7  # no difference found, but some node or part could not be read
SWAPPED, CHANGED, MISSING, EXTRA = "swapped", "changed", "missing", "extra"
_DIGITS = re.compile(r"(\d+)")


def _natural(text: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(text)]


def _part_order(part: dict[str, Any]) -> tuple[int, list[Any]]:
    kind = part["part"]
    return (HARDWARE_PARTS.index(kind) if kind in HARDWARE_PARTS else len(HARDWARE_PARTS), _natural(part["key"]))


def part_name(part: str, key: str) -> str:
    """How a report names a part: "GPU 3", "NIC mlx5_0", "chassis"."""
    return f"{part} {key}" if key else part


def _key(ident: HardwareIdentity, row: Sequence[Any]) -> str | None:
    if ident.key == "gpu":
        return None if row[GPU] is None else str(row[GPU])
    if ident.key:
        value = (row[LABELS] or {}).get(ident.key)
        return str(value) if value not in (None, "") else None
    return ""


def identities(rows: Iterable[Sequence[Any]], declared: Sequence[HardwareIdentity]) -> list[dict[str, Any]]:
    """The parts named by measurement rows (evidence.MEASUREMENT_COLUMNS) under the declarations."""
    by_name: dict[str, list[HardwareIdentity]] = {}
    for ident in declared:
        by_name.setdefault(ident.measurement, []).append(ident)
    parts: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        for ident in by_name.get(row[NAME], ()):
            key = _key(ident, row)
            if key is None:
                continue
            entry = parts.setdefault((ident.part, key), {"part": ident.part, "key": key})
            entry.setdefault(ident.field, row[TEXT] or None)
    return sorted(parts.values(), key=_part_order)


def node_hardware(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A node's sealed "hardware" from its cited results' evidence records (evidence.Loaded.record)."""
    items: set[str] = set()
    parts: list[dict[str, Any]] = []
    for record in records:
        found = identities(record["measurements"], presentation_of(record["kind"]).hardware)
        if found:
            items.add(record["item_key"])
            parts += found
    return {"items": sorted(items), "parts": sorted(parts, key=_part_order)}


def rows_of(measurements: Iterable[Measurement]) -> list[list[Any]]:
    """Live measurements as evidence rows, so they are read exactly as the sealed ones were."""
    out = []
    for m in measurements:
        row: list[Any] = [None] * len(MEASUREMENT_COLUMNS)
        row[NAME], row[TEXT], row[GPU], row[LABELS] = m.name, m.text, m.gpu, dict(m.labels or {})
        out.append(row)
    return out


# --- the comparison ------------------------------------------------------------------------------


@dataclass
class Difference:
    """One part that is not what the certificate sealed. `fields`: (field, sealed, now)."""

    node: str
    part: str
    key: str
    change: str
    fields: list[tuple[str, str | None, str | None]]

    def line(self) -> str:
        name = part_name(self.part, self.key)
        if self.change == MISSING:
            said = ", ".join(f"{f} {old}" for f, old, _ in self.fields if old)
            return (
                f"{self.node}: {name} missing: sealed {said or 'with no identity reported'}, not found on the node now"
            )
        if self.change == EXTRA:
            said = ", ".join(f"{f} {new}" for f, _, new in self.fields if new)
            return f"{self.node}: {name} extra: {said or 'a part'} found on the node, not in the certificate"
        said = "; ".join(f"{f} {old} (sealed) -> {new} (now)" for f, old, new in self.fields)
        return f"{self.node}: {name} {self.change}: {said}"


@dataclass
class HardwareCheck:
    """What `hardware_verify` found: the differences, what it could not tell, and notes."""

    cluster: str
    nodes_compared: int = 0
    parts_compared: int = 0
    differences: list[Difference] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return bool(self.differences)

    @property
    def complete(self) -> bool:
        return not self.unknown

    @property
    def detail(self) -> str:
        if self.differences:
            return f"{len(self.differences)} part(s) differ from the certificate on cluster {self.cluster}"
        if self.unknown:
            return f"no difference found, but {len(self.unknown)} thing(s) could not be read on cluster {self.cluster}"
        return (
            f"the {self.parts_compared} sealed part(s) of {self.nodes_compared} node(s) are the ones on cluster "
            f"{self.cluster} now"
        )

    @property
    def exit_code(self) -> int:
        return DIFFERS_EXIT if self.differs else (COULD_NOT_TELL_EXIT if self.unknown else 0)

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "exit_code": self.exit_code,
            "detail": self.detail,
            "nodes_compared": self.nodes_compared,
            "parts_compared": self.parts_compared,
            "differences": [{**asdict(d), "text": d.line()} for d in self.differences],
            "could_not_tell": list(self.unknown),
            "notes": list(self.notes),
        }


Change = list[tuple[str, str | None, str | None]]


def compare_node(
    node: str, sealed: list[dict[str, Any]], now: list[dict[str, Any]], found: HardwareCheck, fields_read: set[str]
) -> None:
    """Add one node's differences (and what it could not tell) to `found`. `fields_read`: the
    "part/field" pairs the live read declares, so a field no check reads now is "not read now"."""
    live = {(p["part"], p["key"]): p for p in now}
    for part in sealed:
        here = live.pop((part["part"], part["key"]), None)
        fields = [(f, v) for f, v in part.items() if f not in ("part", "key")]
        found.parts_compared += 1
        if here is None:
            found.differences.append(
                Difference(node, part["part"], part["key"], MISSING, [(f, v, None) for f, v in fields])
            )
            continue
        swapped, changed = _compare_fields(node, part, fields, here, found, fields_read)
        if swapped or changed:
            change = SWAPPED if swapped else CHANGED
            found.differences.append(Difference(node, part["part"], part["key"], change, swapped + changed))
    for part in live.values():
        extra: Change = [(f, None, v) for f, v in part.items() if f not in ("part", "key")]
        found.differences.append(Difference(node, part["part"], part["key"], EXTRA, extra))


def _compare_fields(
    node: str,
    part: dict[str, Any],
    fields: list[tuple[str, Any]],
    here: dict[str, Any],
    found: HardwareCheck,
    fields_read: set[str],
) -> tuple[Change, Change]:
    """(identifying fields that differ, other fields that differ) of one part found on the node."""
    swapped: Change = []
    changed: Change = []
    name = part_name(part["part"], part["key"])
    for f, old in fields:
        new = here.get(f)
        if old is None:
            if new is not None:
                found.notes.append(f"{node}: {name} {f} {new} now: not sealed (not reported at acceptance)")
        elif new is None:
            why = "not reported now" if f"{part['part']}/{f}" in fields_read else "not read now"
            found.unknown.append(f"{node}: {name} {f}: sealed {old}, {why}")
        elif new != old:
            (swapped if _identifies(part["part"], f) else changed).append((f, old, new))
    return swapped, changed


_IDENTIFYING: dict[tuple[str, str], bool] = {}


def _identifies(part: str, field_name: str) -> bool:
    """Whether a difference in this field means another part (a serial) rather than a changed one
    (firmware), by the declarations of every registered kind; unknown fields identify."""
    if not _IDENTIFYING:
        from checks import presented

        for _, shown in presented():
            for ident in shown.hardware:
                _IDENTIFYING[(ident.part, ident.field)] = ident.identifies
    return _IDENTIFYING.get((part, field_name), True)


# --- reading the live nodes -----------------------------------------------------------------------


@dataclass
class _Read:
    """One item to read again on one node: its check, params, thresholds."""

    item_key: str
    check: Check
    params: Any
    thresholds: Any


def _reads(keys: list[str], items: dict[str, dict[str, Any]]) -> tuple[list[_Read], list[str]]:
    reads, problems = [], []
    for key in keys:
        item = items.get(key)
        if item is None:
            problems.append(f"plan item {key!r} is not in the certificate's plan")
            continue
        try:
            check = get_check(item["kind"])
            params = check.make_params(dict(item.get("params") or {}))
            thresholds = check.make_thresholds(dict(item.get("thresholds") or {}))
        except (KeyError, ParamsError) as exc:
            problems.append(f"plan item {key!r} cannot be run by this portal: {exc}")
            continue
        reads.append(_Read(key, check, params, thresholds))
    return reads, problems


def _read_node(node: Any, reads: list[_Read]) -> tuple[list[dict[str, Any]], set[str], list[str]]:
    """(parts, "part/field" pairs read, problems) of one live node, over one connection."""
    from portal.execution.execution import node_target
    from portal.runs.pairs import run_commands
    from worker.ssh import TransportError, open_transport

    context = NodeContext(
        hostname=node.hostname,
        expected_gpus=node.expected_gpus,
        address=node.address,
        settings=dict(node.cluster.check_settings or {}),
        rack=node.rack,
        scheduler=node.cluster.scheduler,
    )
    try:
        transport = open_transport(node_target(node))
    except TransportError as exc:
        return [], set(), [f"{exc.kind}: {exc.message}"]
    parts: list[dict[str, Any]] = []
    fields: set[str] = set()
    problems: list[str] = []
    try:
        for read in reads:
            declared = presentation_of(read.check.key).hardware
            outputs = run_commands(transport, read.check.commands(read.params, context))
            measurements, verdict = run_check(read.check, read.params, read.thresholds, outputs, context)
            if not measurements:
                problems.append(f"{read.item_key}: {verdict.reason}")
                continue
            # A declared identity counts as read only when the node answered with it: a BMC that did
            # not answer leaves its PSUs "not read now", never "missing".
            named = {m.name for m in measurements}
            fields |= {f"{i.part}/{i.field}" for i in declared if i.measurement in named}
            parts += identities(rows_of(measurements), declared)
    except TransportError as exc:
        problems.append(f"{exc.kind}: {exc.message}")
    finally:
        transport.close()
    return parts, fields, problems


def hardware_verify(*, payload: dict[str, Any], cluster: Any, max_parallel: int = MAX_PARALLEL) -> HardwareCheck:
    """Compare the hardware a certificate seals with what the nodes of `cluster` report now.
    `payload` is the verified payload's summary with its "hardware" (seal.sealed_hardware)."""
    found = HardwareCheck(cluster=cluster.name)
    sealed = payload.get("hardware") or {}
    if not sealed.get("nodes"):
        found.unknown.append(
            f"certificate {payload.get('number')} ({payload.get('format')}) seals no hardware identities: "
            "nothing to compare"
        )
        return found
    named = (payload.get("cluster") or {}).get("name")
    if named and named != cluster.name:
        found.notes.append(f"the certificate is for cluster {named}; compared with cluster {cluster.name}")
    jobs = _jobs(sealed, cluster, found)
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(jobs) or 1))) as pool:
        results = list(pool.map(lambda job: _read_node(job[1], job[2]), jobs))
    for (entry, node, _), (parts, fields, problems) in zip(jobs, results, strict=True):
        host = node.hostname
        found.unknown += [f"{host}: could not tell: {p}" for p in problems]
        if not fields:
            continue
        found.nodes_compared += 1
        _compare_read(host, entry["hardware"].get("parts") or [], parts, fields, found)
    return found


def _compare_read(
    host: str, sealed_parts: list[dict[str, Any]], parts: list[dict[str, Any]], fields: set[str], found: HardwareCheck
) -> None:
    """One read node against its sealed parts, kind of part by kind of part."""
    read_kinds = {f.split("/", 1)[0] for f in fields}
    sealed_kinds = {p["part"] for p in sealed_parts}
    # A kind of part only a failed read names (the BMC did not answer) is could-not-tell, not
    # missing; a kind the acceptance sealed none of (its BMC did not answer then) is not extra.
    compare_node(
        host,
        [p for p in sealed_parts if p["part"] in read_kinds],
        [p for p in parts if p["part"] in sealed_kinds],
        found,
        fields,
    )
    found.unknown += [f"{host}: could not tell: {kind} not read now" for kind in sorted(sealed_kinds - read_kinds)]
    for kind in sorted({p["part"] for p in parts} - sealed_kinds):
        count = sum(1 for p in parts if p["part"] == kind)
        found.notes.append(f"{host}: {count} {kind} part(s) read now, none sealed (not read at acceptance)")


def _jobs(sealed: dict[str, Any], cluster: Any, found: HardwareCheck) -> list[tuple[dict[str, Any], Any, list[_Read]]]:
    """(sealed node entry, its Node, what to read) per node that can be read; the others are noted."""
    from portal.inventory.models import Node

    nodes = {n.hostname: n for n in Node.objects.filter(cluster=cluster).select_related("cluster")}
    items = sealed.get("items") or {}
    jobs = []
    for entry in sealed["nodes"]:
        host = entry["hostname"]
        if host not in nodes:
            found.unknown.append(f"{host}: could not tell: not a node of cluster {cluster.name}")
            continue
        reads, problems = _reads(entry["hardware"].get("items") or [], items)
        found.unknown += [f"{host}: could not tell: {p}" for p in problems]
        if reads:
            jobs.append((entry, nodes[host], reads))
    return jobs


def certificate_hardware_verify(*, verdict: Any, cluster: Any) -> HardwareCheck:
    """`hardware_verify` for a verdict of verification.certificate_verify(hardware=True): a
    certificate that did not verify is not compared (a forged payload's serials prove nothing)."""
    from portal.certificates import seal

    if verdict.status not in (seal.VALID, seal.REVOKED) or not verdict.payload:
        found = HardwareCheck(cluster=cluster.name)
        found.unknown.append("not compared: the certificate itself did not verify")
        return found
    return hardware_verify(payload=verdict.payload, cluster=cluster)
