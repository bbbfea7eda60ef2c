"""What every importer returns: one NodeRecord per node, holding only the Node fields its source
knows (a Slurm node has no rack; a NetBox device has no GPU count), so an import never blanks a
field that another source filled."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Node fields an importer may set (portal/inventory/models.py); nothing else reaches the database.
NODE_FIELDS = ("address", "ssh_port", "rack", "position", "group", "serial", "expected_gpus")
FieldValue = str | int | None
# Every control character (C0, DEL, C1: an escape sequence in a group name reaches every terminal
# that lists it) and lone surrogates (JSON's \ud800: no UTF-8 for it, so the database refuses it).
# Tab and newline too: no imported field is more than one line.
_UNSTORABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class ImportFormatError(ValueError):
    """Input that is not what the chosen format reads; the message names the line or the item."""


@dataclass(frozen=True)
class NodeRecord:
    """One node as a source describes it. `where` locates it in the file ("line 3", "nodes[2]").

    `fields` holds only what the source knows; `state`, `gpu_product` and `driver` are shown in
    the plan (and warned about) but have no Node field, so they are never stored."""

    hostname: str
    where: str
    fields: dict[str, FieldValue] = field(default_factory=dict)
    state: str = ""
    gpu_product: str = ""
    driver: str = ""
    warnings: tuple[str, ...] = ()
    skip_reason: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.fields) - set(NODE_FIELDS)
        if unknown:
            raise ValueError(f"not Node fields: {sorted(unknown)}")
        # Whatever an importer read, nothing unstorable is stored or shown.
        named: list[tuple[str, object]] = [("hostname", self.hostname), *self.fields.items()]
        named += [("state", self.state), ("GPU product", self.gpu_product), ("driver", self.driver)]
        named += [("a warning", w) for w in self.warnings]
        for name, value in named:
            if isinstance(value, str):
                storable(value, key=name, where=self.where)


def storable(value: str, *, key: str, where: str) -> str:
    """`value`, unless it holds a control character or a lone surrogate: then an error naming the field."""
    match = _UNSTORABLE.search(value)
    if match is None:
        return value
    code = ord(match.group())
    what = f"a lone surrogate (U+{code:04X})" if code >= 0xD800 else f"the control character U+{code:04X}"
    raise ImportFormatError(f"{where}: {key} holds {what}, which Kiln does not import")


def load_json(text: str, *, what: str) -> Any:
    """Parsed JSON, or an error naming the line and column where it broke (a truncated file ends
    early, the wrong format fails on line 1)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(
            f"not {what} JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
            + (" (the file looks truncated)" if exc.pos >= len(text.rstrip()) else "")
        ) from None


def text_value(obj: dict[str, Any], key: str, *, where: str) -> str:
    """A string member, '' when absent or null; anything else is malformed."""
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ImportFormatError(f"{where}: {key} should be a string, not {type(value).__name__}")
    return storable(value, key=key, where=where).strip()


def object_at(value: Any, *, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ImportFormatError(f"{where}: expected an object, found {type(value).__name__}")
    return value
