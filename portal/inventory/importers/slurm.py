"""Slurm nodes: `scontrol show node` text, and the JSON of `scontrol show nodes --json`,
`sinfo --json` and slurmrestd's GET /slurm/v0.0.4x/nodes (the same data_parser node schema).

Mapping: NodeName -> hostname; NodeAddr -> address ('' when it is the node name: SSH then uses the
hostname); the GPU count of Gres -> expected_gpus; the *first* partition listed -> group (Slurm lists
a node's partitions in slurm.conf order; a node in several has no single right answer, so the
plan says which one was taken). State and the GPU type of Gres are shown, never stored.
"""

from __future__ import annotations

import re
from typing import Any

from portal.inventory.importers.records import (
    FieldValue,
    ImportFormatError,
    NodeRecord,
    load_json,
    object_at,
    storable,
    text_value,
)

# `Key=` at the start of a line or after whitespace; a value runs to the next key (OS= and Reason=
# hold spaces).
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
_PARENS = re.compile(r"\([^)]*\)")

# Slurm node states (man sinfo, NODE STATE CODES) that deserve a word before checks run there.
_STATE_WARNINGS = {
    "DRAIN": "checks will compete with nothing but it may be broken",
    "DRAINING": "checks will compete with the jobs still draining, and it may be broken",
    "DRAINED": "checks will compete with nothing but it may be broken",
    "DOWN": "it may be unreachable or broken; its checks may end in error",
    "FAIL": "it may be unreachable or broken; its checks may end in error",
    "NOT_RESPONDING": "slurmctld cannot reach it; its checks may end in error",
    "POWERED_DOWN": "it is powered off; its checks will end in error until it boots",
    "POWER_DOWN": "it is powered off; its checks will end in error until it boots",
    "ALLOCATED": "jobs run on it: checks will compete with them and may disturb them",
    "MIXED": "jobs run on part of it: checks will compete with them and may disturb them",
    "COMPLETING": "jobs are finishing on it: checks may compete with them",
    "MAINT": "it is reserved for maintenance",
    "REBOOT_REQUESTED": "a reboot is pending",
}


def gres_gpus(gres: str) -> tuple[int, str]:
    """(GPU count, GPU type) of a Gres string: 'gpu:H100:8(S:0-1)' -> (8, 'H100'), 'gpu:4' -> (4, ''),
    'gpu:a100:2,gpu:v100:2' -> (4, 'a100,v100'), '' or '(null)' -> (0, '')."""
    count, types = 0, []
    for entry in _PARENS.sub("", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu":
            continue
        # gres.conf: a gres without a count is one device.
        last = parts[-1] if len(parts) > 1 else "1"
        number = int(last) if last.isdigit() else 1
        count += number
        if len(parts) >= 3 or (len(parts) == 2 and not last.isdigit()):
            types.append(parts[1])
    return count, ",".join(dict.fromkeys(types))


def _record(
    *, name: str, where: str, addr: str, gres: str, partitions: list[str], state: list[str], reason: str
) -> NodeRecord:
    gpus, gpu_type = gres_gpus(gres)
    state_text = "+".join(s for s in state if s)
    fields: dict[str, FieldValue] = {"address": "" if addr in ("", name) else addr}
    if partitions:
        fields["group"] = partitions[0][:64]
    if gpus:
        fields["expected_gpus"] = gpus
    warnings = []
    for flag in state:
        advice = _STATE_WARNINGS.get(flag.rstrip("*~#!%$@^-"))
        if advice:
            because = f" ({reason})" if reason else ""
            warnings.append(f"{name} is {state_text} in Slurm{because}: {advice}")
            break
    if len(partitions) > 1:
        warnings.append(f"{name} is in partitions {','.join(partitions)}: group set to the first, {partitions[0]}")
    return NodeRecord(
        hostname=name,
        where=where,
        fields=fields,
        state=state_text,
        gpu_product=gpu_type,
        warnings=tuple(warnings),
        skip_reason="" if gpus else f"no GPU in Slurm's Gres ({gres or 'empty'}): not a GPU node",
    )


def _blocks(text: str) -> list[tuple[int, dict[str, str]]]:
    """(first line number, Key -> value) for each node of scontrol's text."""
    blocks: list[tuple[int, dict[str, str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        keys = list(_KEY.finditer(line))
        if not keys or line[: keys[0].start()].strip():
            raise ImportFormatError(
                f"line {number}: not `scontrol show node` output (expected Key=value pairs): {line.strip()[:60]!r}"
            )
        if keys[0].group(1) == "NodeName":
            blocks.append((number, {}))
        elif not blocks:
            raise ImportFormatError(f"line {number}: expected NodeName= before {keys[0].group(1)}=")
        for i, key in enumerate(keys):
            end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
            blocks[-1][1][key.group(1)] = line[key.end() : end].strip()
    return blocks


def parse_scontrol(text: str) -> list[NodeRecord]:
    """`scontrol show node [-o]` text: one NodeName= block (or line, with -o) per node."""
    blocks = _blocks(text)
    if not blocks:
        raise ImportFormatError("no NodeName= found: is this `scontrol show node` output?")
    records = []
    for number, values in blocks:
        name = values.get("NodeName", "")
        if not name:
            raise ImportFormatError(f"line {number}: NodeName is empty")
        gres = values.get("Gres", "")
        partitions = [p for p in values.get("Partitions", "").split(",") if p and p != "(null)"]
        records.append(
            _record(
                name=name,
                where=f"line {number}",
                addr=values.get("NodeAddr", ""),
                gres="" if gres == "(null)" else gres,
                partitions=partitions,
                state=values.get("State", "").split("+"),
                reason=values.get("Reason", ""),
            )
        )
    return records


def _strings(node: dict[str, Any], key: str, *, where: str) -> list[str]:
    value = node.get(key)
    if value is None:
        return []
    if isinstance(value, str):  # data_parser before v0.0.40 gave state as one string
        return [v for v in re.split(r"[+,]", storable(value, key=key, where=where)) if v]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImportFormatError(f"{where}: {key} should be a list of strings")
    return [storable(v, key=key, where=where) for v in value]


def parse_json(text: str) -> list[NodeRecord]:
    """`{"nodes": [{"name", "address", "gres", "partitions", "state": [...], "reason"}, ...]}`."""
    data = object_at(load_json(text, what="Slurm"), where="the document")
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise ImportFormatError('no "nodes" list: is this `scontrol show nodes --json` or slurmrestd output?')
    records = []
    for index, item in enumerate(nodes):
        where = f"nodes[{index}]"
        node = object_at(item, where=where)
        name = text_value(node, "name", where=where)
        if not name:
            raise ImportFormatError(f"{where}: no name")
        records.append(
            _record(
                name=name,
                where=where,
                addr=text_value(node, "address", where=where),
                gres=text_value(node, "gres", where=where),
                partitions=_strings(node, "partitions", where=where),
                state=_strings(node, "state", where=where),
                reason=text_value(node, "reason", where=where),
            )
        )
    return records
