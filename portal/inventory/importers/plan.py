"""The change plan of an import: each record against the node of the same hostname, if any.
Pure: the service reads the existing nodes, and writes the plan when it is not a dry run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from portal.inventory.importers.records import FieldValue, NodeRecord


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    SKIP = "skip"


@dataclass(frozen=True)
class Change:
    """What the import does to one node; `diffs` lists (field, old, new) for an update (for a
    create, old is None)."""

    action: Action
    record: NodeRecord
    diffs: tuple[tuple[str, FieldValue, FieldValue], ...] = ()

    @property
    def hostname(self) -> str:
        return self.record.hostname

    def line(self) -> str:
        name = self.hostname or "(no name)"
        extra = [s for s in (self.record.state, self.record.gpu_product, self.record.driver) if s]
        info = f"  [{'; '.join(extra)}]" if extra else ""
        if self.action == Action.SKIP:
            return f"skip       {name} ({self.record.where}): {self.record.skip_reason}{info}"
        if self.action == Action.CREATE:
            values = ", ".join(f"{f}={new!r}" for f, _, new in self.diffs if new not in ("", None))
            return f"create     {name}{': ' + values if values else ''}{info}"
        if self.action == Action.UPDATE:
            values = ", ".join(f"{f}: {old!r} -> {new!r}" for f, old, new in self.diffs)
            return f"update     {name}: {values}{info}"
        return f"unchanged  {name}{info}"


@dataclass
class ImportPlan:
    changes: list[Change] = field(default_factory=list)

    def of(self, action: Action) -> list[Change]:
        return [c for c in self.changes if c.action == action]

    @property
    def warnings(self) -> list[str]:
        return [w for c in self.changes if c.action != Action.SKIP for w in c.record.warnings]

    def summary(self) -> str:
        counts = {a: len(self.of(a)) for a in Action}
        return (
            f"{counts[Action.CREATE]} to create, {counts[Action.UPDATE]} to update, "
            f"{counts[Action.UNCHANGED]} unchanged, {counts[Action.SKIP]} skipped"
        )

    def lines(self) -> list[str]:
        return [c.line() for c in self.changes] + [f"warning: {w}" for w in self.warnings]


def make_plan(records: Sequence[NodeRecord], existing: Mapping[str, Mapping[str, FieldValue]]) -> ImportPlan:
    """`existing` maps each hostname of the cluster to its current field values."""
    plan = ImportPlan()
    for record in records:
        if record.skip_reason:
            plan.changes.append(Change(Action.SKIP, record))
            continue
        current = existing.get(record.hostname)
        if current is None:
            created = tuple((f, None, v) for f, v in record.fields.items())
            plan.changes.append(Change(Action.CREATE, record, created))
            continue
        diffs: tuple[tuple[str, FieldValue, FieldValue], ...] = tuple(
            (f, current.get(f), v) for f, v in record.fields.items() if current.get(f) != v
        )
        plan.changes.append(Change(Action.UPDATE if diffs else Action.UNCHANGED, record, diffs))
    return plan
